from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Literal

from fastapi import APIRouter, Query, Request, Response, UploadFile, status
from fastapi.responses import StreamingResponse

from app.auth.deps import CurrentResearcher
from app.core.deps import SessionDep, SettingsDep
from app.core.fields import RowId
from app.core.routes import StrictJSONRoute
from app.models import TripletSource
from app.projects.service import get_project
from app.triplets import service
from app.uploads.api import (
    UPLOAD_RESPONSES,
    IdempotencyKey,
    OnError,
    as_uploaded,
    upload_response,
)
from app.uploads.files import FileFormat
from app.uploads.schemas import UploadOut

router = APIRouter(
    prefix="/projects/{project_id}/triplets", tags=["triplets"], route_class=StrictJSONRoute
)


class AnswerExportFormat(StrEnum):
    csv = "csv"
    json = "json"


class RaterFilter(StrEnum):
    all = "all"
    counted = "counted"
    excluded = "excluded"


@router.post(
    "", status_code=status.HTTP_201_CREATED, response_model=UploadOut, responses=UPLOAD_RESPONSES
)
def upload_triplets(
    project_id: RowId,
    file: UploadFile,
    response: Response,
    session: SessionDep,
    settings: SettingsDep,
    researcher: CurrentResearcher,
    idempotency_key: IdempotencyKey = None,
    on_error: OnError = "reject",
    format: Annotated[
        FileFormat | None, Query(description="Defaults to the file's extension")
    ] = None,
    split: Annotated[
        Literal["train", "test"],
        Query(
            description="'test': the file is the researcher's test split, never fitted, every "
            "model measured on it (a `split` column decides per row)"
        ),
    ] = "train",
):
    """Add existing triplets by item key, all or nothing.

    CSV columns `anchor`, `closer`, `farther` (the anchor is closer to `closer`), and
    optionally `source`, `rater`, `response_time_ms`, `created_at` (as exported), `split`
    (`train` or `test`). JSON: an array of `[anchor, closer, farther]` lists or of objects
    with those fields.
    """
    project = get_project(session=session, researcher=researcher, project_id=project_id)
    result = service.ingest_triplets(
        session=session,
        settings=settings,
        project=project,
        upload=as_uploaded(file),
        requested_format=format,
        idempotency_key=idempotency_key,
        on_error=on_error,
        split=split,
    )
    return upload_response(result, response)


@router.get(
    "/export",
    response_class=StreamingResponse,
    responses={200: {"content": {"text/csv": {}, "application/json": {}}}},
)
def export_triplets(
    project_id: RowId,
    request: Request,
    session: SessionDep,
    researcher: CurrentResearcher,
    format: AnswerExportFormat = AnswerExportFormat.csv,
    source: Annotated[
        TripletSource | None, Query(description="Only answers from this source")
    ] = None,
    rater: Annotated[
        str | None,
        Query(min_length=1, max_length=200, description="Only this rater's answers (their id)"),
    ] = None,
    raters: Annotated[
        RaterFilter,
        Query(
            description="all: every answer; counted: leave out excluded raters' answers; "
            "excluded: only theirs"
        ),
    ] = RaterFilter.all,
):
    """Every triplet of the project by item key, oldest first, streamed (optionally
    only some: by source, by rater, with or without excluded raters)."""
    project = get_project(session=session, researcher=researcher, project_id=project_id)
    engine = request.app.state.engine
    only = service.ExportFilter(source=source, rater=rater, raters=raters.value)
    if format is AnswerExportFormat.json:
        body = service.export_triplets_json(engine, project.id, only)
        media_type = "application/json"
    else:
        body = service.export_triplets_csv(engine, project.id, only)
        media_type = "text/csv; charset=utf-8"
    filename = f"project-{project.id}-triplets.{format.value}"
    return StreamingResponse(
        body,
        media_type=media_type,
        headers={"Content-Disposition": f'attachment; filename="{filename}"'},
    )
