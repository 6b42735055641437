"""The workspace's uploads page: items (CSV, JSON, ZIP of images) and triplets, through
the same services as the API. The page's script sends the file with a progress bar and
swaps in the result this route renders; without scripts the form posts as usual."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Literal

from fastapi import APIRouter, Form, Header, Request, UploadFile
from fastapi.responses import HTMLResponse
from sqlalchemy import exists, select

from app.auth.deps import ChangingPage, ViewingPage
from app.core.db import ordinal_in_project, roll_back
from app.core.deps import SessionDep, SettingsDep
from app.core.errors import InvalidUpload, ServiceError
from app.core.fields import RowId
from app.core.pages import render as page
from app.core.routes import StrictJSONRoute
from app.items.service import ingest_items
from app.models import Judgement, Upload
from app.projects.service import get_project
from app.triplets.judged import ingest_judgements
from app.triplets.service import ingest_triplets
from app.uploads.api import as_uploaded

router = APIRouter(include_in_schema=False, route_class=StrictJSONRoute)


class UploadForm(StrEnum):
    """The page's upload forms: what a file holds."""

    items = "items"
    triplets = "triplets"
    judgements = "judgements"  # odd-one-out and rank judgements (app/triplets/judged.py)


RECENT_UPLOADS = 20


def _recent(session, project) -> list[tuple[int, Upload, str]]:
    """The newest uploads, each with its number in the project and what it held (a
    judgement file is stored as an upload of answers)."""
    uploads = session.scalars(
        select(Upload)
        .where(Upload.project_id == project.id, Upload.pending.is_(False))
        .order_by(Upload.id.desc())
        .limit(RECENT_UPLOADS)
    ).all()
    # One index probe an upload (a judgement file may hold millions of rows).
    judged = set(
        session.scalars(
            select(Upload.id).where(
                Upload.id.in_([upload.id for upload in uploads]),
                exists().where(Judgement.upload_id == Upload.id),
            )
        )
    )
    return [
        (
            ordinal_in_project(session, Upload, project.id, upload.id),
            upload,
            UploadForm.judgements.value if upload.id in judged else upload.kind.value,
        )
        for upload in uploads
    ]


@router.get("/projects/{project_id}/uploads", response_class=HTMLResponse, name="uploads_page")
def uploads_page(project_id: RowId, request: Request, session: SessionDep, researcher: ViewingPage):
    project = get_project(session=session, researcher=researcher, project_id=project_id)
    return page(
        request,
        "uploads/uploads.html",
        {
            "researcher": researcher,
            "project": project,
            "tab": "uploads",
            "uploads": _recent(session, project),
            "kinds": list(UploadForm),
        },
    )


@router.post(
    "/projects/{project_id}/uploads/{kind}", response_class=HTMLResponse, name="upload_form"
)
def upload(
    project_id: RowId,
    kind: UploadForm,
    file: UploadFile,
    request: Request,
    session: SessionDep,
    settings: SettingsDep,
    researcher: ChangingPage,
    on_error: Annotated[Literal["reject", "skip"], Form()] = "reject",
    split: Annotated[Literal["train", "test"], Form()] = "train",
    idempotency_key: Annotated[str | None, Header(max_length=100)] = None,
):
    project = get_project(session=session, researcher=researcher, project_id=project_id)
    context = {"researcher": researcher, "project": project, "tab": "uploads", "kind": kind}
    try:
        if kind is UploadForm.items:
            result = ingest_items(
                session=session,
                settings=settings,
                store=request.app.state.images,
                project=project,
                upload=as_uploaded(file),
                requested_format=None,
                idempotency_key=idempotency_key,
                on_error=on_error,
            )
        elif kind is UploadForm.judgements:
            result = ingest_judgements(
                session=session,
                settings=settings,
                project=project,
                upload=as_uploaded(file),
                requested_format=None,
                idempotency_key=idempotency_key,
                on_error=on_error,
            )
        else:
            result = ingest_triplets(
                session=session,
                settings=settings,
                project=project,
                upload=as_uploaded(file),
                requested_format=None,
                idempotency_key=idempotency_key,
                on_error=on_error,
                split=split,
            )
    except InvalidUpload as rejected:
        roll_back(session)
        context.update(
            problems=rejected.problems,
            truncated=len(rejected.detail) > len(rejected.problems),
            filename=file.filename,
        )
        status_code = rejected.status_code
    except ServiceError as refused:
        roll_back(session)
        context.update(refusal=refused.detail, filename=file.filename)
        status_code = refused.status_code
    else:
        number = ordinal_in_project(session, Upload, project.id, result.upload_id)
        context.update(result=result, filename=file.filename, upload_number=number)
        status_code = 200 if result.replayed else 201
    if request.headers.get("X-Closer-Partial"):
        return page(request, "uploads/_result.html", context, status_code)
    context["uploads"] = _recent(session, project)
    return page(request, "uploads/uploads.html", context, status_code)
