"""Request bodies are read against a limit chosen before reading, with a 413 that names it.

A public rating link is visited by strangers, so a body from someone without a valid
researcher token may hold at most `public_bytes` (64 KiB: every rater request is far
smaller). Past that, the researcher's token is checked first, and only then are more
bytes read: up to `json_bytes` for a JSON body, `upload_bytes` for a file upload. A
stranger's 500 MB body is refused after its first 64 KiB, whatever the route.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from starlette.concurrency import run_in_threadpool
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.requests import cookie_parser
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.core.errors import database_unavailable

TOKEN_CACHE_SECONDS = 10.0
PUBLIC_LIMIT = "CLOSER_MAX_PUBLIC_BODY_BYTES, for requests without a researcher token"


class ResearcherTokens:
    """Whether a request comes from a researcher (a live bearer token, or a signed-in
    workspace session cookie), remembered for a few seconds: an upload's size check (or
    a rate limit's exemption) should not cost a query."""

    def __init__(self, verify: Callable[[str], bool], session_cookie: str | None = None) -> None:
        """`verify` takes a bearer token, or `session_cookie=<cookie>` for a cookie."""
        self.verify = verify
        self.session_cookie = session_cookie
        self._seen: dict[str, tuple[float, bool]] = {}
        self._lock = threading.Lock()

    async def from_headers(self, headers: Headers) -> bool:
        token = bearer_token(headers)
        if token is not None:
            return await self(token)
        if self.session_cookie is not None and "cookie" in headers:
            cookie = cookie_parser(headers["cookie"]).get(self.session_cookie)
            if cookie:
                return await self(f"{self.session_cookie}={cookie}")
        return False

    async def __call__(self, token: str) -> bool:
        now = time.monotonic()
        with self._lock:
            hit = self._seen.get(token)
        if hit is not None and now - hit[0] < TOKEN_CACHE_SECONDS:
            return hit[1]
        try:
            valid = await run_in_threadpool(self.verify, token)
        except Exception as error:
            # Outside the routes no handler turns a database outage into a 503: here it
            # means "not known to be a researcher" (for now), and the route says the rest.
            if not database_unavailable(error):
                raise
            return False
        with self._lock:
            if len(self._seen) > 10_000:
                self._seen.clear()
            self._seen[token] = (now, valid)
        return valid


def bearer_token(headers: Headers) -> str | None:
    """The token of an `Authorization: Bearer` header, if there is one."""
    scheme, _, token = headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer":
        return None
    return token.strip() or None


class BodyLimits:
    """Chooses each request's body limit (see the module) and enforces it while reading:
    from Content-Length up front, and by counting for chunked bodies."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        public_bytes: int,
        json_bytes: int,
        upload_bytes: int,
        researcher_tokens: ResearcherTokens,
    ) -> None:
        self.app = app
        self.public_bytes = public_bytes
        self.json_bytes = json_bytes
        self.upload_bytes = upload_bytes
        self.token_is_valid = researcher_tokens

    def _researcher_limit(self, headers: Headers) -> tuple[int, str]:
        if headers.get("content-type", "").lower().startswith("multipart/form-data"):
            return self.upload_bytes, "CLOSER_MAX_UPLOAD_BYTES"
        return self.json_bytes, "CLOSER_MAX_JSON_BYTES"

    async def _limit(self, headers: Headers) -> tuple[int, str]:
        """The limit for this request, and what it is called; checks the token."""
        if await self.token_is_valid.from_headers(headers):
            return self._researcher_limit(headers)
        return self.public_bytes, PUBLIC_LIMIT

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        length = headers.get("content-length")
        declared = int(length) if length is not None and length.isdigit() else None
        if declared is not None and declared > self.public_bytes:
            limit, name = await self._limit(headers)
            if declared > limit:
                await _too_large(limit, name)(scope, receive, send)
                return
        else:
            limit, name = self.public_bytes, PUBLIC_LIMIT
        received = 0
        checked = declared is not None and declared > self.public_bytes

        async def counted_receive() -> Message:
            nonlocal received, limit, name, checked
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit and not checked:
                    # More than a stranger may send: only now is the token looked at.
                    limit, name = await self._limit(headers)
                    checked = True
                if received > limit:
                    # An HTTPException passes through FastAPI's body parsing unchanged and
                    # becomes a JSON 413 in its exception handler.
                    raise HTTPException(413, _describe(limit, name))
            return message

        await self.app(scope, counted_receive, send)


def _describe(limit: int, name: str) -> str:
    return f"request body exceeds the limit of {limit} bytes ({name})"


def _too_large(limit: int, name: str) -> JSONResponse:
    return JSONResponse({"detail": _describe(limit, name)}, status_code=413)


# Longest request target an access log line repeats; uvicorn takes request lines of up
# to about 64 KiB, and each would otherwise be logged whole.
LOGGED_TARGET_CHARACTERS = 300


class _ShortAccessLines(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and len(args) >= 3 and isinstance(args[2], str):
            target = _without_query_values(args[2])
            if len(target) > LOGGED_TARGET_CHARACTERS:
                target = f"{target[:LOGGED_TARGET_CHARACTERS]}… ({len(target)} characters)"
            record.args = (*args[:2], target, *args[3:])
        return True


def _without_query_values(target: str) -> str:
    """The request target with its query's values left out, names kept: a query carries
    raters' platform ids (`PROLIFIC_PID`, `participant`) and sign-in link keys, none of
    which belongs in a log that operators read and keep."""
    path, mark, query = target.partition("?")
    if not mark:
        return target
    names = (pair.partition("=")[0] for pair in query.split("&") if pair)
    return path + mark + "&".join(f"{name}=…" for name in names)


def shorten_access_lines() -> None:
    """Cut the request target uvicorn's access log repeats, and leave its query's values
    out (once per process)."""
    access = logging.getLogger("uvicorn.access")
    if not any(isinstance(f, _ShortAccessLines) for f in access.filters):
        access.addFilter(_ShortAccessLines())
