"""Errors the services raise and how the API turns them into JSON `{"detail": ...}`."""

from __future__ import annotations

import logging
import math
import re
import reprlib
import sqlite3
from dataclasses import asdict, dataclass
from typing import Any

import psycopg
import sqlalchemy.exc
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from psycopg_pool import PoolTimeout
from pydantic import BaseModel, Field
from sqlalchemy.orm.exc import ObjectDeletedError, StaleDataError
from starlette.exceptions import HTTPException as StarletteHTTPException

_log = logging.getLogger("closer")


class ServiceError(Exception):
    status_code = 400

    def __init__(self, detail: str | list | dict) -> None:
        super().__init__(str(detail))
        self.detail = detail


class NotFound(ServiceError):
    status_code = 404


class Forbidden(ServiceError):
    """The caller is known, and may not do this (the detail says what it would need)."""

    status_code = 403


class Conflict(ServiceError):
    status_code = 409


class Unprocessable(ServiceError):
    """Well-formed, but not what this request must send (the detail says what is)."""

    status_code = 422


class PayloadTooLarge(ServiceError):
    status_code = 413


class UnsupportedMedia(ServiceError):
    status_code = 415


@dataclass(frozen=True)
class Problem:
    """One thing wrong with an upload, located as a person would look for it."""

    file: str
    message: str
    row: int | None = None
    column: str | None = None

    @property
    def msg(self) -> str:
        where = self.file
        if self.row is not None:
            where += f", row {self.row}"
        if self.column is not None:
            where += f", column '{self.column}'"
        return f"{where}: {self.message}"


class InvalidUpload(ServiceError):
    """The upload was rejected whole; nothing was written."""

    status_code = 422

    def __init__(self, problems: list[Problem], truncated: bool = False) -> None:
        entries = [{**asdict(problem), "msg": problem.msg} for problem in problems]
        if truncated:
            entries.append({"msg": f"stopped after {len(problems)} problems; fix these first"})
        super().__init__(entries)
        self.problems = problems


def _reason(column: str | None, message: str) -> str:
    """What went wrong, without the values: rows that went wrong alike count together
    ("'x' is not one of train, test" and "'y' is not one of train, test" both read
    "not one of train, test")."""
    general = re.sub(r"\s*\([^()]*\)", "", message)  # "(first on row 3)", "('x')"
    general = re.sub(r"^'[^']*' is ", "", general)  # "'x' is not a number" -> "not a number"
    general = re.sub(r"\s*'[^']*'", "", general)  # "duplicate key 'x'" -> "duplicate key"
    general = re.sub(r"\brow \d+", "another row", general)
    general = re.sub(r"\s+", " ", general).strip(" :;,")
    if column and general.startswith(f"{column} "):  # "split: split needs a label"
        general = general[len(column) + 1 :]
    return f"{column}: {general}" if column else general


class ProblemCollector:
    """Gathers upload problems up to a limit, so one response shows many at once.

    With `skip_rows` (an upload's `on_error=skip`), a problem of a row leaves that row
    out instead: it is listed (up to the limit) and counted by reason, and the rest of
    the file is stored. A problem of the whole file still rejects it."""

    def __init__(self, limit: int, skip_rows: bool = False) -> None:
        self.limit = limit
        self.problems: list[Problem] = []
        self.truncated = False
        self.skip_rows = skip_rows
        self.count = 0  # every problem met, skipped rows' included
        self.skipped: list[Problem] = []
        self.skipped_rows: set[int] = set()
        self.skipped_by_reason: dict[str, int] = {}

    def add(self, file: str, message: str, row: int | None = None, column: str | None = None):
        self.count += 1
        if self.skip_rows and row is not None:
            self._skip(file, message, row, column)
            return
        if len(self.problems) >= self.limit:
            self.truncated = True
            raise self.error()
        self.problems.append(Problem(file=file, message=message, row=row, column=column))

    def leave_out(self, file: str, message: str, row: int) -> None:
        """A row left out whatever `skip_rows` says (a comment line): listed and counted
        with the skipped rows, so the response says where every row went."""
        self._skip(file, message, row, None)

    def _skip(self, file: str, message: str, row: int, column: str | None) -> None:
        self.skipped_rows.add(row)
        reason = _reason(column, message)
        self.skipped_by_reason[reason] = self.skipped_by_reason.get(reason, 0) + 1
        if len(self.skipped) < self.limit:
            self.skipped.append(Problem(file=file, message=message, row=row, column=column))

    @property
    def full(self) -> bool:
        return len(self.problems) >= self.limit

    def raise_if_any(self) -> None:
        if self.problems:
            raise self.error()

    def error(self) -> InvalidUpload:
        return InvalidUpload(self.problems, truncated=self.truncated)


# What a validation error repeats of the input that failed: enough to recognise it.
ECHO_CHARACTERS = 80
# Containers are shown a few levels and entries deep: a list nested 100,000 deep is not walked.
_SHORT_REPR = reprlib.Repr()
_SHORT_REPR.maxlevel, _SHORT_REPR.maxlist, _SHORT_REPR.maxdict = 3, 8, 8
_SHORT_REPR.maxstring = _SHORT_REPR.maxother = ECHO_CHARACTERS


def echo(value: Any) -> Any:
    """`value` as a validation error may repeat it: JSON-safe (no NaN, no lone surrogate)
    and short, so a 500 MB string is not sent back (nor logged) whole."""
    if value is None or isinstance(value, bool | int) and abs(value) < 2**63:
        return value
    if isinstance(value, float) and math.isfinite(value):
        return value
    text = value if isinstance(value, str) else _SHORT_REPR.repr(value)
    if len(text) > ECHO_CHARACTERS:
        text = text[:ECHO_CHARACTERS] + f"… ({len(text)} characters)"
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _short_error(error: dict) -> dict:
    short = {
        "type": error.get("type"),
        "loc": [echo(part) for part in error.get("loc", ())],
        "msg": echo(str(error.get("msg", "")))[: 4 * ECHO_CHARACTERS],
    }
    if "input" in error:
        short["input"] = echo(error["input"])
    if error.get("ctx"):
        short["ctx"] = {name: echo(value) for name, value in error["ctx"].items()}
    return short


class ErrorOut(BaseModel):
    """Every error the API answers, whatever its status."""

    detail: Any = Field(
        description="What is wrong: a message, or a list naming each field, row or limit at "
        "fault (validation and upload errors)"
    )


# The errors any API route may answer, documented once for all of them.
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorOut, "description": description}
    for status, description in {
        400: "The request cannot be carried out as it stands (the message says why)",
        401: "No valid token: a researcher's Bearer token, or a rater's X-Rater-Token",
        404: "No such resource for this caller (another researcher's is not found either)",
        409: "It conflicts with the current state (e.g. a build not complete yet)",
        413: "The body exceeds the size limit the message names",
        415: "An upload in a format this route does not take",
        422: "A field, row or limit at fault, each located",
        429: "Too many requests from this client; Retry-After says when to try again",
        503: "The database is busy or restarting; Retry-After says when to try again",
    }.items()
}


# How long a client should wait before trying again when the database cannot answer.
RETRY_AFTER_SECONDS = 2


def database_unavailable(exc: Exception) -> bool:
    """Whether a database error means "not now" (the server is down or restarting, a
    connection broke, the pool is exhausted, SQLite's write lock is held) rather than a
    fault in the request or the code."""
    if isinstance(exc, sqlite3.OperationalError):  # raised straight by FastStatement
        return _sqlite_busy(exc)
    if isinstance(exc, sqlalchemy.exc.TimeoutError | psycopg.OperationalError | PoolTimeout):
        return True  # (psycopg's own: the raters' one-call answer path, outside SQLAlchemy)
    if not isinstance(exc, sqlalchemy.exc.DBAPIError):
        return False
    if exc.connection_invalidated:
        return True
    if not isinstance(exc, sqlalchemy.exc.OperationalError | sqlalchemy.exc.InterfaceError):
        return False
    if isinstance(exc.orig, sqlite3.Error):
        return _sqlite_busy(exc.orig)
    return True


def _refers_to_deleted(exc: Exception) -> bool:
    """A foreign-key violation: what a write refers to was deleted after the request read
    it (the services check what they refer to first, so nothing else raises one)."""
    if not isinstance(exc, sqlalchemy.exc.IntegrityError):
        return False
    if isinstance(exc.orig, psycopg.errors.ForeignKeyViolation):
        return True
    return isinstance(exc.orig, sqlite3.IntegrityError) and "FOREIGN KEY" in str(exc.orig)


def _sqlite_busy(error: sqlite3.Error) -> bool:
    message = str(error).lower()
    return "locked" in message or "busy" in message


def _allowed_methods(app: FastAPI, path: str) -> list[str]:
    """The methods the API documents for `path`: a 405's Allow header must list them all,
    not only those of the first route matching the path. Literal paths are tried before
    templated ones, as the router matches them (…/raters/quality before …/raters/{id})."""
    patterns = getattr(app.state, "allowed_methods", None)
    if patterns is None:
        templates = sorted(app.openapi()["paths"].items(), key=lambda entry: entry[0].count("{"))
        patterns = [
            (re.compile("^" + re.sub(r"{[^}]+}", "[^/]+", template) + "$"), sorted(methods))
            for template, methods in templates
        ]
        app.state.allowed_methods = patterns
    for pattern, methods in patterns:
        if pattern.match(path):
            return [method.upper() for method in methods]
    return []


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(StarletteHTTPException)
    def _http_error(request: Request, exc: StarletteHTTPException) -> Response:
        headers = dict(exc.headers or {})
        if exc.status_code == 405:
            allowed = _allowed_methods(request.app, request.url.path)
            if allowed:
                headers["Allow"] = ", ".join(allowed)
        if exc.status_code in (204, 304):
            return Response(status_code=exc.status_code, headers=headers)
        return JSONResponse({"detail": exc.detail}, status_code=exc.status_code, headers=headers)

    @app.exception_handler(sqlalchemy.exc.SQLAlchemyError)
    @app.exception_handler(psycopg.OperationalError)
    @app.exception_handler(PoolTimeout)
    @app.exception_handler(sqlite3.OperationalError)
    def _database_error(request: Request, exc: Exception) -> JSONResponse:
        if isinstance(exc, StaleDataError | ObjectDeletedError) or _refers_to_deleted(exc):
            # Another request changed or deleted the row between this one's read and write
            # (say its project, deleted while this request ran): nothing was written.
            detail = "changed or deleted by another request meanwhile; reload and try again"
            return JSONResponse({"detail": detail}, status_code=409)
        if not database_unavailable(exc):
            raise exc
        reason = str(getattr(exc, "orig", None) or exc).strip() or type(exc).__name__
        _log.warning(
            "503 for %s %s: the database is unavailable (%s)",
            request.method,
            request.url.path,
            echo(reason.splitlines()[0]),
        )
        return JSONResponse(
            {"detail": "the database is busy or restarting; try again in a moment"},
            status_code=503,
            headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
        )

    @app.exception_handler(ServiceError)
    def _service_error(_request: Request, exc: ServiceError) -> JSONResponse:
        return JSONResponse(
            {"detail": exc.detail},
            status_code=exc.status_code,
            headers=getattr(exc, "headers", None),
        )

    @app.exception_handler(RequestValidationError)
    def _invalid_request(_request: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse(
            {"detail": [_short_error(error) for error in exc.errors()]}, status_code=422
        )
