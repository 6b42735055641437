"""Rater quality decisions and what follows from them: when a rater's answers stop (or
start again) counting, the project's unfinished builds are replayed without (or with)
them, in the worker."""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.builds import jobs as build_jobs
from app.builds import service as builds
from app.models import Project, Rater, Triplet
from app.models._types import utcnow
from app.raters import service as raters
from app.triplets.log import newest_id


def replay_builds(*, session: Session, project: Project) -> int:
    """Start the project's unfinished builds over from the answers that count now;
    returns how many."""
    unfinished = builds.unfinished_builds(session=session, project_id=project.id)
    for build in unfinished:
        builds.replay(session=session, build=build)
        build_jobs.request_step(session=session, build=build)
    return len(unfinished)


def refresh(*, session: Session, project: Project) -> list[Rater]:
    """Agreement with the majority and median times per answer now, and the exclusions
    that follow from them (a worker does this once a minute for every project whose
    answers grew or whose thresholds changed; the Raters page's button at once)."""
    newest = newest_id(session, project.id)
    raters.refresh_response_times(session=session, project=project)
    changed = raters.refresh_majority_agreement(session=session, project=project)
    project.agreement_cursor = newest
    project.agreement_updated_at = utcnow()
    if changed:
        replay_builds(session=session, project=project)
    return changed


def projects_with_new_answers(session: Session) -> list[int]:
    """Projects holding answers newer than their raters' agreement figures."""
    newest = select(func.max(Triplet.id)).where(Triplet.project_id == Project.id).scalar_subquery()
    return list(session.scalars(select(Project.id).where(newest > Project.agreement_cursor)))


def decide(*, session: Session, project: Project, rater: Rater, excluded: bool | None) -> None:
    if raters.set_override(session=session, project=project, rater=rater, excluded=excluded):
        replay_builds(session=session, project=project)
