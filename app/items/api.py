from __future__ import annotations

from collections.abc import Iterator
from enum import StrEnum
from typing import Annotated
from urllib.parse import quote

from fastapi import APIRouter, Query, Request, Response, UploadFile, status
from fastapi.responses import FileResponse, StreamingResponse

from app.auth.deps import Changing, Exporting, Viewing
from app.core import parquet
from app.core.deps import SessionDep, SettingsDep
from app.core.errors import NotFound
from app.core.fields import INT8_MAX, RowId
from app.core.routes import StrictJSONRoute
from app.items import curation, removal, service
from app.items.schemas import ItemDeletedOut, ItemOut, ItemPage, ItemUpdate
from app.models import Item, Split
from app.projects.service import get_project
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
    prefix="/projects/{project_id}/items", tags=["items"], route_class=StrictJSONRoute
)


class ItemExportFormat(StrEnum):
    csv = "csv"
    json = "json"
    zip = "zip"
    parquet = "parquet"


def item_out(item: Item, with_features: bool = True) -> ItemOut:
    image_url = None
    if item.image_file:
        image_url = f"/api/v1/projects/{item.project_id}/items/{quote(item.key, safe='')}/image"
    return ItemOut(
        id=item.id,
        key=item.key,
        label=item.label,
        text=item.text,
        split=item.split,
        image_url=image_url,
        media_type=item.image_type,
        clip_seconds=item.clip_seconds,
        alt=item.alt,
        created_at=item.created_at,
        features=service.decode_features(item.features) if with_features else None,
    )


@router.post(
    "", status_code=status.HTTP_201_CREATED, response_model=UploadOut, responses=UPLOAD_RESPONSES
)
def upload_items(
    project_id: RowId,
    file: UploadFile,
    request: Request,
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
    """Add items from CSV, JSON, or a ZIP of images with a CSV manifest; all or nothing.

    Columns: `key` (required, unique), `label`, `text`, `split` (train/test/unlabelled),
    `features` (numbers separated by spaces) or `feature_*` columns, and in a ZIP
    manifest `image` (the image's path inside the archive).
    """
    project = get_project(session=session, researcher=researcher, project_id=project_id)
    result = service.ingest_items(
        session=session,
        settings=settings,
        store=request.app.state.images,
        project=project,
        upload=as_uploaded(file),
        requested_format=format,
        idempotency_key=idempotency_key,
        on_error=on_error,
    )
    return upload_response(result, response)


@router.get("", response_model=ItemPage)
def list_items(
    project_id: RowId,
    session: SessionDep,
    researcher: Viewing,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Annotated[int, Query(ge=0, le=INT8_MAX)] = 0,
    split: Split | None = None,
    search: Annotated[
        str | None, Query(max_length=200, description="Part of a key, text or label (any case)")
    ] = None,
    features: Annotated[bool, Query(description="Include feature vectors")] = False,
):
    """A page of the items in upload order, each with how many answers name it."""
    project = get_project(session=session, researcher=researcher, project_id=project_id)
    items, total = curation.search_items(
        session=session, project=project, search=search, split=split, limit=limit, offset=offset
    )
    asked = curation.times_asked(session=session, project=project, item_ids=[i.id for i in items])
    return ItemPage(
        items=[item_out(i, features).model_copy(update={"answers": asked[i.id]}) for i in items],
        total=total,
        limit=limit,
        offset=offset,
    )


@router.get(
    "/export",
    response_class=StreamingResponse,
    responses={
        200: {
            "content": {
                "text/csv": {},
                "application/json": {},
                "application/zip": {},
                parquet.MEDIA_TYPE: {},
            }
        }
    },
)
def export_items(
    project_id: RowId,
    request: Request,
    session: SessionDep,
    researcher: Exporting,
    format: ItemExportFormat = ItemExportFormat.csv,
):
    """Every item of the project, streamed. `zip` holds manifest.csv and the images and
    uploads again as it is."""
    project = get_project(session=session, researcher=researcher, project_id=project_id)
    engine = request.app.state.engine
    body: Iterator[bytes] | Iterator[str]
    if format is ItemExportFormat.zip:
        body = service.export_items_zip(engine, request.app.state.images, project.id)
        media_type = "application/zip"
    elif format is ItemExportFormat.json:
        body = service.export_items_json(engine, project.id)
        media_type = "application/json"
    elif format is ItemExportFormat.parquet:
        body = service.export_items_parquet(engine, project.id)
        media_type = parquet.MEDIA_TYPE
    else:
        body = service.export_items_csv(engine, project.id)
        media_type = "text/csv; charset=utf-8"
    filename = f"project-{project.id}-items.{format.value}"
    return StreamingResponse(
        body,
        media_type=media_type,
        headers={"Content-Disposition": f'attachment; filename="{filename}"'},
    )


@router.get("/{key}", response_model=ItemOut)
def get_item(project_id: RowId, key: str, session: SessionDep, researcher: Viewing):
    project = get_project(session=session, researcher=researcher, project_id=project_id)
    return item_out(service.get_item(session=session, project=project, key=key))


@router.patch("/{key}", response_model=ItemOut)
def fix_item(
    project_id: RowId,
    key: str,
    body: ItemUpdate,
    session: SessionDep,
    researcher: Changing,
):
    """Fix an item's label or split (checked as an upload's row is). Models use it from
    their next fit; a build already running keeps the labels it started with."""
    project = get_project(session=session, researcher=researcher, project_id=project_id)
    item = service.get_item(session=session, project=project, key=key)
    changes = body.model_dump(exclude_unset=True)
    return item_out(curation.fix_item(session=session, project=project, item=item, changes=changes))


@router.delete("/{key}", response_model=ItemDeletedOut)
def delete_item(
    project_id: RowId,
    key: str,
    request: Request,
    session: SessionDep,
    researcher: Changing,
):
    """Delete an item with every answer that names it, and withdraw the queries about
    it. Refused (409) while a build's trees hold it (running, paused or complete) or a
    routing places it. Models fitted before show it until their next fit."""
    project = get_project(session=session, researcher=researcher, project_id=project_id)
    item = service.get_item(session=session, project=project, key=key)
    deleted = removal.delete_item(
        session=session, store=request.app.state.images, project=project, item=item
    )
    return ItemDeletedOut(**vars(deleted))


@router.get(
    "/{key}/image", response_class=FileResponse, responses={200: {"content": {"image/*": {}}}}
)
def get_item_image(
    project_id: RowId,
    key: str,
    request: Request,
    session: SessionDep,
    researcher: Viewing,
):
    project = get_project(session=session, researcher=researcher, project_id=project_id)
    item = service.get_item(session=session, project=project, key=key)
    if not item.image_file:
        raise NotFound(f"item '{key}' has no image")
    path = request.app.state.images.path(project.id, item.image_file)
    return FileResponse(
        path,
        media_type=item.image_type,
        headers={"Cache-Control": "private, max-age=31536000, immutable"},
    )
