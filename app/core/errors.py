"""Errors the services raise and how the API turns them into JSON `{"detail": ...}`."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse


class ServiceError(Exception):
    status_code = 400

    def __init__(self, detail: str | list | dict) -> None:
        super().__init__(str(detail))
        self.detail = detail


class NotFound(ServiceError):
    status_code = 404


class Conflict(ServiceError):
    status_code = 409


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


class ProblemCollector:
    """Gathers upload problems up to a limit, so one response shows many at once."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.problems: list[Problem] = []
        self.truncated = False

    def add(self, file: str, message: str, row: int | None = None, column: str | None = None):
        if len(self.problems) >= self.limit:
            self.truncated = True
            raise self.error()
        self.problems.append(Problem(file=file, message=message, row=row, column=column))

    @property
    def full(self) -> bool:
        return len(self.problems) >= self.limit

    def raise_if_any(self) -> None:
        if self.problems:
            raise self.error()

    def error(self) -> InvalidUpload:
        return InvalidUpload(self.problems, truncated=self.truncated)


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ServiceError)
    def _service_error(_request: Request, exc: ServiceError) -> JSONResponse:
        return JSONResponse({"detail": exc.detail}, status_code=exc.status_code)
