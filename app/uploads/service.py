"""Upload bookkeeping shared by items and triplets: idempotent replays and limits."""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app.core.config import Settings
from app.core.errors import Conflict, Problem, ProblemCollector
from app.models import Project, Upload, UploadKind
from app.uploads.files import UploadedFile, ZipLimits, request_digest

_STILL_RUNNING = "an upload with Idempotency-Key '{key}' is already being processed; retry shortly"
ANOTHER_BODY = (
    "Idempotency-Key '{key}' was used for another request (another file or other "
    "options); a retry sends the same request, a new upload takes a new key"
)


@dataclass
class UploadResult:
    upload_id: int
    kind: UploadKind
    rows: int
    replayed: bool = False
    # on_error=skip: the rows left out, listed up to the error limit, and counted.
    skipped: list[Problem] = field(default_factory=list)
    skipped_rows: int = 0
    skipped_by_reason: dict[str, int] = field(default_factory=dict)

    def with_skipped(self, problems: ProblemCollector) -> UploadResult:
        self.skipped = problems.skipped
        self.skipped_rows = len(problems.skipped_rows)
        self.skipped_by_reason = dict(problems.skipped_by_reason)
        return self


def zip_limits(settings: Settings) -> ZipLimits:
    return ZipLimits(
        settings.max_zip_entries,
        settings.max_zip_uncompressed_bytes,
        settings.max_zip_compression_ratio,
    )


@dataclass(frozen=True)
class Retryable:
    """An upload request's Idempotency-Key (None: none sent) and its body's digest."""

    key: str | None
    digest: str | None

    @classmethod
    def of(cls, key: str | None, upload: UploadedFile, *options: object) -> Retryable:
        return cls(key, None if key is None else request_digest(upload, *options))


def find_replay(
    *, session: Session, project: Project, kind: UploadKind, request: Retryable
) -> UploadResult | None:
    """The earlier upload a retried request with the same Idempotency-Key refers to; a
    key used before for another request is refused."""
    idempotency_key = request.key
    if idempotency_key is None:
        return None
    upload = session.scalar(
        select(Upload).where(
            Upload.project_id == project.id, Upload.idempotency_key == idempotency_key
        )
    )
    if upload is None:
        return None
    if upload.kind is not kind:
        raise Conflict(
            f"Idempotency-Key '{idempotency_key}' was used for a {upload.kind.value} "
            "upload in this project"
        )
    if upload.body_digest is not None and upload.body_digest != request.digest:
        raise Conflict(ANOTHER_BODY.format(key=idempotency_key))
    if upload.pending:
        raise Conflict(_STILL_RUNNING.format(key=idempotency_key))
    return UploadResult(upload.id, upload.kind, upload.row_count, replayed=True)


def open_upload(
    *,
    session: Session,
    project: Project,
    kind: UploadKind,
    filename: str,
    request: Retryable,
) -> Upload:
    """Record the upload first, so a concurrent retry with the same key waits on it, then fails."""
    idempotency_key = request.key
    upload = Upload(
        project_id=project.id,
        kind=kind,
        filename=filename[:255],
        idempotency_key=idempotency_key,
        body_digest=request.digest,
    )
    session.add(upload)
    try:
        session.flush()  # the request's first write: on failure nothing else is lost
    except IntegrityError:
        raise Conflict(_STILL_RUNNING.format(key=idempotency_key)) from None
    return upload
