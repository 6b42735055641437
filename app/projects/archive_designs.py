"""A study's design versions in its archive: each version as it was recorded (number,
design, what changed, when locked), written by `described` and restored by `restore`."""

from __future__ import annotations

from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from app.models import DesignVersion, Project
from app.projects.archive_format import ProjectArchive


def described(session: Session, project: Project) -> list[dict[str, Any]]:
    return [
        {
            "number": version.number,
            "design": version.design,
            "changes": version.changes,
            "created_at": None if version.created_at is None else version.created_at.isoformat(),
            "locked_at": None if version.locked_at is None else version.locked_at.isoformat(),
        }
        for version in session.scalars(
            select(DesignVersion)
            .where(DesignVersion.project_id == project.id)
            .order_by(DesignVersion.number)
        )
    ]


def restore(session: Session, project: Project, description: ProjectArchive) -> None:
    """The study's design versions as the archive recorded them (the import made a
    version of its own while it set the study up: the archive's replace it)."""
    if not description.design_versions:
        return
    session.execute(delete(DesignVersion).where(DesignVersion.project_id == project.id))
    for version in description.design_versions:
        session.add(
            DesignVersion(
                project_id=project.id,
                number=version.number,
                design=version.design,
                changes=version.changes,
                created_at=version.created_at,
                locked_at=version.locked_at,
            )
        )
    project.design_version = description.design_versions[-1].number
    project.design_locked_at = description.project.design_locked_at
    session.flush()
