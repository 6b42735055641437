"""The route class every router uses: request bodies are parsed as strict JSON.

Python's parser takes NaN, Infinity and -Infinity, which JSON does not have, and turns
1e999 into infinity; let through, they reach numeric fields unchecked and fail later as
server errors. Here they are a 422 that names them, like any other malformed body.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

from fastapi import Request, Response
from fastapi.routing import APIRoute


def _refuse_constant(name: str) -> Any:
    raise json.JSONDecodeError(f"{name} is not a JSON number", name, 0)


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise json.JSONDecodeError(f"{text[:40]} is out of range for a number", text, 0)
    return value


class StrictJSONRequest(Request):
    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            self._json = json.loads(
                await self.body(), parse_constant=_refuse_constant, parse_float=_finite
            )
        return self._json


class StrictJSONRoute(APIRoute):
    def get_route_handler(self) -> Callable[[Request], Any]:
        handler = super().get_route_handler()

        async def strict_handler(request: Request) -> Response:
            return await handler(StrictJSONRequest(request.scope, request.receive))

        return strict_handler
