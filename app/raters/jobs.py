"""The workers' upkeep of raters: agreement with the majority follows the answers by
itself, so the Raters page never shows figures a button press behind; anonymous joins
that never answered are shed."""

from __future__ import annotations

from app.core.db import unit_of_work
from app.models import Project
from app.raters import quality
from app.raters.service import shed_idle_joins
from app.worker.loop import periodic

AGREEMENT_CHECK_SECONDS = 60.0
SHED_SECONDS = 60.0


@periodic(AGREEMENT_CHECK_SECONDS)
def keep_agreement_current(sessions) -> None:
    with unit_of_work(sessions) as session:
        stale = quality.projects_with_new_answers(session)
    for project_id in stale:
        with unit_of_work(sessions) as session:
            project = session.get(Project, project_id)
            if project is not None:
                quality.refresh(session=session, project=project)


@periodic(SHED_SECONDS)
def shed_idle_anonymous_joins(sessions) -> None:
    with unit_of_work(sessions) as session:
        shed_idle_joins(session)
