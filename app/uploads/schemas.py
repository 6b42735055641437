from __future__ import annotations

from pydantic import BaseModel, Field

from app.models import UploadKind


class SkippedRow(BaseModel):
    file: str
    row: int | None
    column: str | None
    msg: str


class UploadOut(BaseModel):
    upload_id: int
    kind: UploadKind
    rows: int
    replayed: bool = False
    skipped_rows: int = Field(
        default=0,
        description="Rows left out: comment lines (an unquoted # first), and with "
        "on_error=skip the rows something was wrong with",
    )
    skipped: list[SkippedRow] = Field(
        default_factory=list,
        description="The rows left out and why (up to CLOSER_MAX_UPLOAD_ERRORS)",
    )
    skipped_by_reason: dict[str, int] = Field(
        default_factory=dict, description="The rows left out, counted by reason"
    )
