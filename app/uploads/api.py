"""What the upload routes share: the file parameter, idempotency and the response."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import Header, Query, Response, UploadFile, status

from app.uploads.files import UploadedFile
from app.uploads.schemas import SkippedRow, UploadOut
from app.uploads.service import UploadResult

OnError = Annotated[
    Literal["reject", "skip"],
    Query(
        description="reject: a file with any bad row is refused whole (the default); skip: "
        "bad rows (repeated or unknown items, malformed values) are left out and listed, "
        "the rest is stored. A problem of the whole file (its format, its columns) "
        "rejects it either way."
    ),
]

IdempotencyKey = Annotated[
    str | None,
    Header(
        min_length=1,
        max_length=100,
        description="Retrying with the same key returns the first upload's result "
        "instead of adding the rows again.",
    ),
]


UPLOAD_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {"description": "A retried upload (same Idempotency-Key): the first result"},
    413: {"description": "Body over the size limit"},
    415: {"description": "A file format this upload does not take"},
    422: {
        "description": "Rejected upload, nothing written; each problem names file, row and column"
    },
}


def as_uploaded(file: UploadFile) -> UploadedFile:
    return UploadedFile(
        name=file.filename or "upload", stream=file.file, content_type=file.content_type
    )


def upload_response(result: UploadResult, response: Response) -> UploadOut:
    if result.replayed:
        response.status_code = status.HTTP_200_OK
        response.headers["Idempotent-Replayed"] = "true"
    return UploadOut(
        upload_id=result.upload_id,
        kind=result.kind,
        rows=result.rows,
        replayed=result.replayed,
        skipped_rows=result.skipped_rows,
        skipped=[
            SkippedRow(file=p.file, row=p.row, column=p.column, msg=p.msg) for p in result.skipped
        ],
        skipped_by_reason=result.skipped_by_reason,
    )
