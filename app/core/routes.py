"""The route class every router uses: what a request may carry, checked before a handler.

Python's JSON parser takes NaN, Infinity and -Infinity, which JSON does not have, turns
1e999 into infinity, spends quadratic time on a number of thousands of digits and recurses
once per level of nesting. Let through, these reach fields unchecked and fail later as
server errors. A NUL character is stored silently by SQLite and refused by PostgreSQL. Here
each of them is a 4xx that names it, like any other malformed request.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

from fastapi import HTTPException, Request, Response
from fastapi.routing import APIRoute
from starlette.datastructures import FormData

from app.core.fields import INT8_MAX

# Digits an integer field can need (2^63 has 19); the sign and a little room besides.
_MAX_INTEGER_DIGITS = 24


def _refuse_constant(name: str) -> Any:
    raise json.JSONDecodeError(f"{name} is not a JSON number", name, 0)


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise json.JSONDecodeError(f"{text[:40]} is out of range for a number", text, 0)
    return value


def _integer(text: str) -> int:
    if len(text) > _MAX_INTEGER_DIGITS:
        raise json.JSONDecodeError(f"an integer of {len(text)} digits is out of range", "", 0)
    value = int(text)
    if abs(value) > INT8_MAX:
        raise json.JSONDecodeError(f"{text} is out of range for an integer (2^63 - 1)", "", 0)
    return value


def _contains_nul(value: Any) -> bool:
    pending = [value]  # a stack, not recursion: the body may nest as deep as the parser let it
    while pending:
        value = pending.pop()
        if isinstance(value, str):
            if "\x00" in value:
                return True
        elif isinstance(value, dict):
            pending.extend(value.keys())
            pending.extend(value.values())
        elif isinstance(value, list):
            pending.extend(value)
    return False


def parse_strict_json(body: bytes) -> Any:
    """`body` as JSON, or JSONDecodeError naming what JSON or this service does not take."""
    try:
        value = json.loads(
            body, parse_constant=_refuse_constant, parse_float=_finite, parse_int=_integer
        )
    except RecursionError:
        raise json.JSONDecodeError("nested too deep", "", 0) from None
    if b"\\u0000" in body and _contains_nul(value):
        raise json.JSONDecodeError("text may not contain the NUL character (\\u0000)", "", 0)
    return value


class StrictRequest(Request):
    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            self._json = parse_strict_json(await self.body())
        return self._json

    # Starlette's form() may also be entered as a context manager; the app only awaits it.
    async def form(self, **limits: Any) -> FormData:  # type: ignore[override]
        form = await super().form(**limits)
        for name, value in form.multi_items():
            if isinstance(value, str) and "\x00" in value:
                raise HTTPException(400, f"form field '{name[:40]}' contains the NUL character")
        return form


def _check_url(request: Request) -> None:
    raw_path = request.scope.get("raw_path") or request.scope["path"].encode()
    for part, what in ((raw_path, "path"), (request.scope.get("query_string", b""), "query")):
        lowered = part.lower()
        if b"%00" in lowered or b"\x00" in lowered:
            raise HTTPException(400, f"the URL's {what} contains the NUL character (%00)")


class StrictJSONRoute(APIRoute):
    def get_route_handler(self) -> Callable[[Request], Any]:
        handler = super().get_route_handler()

        async def strict_handler(request: Request) -> Response:
            _check_url(request)
            return await handler(StrictRequest(request.scope, request.receive))

        return strict_handler
