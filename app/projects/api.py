from __future__ import annotations

from fastapi import APIRouter, Request, Response, UploadFile, status
from fastapi.responses import StreamingResponse

from app.auth.access import Action
from app.auth.deps import (
    Changing,
    ChangingCaller,
    CreatingProjects,
    DeletingProjects,
    Identifying,
    Viewing,
    ViewingAll,
)
from app.core.deps import SessionDep, SettingsDep, public_study_url
from app.core.fields import RowId
from app.core.routes import StrictJSONRoute
from app.designs import versions
from app.designs.schemas import DesignVersionOut
from app.projects import archive, service
from app.projects.schemas import (
    LinkChange,
    ProjectCreate,
    ProjectDetail,
    ProjectOut,
    ProjectUpdate,
    RaterTextsOut,
    RatingOut,
    RatingSettings,
    RatingSettingsUpdate,
)
from app.uploads.api import UPLOAD_RESPONSES, IdempotencyKey, as_uploaded

router = APIRouter(prefix="/projects", tags=["projects"], route_class=StrictJSONRoute)
# Beside /projects, not under it, where /projects/{project_id} would claim the name.
archives = APIRouter(prefix="/project-archives", tags=["projects"], route_class=StrictJSONRoute)


@router.post("", status_code=status.HTTP_201_CREATED, response_model=ProjectDetail)
def create_project(body: ProjectCreate, session: SessionDep, researcher: CreatingProjects):
    project = service.create_project(
        session=session,
        owner=researcher,
        name=body.name,
        description=body.description,
        label_type=body.label_type,
    )
    return ProjectDetail(
        **ProjectOut.model_validate(project).model_dump(), item_count=0, triplet_count=0
    )


@router.get("", response_model=list[ProjectOut])
def list_projects(session: SessionDep, caller: ViewingAll):
    """Your projects (a token limited to some: those)."""
    return service.list_projects(
        session=session, researcher=caller.researcher, only=caller.project_ids
    )


@router.get("/{project_id}", response_model=ProjectDetail)
def get_project(project_id: RowId, session: SessionDep, researcher: Viewing):
    project = service.get_project(session=session, researcher=researcher, project_id=project_id)
    counts = service.project_counts(session=session, project=project)
    return ProjectDetail(**ProjectOut.model_validate(project).model_dump(), **counts)


@router.patch("/{project_id}", response_model=ProjectDetail)
def update_project(
    project_id: RowId, body: ProjectUpdate, session: SessionDep, researcher: Changing
):
    """Rename the project or change its description."""
    project = service.get_project(session=session, researcher=researcher, project_id=project_id)
    service.rename(session=session, project=project, changes=body.model_dump(exclude_unset=True))
    counts = service.project_counts(session=session, project=project)
    return ProjectDetail(**ProjectOut.model_validate(project).model_dump(), **counts)


@router.delete("/{project_id}", status_code=status.HTTP_204_NO_CONTENT)
def delete_project(
    project_id: RowId, request: Request, session: SessionDep, researcher: DeletingProjects
):
    project = service.get_project(
        session=session, researcher=researcher, project_id=project_id, to_delete=True
    )
    service.delete_project(session=session, store=request.app.state.images, project=project)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


def _rating_out(request: Request, project) -> RatingOut:
    return RatingOut(
        **RatingSettings.model_validate(project).model_dump(),
        public_slug=project.public_slug,
        public_url=public_study_url(request, project.public_slug),
        link_state=project.link_state,
        link_opened_at=project.link_opened_at,
    )


@router.get("/{project_id}/rating", response_model=RatingOut)
def get_rating(project_id: RowId, request: Request, session: SessionDep, researcher: Viewing):
    """The public rating link and how it behaves."""
    project = service.get_project(session=session, researcher=researcher, project_id=project_id)
    return _rating_out(request, project)


@router.patch("/{project_id}/rating", response_model=RatingOut)
def update_rating(
    project_id: RowId,
    body: RatingSettingsUpdate,
    request: Request,
    session: SessionDep,
    caller: ChangingCaller,
):
    """Change any of the rating settings (instructions, completion, shares, thresholds).
    Where raters are sent when they finish (the three URLs) changes only with the whole
    account's power: an 'admin' token, or a browser signed in with a password."""
    project = service.get_project(
        session=session, researcher=caller.researcher, project_id=project_id
    )
    service.update_rating(
        session=session,
        project=project,
        changes=body.model_dump(exclude_unset=True),
        may_redirect_raters=caller.may(Action.redirect_raters),
    )
    return _rating_out(request, project)


@router.get("/{project_id}/rater-texts", response_model=RaterTextsOut)
def get_rater_texts(project_id: RowId, session: SessionDep, researcher: Viewing):
    """Every string the rater pages show, with its translation in each language the pages
    speak and the study's own wording (`texts` in the rating settings words any of them)."""
    project = service.get_project(session=session, researcher=researcher, project_id=project_id)
    return service.rater_texts(project)


@router.get("/{project_id}/versions", response_model=list[DesignVersionOut])
def list_design_versions(project_id: RowId, session: SessionDep, researcher: Viewing):
    """The study's design versions, oldest first: the first answer locks what raters
    see, and a change after it makes the next version, listed with what changed."""
    project = service.get_project(session=session, researcher=researcher, project_id=project_id)
    found = versions.list_versions(session=session, project=project)
    return [
        DesignVersionOut(
            number=version.number,
            current=version.number == project.design_version,
            locked=version.locked_at is not None
            or (version.number == project.design_version and project.design_locked_at is not None),
            created_at=version.created_at,
            locked_at=version.locked_at
            if version.number != project.design_version
            else project.design_locked_at,
            changes=version.changes,
            design=version.design,
        )
        for version in found
    ]


@router.put("/{project_id}/link", response_model=RatingOut)
def set_link(
    project_id: RowId,
    body: LinkChange,
    request: Request,
    session: SessionDep,
    researcher: Changing,
):
    """Open the study link (once the project has items), pause it or close it. A new
    study's link is closed: raters see a page saying so, and no completion code."""
    project = service.get_project(session=session, researcher=researcher, project_id=project_id)
    service.set_link(session=session, project=project, state=body.state)
    return _rating_out(request, project)


@router.get(
    "/{project_id}/archive",
    response_class=StreamingResponse,
    responses={200: {"content": {"application/zip": {}}}},
)
def export_archive(
    project_id: RowId, request: Request, session: SessionDep, researcher: Identifying
):
    """The whole project as one ZIP, streamed: settings, raters, builds' state and model
    definitions (project.json), items with their images (items.zip) and every answer
    (triplets.csv). POST it to /project-archives on any Closer server to carry on there."""
    project = service.get_project(session=session, researcher=researcher, project_id=project_id)
    body = archive.export_archive(
        request.app.state.engine,
        request.app.state.images,
        archive.describe(session, project),
        project.id,
    )
    return StreamingResponse(
        body,
        media_type="application/zip",
        headers={"Content-Disposition": f'attachment; filename="closer-project-{project.id}.zip"'},
    )


@archives.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=ProjectDetail,
    responses={
        **UPLOAD_RESPONSES,
        409: {"description": "An import with this Idempotency-Key is still under way"},
    },
)
def import_archive(
    file: UploadFile,
    request: Request,
    response: Response,
    session: SessionDep,
    settings: SettingsDep,
    researcher: CreatingProjects,
    idempotency_key: IdempotencyKey = None,
):
    """A new project from a project archive (GET /projects/{id}/archive), yours, with a
    new rating link; all or nothing, also across a crash of the server. Its models fit
    anew on the answers. Retried with the same Idempotency-Key: the project the first
    request made (200), or 409 while that one is still being imported."""
    imported = archive.import_archive(
        session=session,
        settings=settings,
        store=request.app.state.images,
        owner=researcher,
        upload=as_uploaded(file),
        idempotency_key=idempotency_key,
    )
    project = imported.project
    if imported.replayed:
        response.status_code = status.HTTP_200_OK
        response.headers["Idempotent-Replayed"] = "true"
    counts = service.project_counts(session=session, project=project)
    return ProjectDetail(**ProjectOut.model_validate(project).model_dump(), **counts)
