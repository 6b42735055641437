"""Projects belong to one researcher; admins see all. Others' projects do not exist (404)."""

from __future__ import annotations

from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session

from app.core.db import on_commit
from app.core.errors import NotFound, ServiceError
from app.items.images import ImageStore
from app.models import Item, LabelType, Project, Researcher, Triplet
from app.triplets.service import count_triplets


def create_project(
    *, session: Session, owner: Researcher, name: str, description: str, label_type: LabelType
) -> Project:
    project = Project(owner_id=owner.id, name=name, description=description, label_type=label_type)
    session.add(project)
    session.flush()
    return project


def list_projects(*, session: Session, researcher: Researcher) -> list[Project]:
    query = select(Project).order_by(Project.id)
    if not researcher.is_admin:
        query = query.where(Project.owner_id == researcher.id)
    return list(session.scalars(query))


def get_project(*, session: Session, researcher: Researcher, project_id: int) -> Project:
    project = session.get(Project, project_id)
    if project is None or not (researcher.is_admin or project.owner_id == researcher.id):
        raise NotFound(f"no project {project_id}")
    return project


def project_counts(*, session: Session, project: Project) -> dict[str, int]:
    items = session.scalar(select(func.count()).where(Item.project_id == project.id)) or 0
    return {"item_count": items, "triplet_count": count_triplets(session=session, project=project)}


def delete_project(*, session: Session, store: ImageStore, project: Project) -> None:
    """Remove the project with its items, triplets and images.

    Triplets carry no foreign keys (see app/models/triplet.py), so they go explicitly;
    the rest cascades. Images go only once the deletion is committed.
    """
    project_id = project.id
    session.execute(delete(Triplet).where(Triplet.project_id == project_id))
    session.delete(project)
    session.flush()
    on_commit(session, lambda: store.remove_project(project_id))


NULLABLE_RATING_SETTINGS = {
    "completion_url",
    "no_more_work_code",
    "no_more_work_url",
    "min_attention_accuracy",
    "min_majority_agreement",
}


def update_rating(*, session: Session, project: Project, changes: dict) -> Project:
    """Apply rating settings; the shares of random and attention queries must leave room."""
    for name, value in changes.items():
        if value is None and name not in NULLABLE_RATING_SETTINGS:
            raise ServiceError(f"{name} cannot be null")
    random_share = changes.get("random_share", project.random_share)
    attention_rate = changes.get("attention_rate", project.attention_rate)
    if random_share + attention_rate > 1:
        raise ServiceError(
            f"random_share + attention_rate must be at most 1; got {random_share} + "
            f"{attention_rate}"
        )
    for name, value in changes.items():
        setattr(project, name, value)
    project.settings_version += 1
    session.flush()
    return project
