"""What the upload routes share: the file parameter, idempotency and the response."""

from __future__ import annotations

from typing import Annotated

from fastapi import Header, Response, UploadFile, status

from app.uploads.files import UploadedFile
from app.uploads.schemas import UploadOut
from app.uploads.service import UploadResult

IdempotencyKey = Annotated[
    str | None,
    Header(
        min_length=1,
        max_length=100,
        description="Retrying with the same key returns the first upload's result "
        "instead of adding the rows again.",
    ),
]


UPLOAD_RESPONSES = {
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
        upload_id=result.upload_id, kind=result.kind, rows=result.rows, replayed=result.replayed
    )
