from __future__ import annotations

from fastapi import APIRouter, Request, Response, status

from app.core.deps import CurrentResearcher, SessionDep, public_base_url
from app.core.fields import RowId
from app.core.routes import StrictJSONRoute
from app.projects import service
from app.projects.schemas import (
    ProjectCreate,
    ProjectDetail,
    ProjectOut,
    RatingOut,
    RatingSettings,
    RatingSettingsUpdate,
)

router = APIRouter(prefix="/projects", tags=["projects"], route_class=StrictJSONRoute)


@router.post("", status_code=status.HTTP_201_CREATED, response_model=ProjectDetail)
def create_project(body: ProjectCreate, session: SessionDep, researcher: CurrentResearcher):
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
def list_projects(session: SessionDep, researcher: CurrentResearcher):
    return service.list_projects(session=session, researcher=researcher)


@router.get("/{project_id}", response_model=ProjectDetail)
def get_project(project_id: RowId, session: SessionDep, researcher: CurrentResearcher):
    project = service.get_project(session=session, researcher=researcher, project_id=project_id)
    counts = service.project_counts(session=session, project=project)
    return ProjectDetail(**ProjectOut.model_validate(project).model_dump(), **counts)


@router.delete("/{project_id}", status_code=status.HTTP_204_NO_CONTENT)
def delete_project(
    project_id: RowId, request: Request, session: SessionDep, researcher: CurrentResearcher
):
    project = service.get_project(session=session, researcher=researcher, project_id=project_id)
    service.delete_project(session=session, store=request.app.state.images, project=project)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


def _rating_out(request: Request, project) -> RatingOut:
    path = request.app.url_path_for("instructions", slug=project.public_slug)
    return RatingOut(
        **RatingSettings.model_validate(project).model_dump(),
        public_slug=project.public_slug,
        public_url=public_base_url(request) + path,
    )


@router.get("/{project_id}/rating", response_model=RatingOut)
def get_rating(
    project_id: RowId, request: Request, session: SessionDep, researcher: CurrentResearcher
):
    """The public rating link and how it behaves."""
    project = service.get_project(session=session, researcher=researcher, project_id=project_id)
    return _rating_out(request, project)


@router.patch("/{project_id}/rating", response_model=RatingOut)
def update_rating(
    project_id: RowId,
    body: RatingSettingsUpdate,
    request: Request,
    session: SessionDep,
    researcher: CurrentResearcher,
):
    """Change any of the rating settings (instructions, completion, shares, thresholds)."""
    project = service.get_project(session=session, researcher=researcher, project_id=project_id)
    service.update_rating(
        session=session, project=project, changes=body.model_dump(exclude_unset=True)
    )
    return _rating_out(request, project)
