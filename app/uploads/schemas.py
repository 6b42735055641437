from __future__ import annotations

from pydantic import BaseModel

from app.models import UploadKind


class UploadOut(BaseModel):
    upload_id: int
    kind: UploadKind
    rows: int
    replayed: bool = False
