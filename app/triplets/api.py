from __future__ import annotations

from collections.abc import Iterator
from enum import StrEnum
from typing import Annotated, Literal

from fastapi import APIRouter, Query, Request, Response, UploadFile, status
from fastapi.responses import StreamingResponse

from app.auth.access import Action
from app.auth.deps import Changing, Exporting
from app.core import parquet
from app.core.deps import SessionDep, SettingsDep
from app.core.errors import Forbidden
from app.core.fields import RowId
from app.core.routes import StrictJSONRoute
from app.models import TripletSource
from app.projects.service import get_project
from app.triplets import judged, service
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
    parquet = "parquet"


MEDIA_TYPES = {
    AnswerExportFormat.csv: "text/csv; charset=utf-8",
    AnswerExportFormat.json: "application/json",
    AnswerExportFormat.parquet: parquet.MEDIA_TYPE,
}
EXPORT_CONTENT: dict[str, dict] = {"text/csv": {}, "application/json": {}, parquet.MEDIA_TYPE: {}}


def _download(body, format: AnswerExportFormat, name: str) -> StreamingResponse:
    """A streamed export, downloaded as `name` with the format's extension."""
    media_type = MEDIA_TYPES[format]
    return StreamingResponse(
        body,
        media_type=media_type,
        headers={"Content-Disposition": f'attachment; filename="{name}.{format.value}"'},
    )


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
    researcher: Changing,
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
    responses={200: {"content": EXPORT_CONTENT}},
)
def export_triplets(
    project_id: RowId,
    request: Request,
    session: SessionDep,
    researcher: Exporting,
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
    only some: by source, by rater, with or without excluded raters). Raters are named
    by pseudonym (rater-<id>) for a viewer who may not see their ids."""
    project = get_project(session=session, researcher=researcher, project_id=project_id)
    engine = request.app.state.engine
    identified = request.state.caller.may(Action.identify)
    if rater is not None and not identified:
        raise Forbidden(
            "rater: your role in this project shows raters by pseudonym, not by their "
            "platform ids, so it cannot filter by one"
        )
    only = service.ExportFilter(
        source=source, rater=rater, raters=raters.value, identified=identified
    )
    body: Iterator[str] | Iterator[bytes]
    if format is AnswerExportFormat.json:
        body = service.export_triplets_json(engine, project.id, only)
    elif format is AnswerExportFormat.parquet:
        from app.triplets import parquet as exports  # pyarrow: see app.core.parquet

        body = exports.export_triplets_parquet(engine, project.id, only)
    else:
        body = service.export_triplets_csv(engine, project.id, only)
    return _download(body, format, f"project-{project.id}-triplets")


judgements_router = APIRouter(
    prefix="/projects/{project_id}/judgements", tags=["triplets"], route_class=StrictJSONRoute
)


@judgements_router.post(
    "", status_code=status.HTTP_201_CREATED, response_model=UploadOut, responses=UPLOAD_RESPONSES
)
def upload_judgements(
    project_id: RowId,
    file: UploadFile,
    response: Response,
    session: SessionDep,
    settings: SettingsDep,
    researcher: Changing,
    idempotency_key: IdempotencyKey = None,
    on_error: OnError = "reject",
    format: Annotated[
        FileFormat | None, Query(description="Defaults to the file's extension")
    ] = None,
):
    """Add odd-one-out and rank ("pick k of n") judgements by item key, all or nothing;
    each is stored with the triplets it implies (odd-one-out: 2; rank: every pick closer
    to the reference than every item left, and each pick closer than the later picks).

    CSV columns `item1`…`itemN` (the items shown, 3 to 12, in display order), `pick1`…
    (what was picked, in order: the odd one, or the picks most like the reference, most
    alike first), `reference` (rank), and optionally `format` (odd_one_out or rank),
    `rater`, `response_time_ms`, `created_at`, `judgement` (as exported; not read).
    THINGS' odd-one-out files map to `item1,item2,item3,pick1`; ImageNet-HSJ's 2-of-8
    trials to `reference,item1…item8,pick1,pick2`. JSON: an array of objects with
    `items` and `picks` (lists of keys) and the same optional fields. `rows` in the
    answer counts the judgements.
    """
    project = get_project(session=session, researcher=researcher, project_id=project_id)
    result = judged.ingest_judgements(
        session=session,
        settings=settings,
        project=project,
        upload=as_uploaded(file),
        requested_format=format,
        idempotency_key=idempotency_key,
        on_error=on_error,
    )
    return upload_response(result, response)


@judgements_router.get(
    "/export",
    response_class=StreamingResponse,
    responses={200: {"content": EXPORT_CONTENT}},
)
def export_judgements(
    project_id: RowId,
    request: Request,
    session: SessionDep,
    researcher: Exporting,
    format: AnswerExportFormat = AnswerExportFormat.csv,
):
    """Every odd-one-out and rank judgement of the project as shown and answered, oldest
    first, streamed, in the layout the upload takes (`judgement` is its id; the
    triplets export lists the triplets each implied among the answers). Raters are
    named by pseudonym (rater-<id>) for a viewer who may not see their ids."""
    project = get_project(session=session, researcher=researcher, project_id=project_id)
    identified = request.state.caller.may(Action.identify)
    engine = request.app.state.engine
    body: Iterator[str] | Iterator[bytes]
    if format is AnswerExportFormat.json:
        body = judged.export_judgements_json(engine, project.id, identified)
    elif format is AnswerExportFormat.parquet:
        from app.triplets import parquet as exports  # pyarrow: see app.core.parquet

        body = exports.export_judgements_parquet(engine, project.id, identified)
    else:
        body = judged.export_judgements_csv(engine, project.id, identified)
    return _download(body, format, f"project-{project.id}-judgements")
