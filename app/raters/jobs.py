"""The workers' upkeep of raters: agreement with the majority follows the answers by
itself, so the Raters page never shows figures a button press behind; anonymous joins
that never answered are shed."""

from __future__ import annotations

import time
from datetime import timedelta

from app.core import caches
from app.core.db import unit_of_work
from app.models import Project
from app.models._types import utcnow
from app.raters import quality
from app.raters.service import shed_idle_joins
from app.worker.loop import periodic

AGREEMENT_CHECK_SECONDS = 60.0
SHED_SECONDS = 60.0
# A refresh that takes longer than this (it reads every answer: seconds of the worker's
# and the database's time at 5 M answers) waits SPACING times what it took, from the last
# one, so it takes no more than a twentieth of either from the raters' answers.
COSTLY_REFRESH_SECONDS = 1.0
SPACING = 20.0


@periodic(AGREEMENT_CHECK_SECONDS)
def keep_agreement_current(sessions) -> None:
    with unit_of_work(sessions) as session:
        stale = quality.projects_with_new_answers(session)
    took: dict = caches.current().get("raters.agreement_seconds", dict)
    for project_id in stale:
        started = time.perf_counter()
        with unit_of_work(sessions) as session:
            project = session.get(Project, project_id)
            if project is None or _spaced_out(project, took.get(project_id, 0.0)):
                continue
            quality.refresh(session=session, project=project)
        took[project_id] = time.perf_counter() - started


def _spaced_out(project: Project, last_seconds: float) -> bool:
    """Whether a costly refresh ran too recently to run again now."""
    last = project.agreement_updated_at
    if last_seconds <= COSTLY_REFRESH_SECONDS or last is None:
        return False
    return utcnow() - last < timedelta(seconds=SPACING * last_seconds)


@periodic(SHED_SECONDS)
def shed_idle_anonymous_joins(sessions) -> None:
    with unit_of_work(sessions) as session:
        shed_idle_joins(session)
