"""Reject request bodies over the configured size with a 413 that names the limit."""

from __future__ import annotations

from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send


def _describe(limit: int) -> str:
    return f"request body exceeds the limit of {limit} bytes (setting CLOSER_MAX_UPLOAD_BYTES)"


class BodySizeLimit:
    """Checks Content-Length up front and counts streamed bytes, for chunked bodies too."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = Headers(scope=scope).get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            response = JSONResponse({"detail": _describe(self.max_bytes)}, status_code=413)
            await response(scope, receive, send)
            return
        received = 0

        async def counted_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    # An HTTPException passes through FastAPI's body parsing unchanged and
                    # becomes a JSON 413 in its exception handler.
                    raise HTTPException(413, _describe(self.max_bytes))
            return message

        await self.app(scope, counted_receive, send)
