"""A study's places, as a recruiting platform sells them: N participants get paid. A place
is taken by a session that ended with a code the participant is paid for (completion or
no more work) and by a live one (not ended, seen within a lease: an answer or a join);
a session quiet for longer than a lease is abandoned and gives its place back (the
platform's own timeout returns the participant there too). A paid session's place stays
taken after the participant is erased at their request (app/raters/erasure.py). Screened-out sessions and
those that declined the consent hold none: the platform's participant returns the study.

Live and abandoned are one rule, written twice here side by side: in SQL for the count
a join takes, in Python for the participants list (a test holds them to each other)."""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import ColumnElement, and_, case, func, or_, select, update
from sqlalchemy.orm import Session

from app.core.errors import Conflict
from app.core.i18n import N_
from app.models import ParticipantErasure, Project, Rater
from app.models._types import utcnow


def live_after(project: Project, now: datetime) -> datetime:
    """A session seen after this is live (before it, and not ended: abandoned)."""
    return now - timedelta(seconds=project.lease_seconds)


def is_live(project: Project, rater: Rater, now: datetime) -> bool:
    if rater.completed_at or rater.out_of_work_at or rater.screened_out_at:
        return False
    if rater.consent_declined_at or rater.timed_out_at:
        return False
    # (A rater who never came through the link, but with uploaded answers, was never seen.)
    seen = rater.last_seen_at
    return seen is not None and seen > live_after(project, now)


def holds_a_place(project: Project, now: datetime) -> ColumnElement[bool]:
    ended_paid = or_(Rater.completed_at.is_not(None), Rater.out_of_work_at.is_not(None))
    live = and_(
        Rater.completed_at.is_(None),
        Rater.out_of_work_at.is_(None),
        Rater.screened_out_at.is_(None),
        Rater.consent_declined_at.is_(None),
        Rater.timed_out_at.is_(None),
        Rater.practice_failed_at.is_(None),
        Rater.last_seen_at > live_after(project, now),
    )
    return and_(Rater.project_id == project.id, or_(ended_paid, live))


def taken(*, session: Session, project: Project, now: datetime | None = None) -> int:
    """How many of the study's places are taken now."""
    condition = holds_a_place(project, now or utcnow())
    held = session.scalar(select(func.count()).select_from(Rater).where(condition)) or 0
    return held + sum(n for n, _ in erased_places(session=session, project=project).values())


def erased_places(*, session: Session, project: Project) -> dict[str | None, tuple[int, int]]:
    """The places still taken by erased participants whose session had ended with a
    paid code, by arm: (places, of them completed). A small table: erasures are rare."""
    completed = func.sum(case((ParticipantErasure.outcome == "completed", 1), else_=0))
    rows = session.execute(
        select(ParticipantErasure.arm, func.count(), completed)
        .where(ParticipantErasure.project_id == project.id, ParticipantErasure.held_place)
        .group_by(ParticipantErasure.arm)
    ).all()
    return {arm: (int(held), int(done or 0)) for arm, held, done in rows}


# What a newcomer to a full study reads (the page and the API alike).
FULL_NOTICE = N_(
    "This study is full: every place has been taken. Thank you for your interest; "
    "if someone drops out, a place may open again in a few minutes."
)


def full_notice(project: Project, taken_now: int) -> str | None:
    """What a newcomer to a full study reads; None while places are left."""
    if project.quota is None or taken_now < project.quota:
        return None
    return FULL_NOTICE


def notice_for_newcomers(*, session: Session, project: Project) -> str | None:
    """The full notice of a study with a quota (one count of its raters), else None."""
    if project.quota is None:
        return None
    return full_notice(project, taken(session=session, project=project))


def hold_one(*, session: Session, project: Project) -> None:
    """Take a place for a newcomer, or refuse (409) when none is left. Joins of the same
    study wait for each other here until their transactions end, so the last place is
    never given twice (nor an arm's: app/raters/arms.py): PostgreSQL locks the project's row (FOR NO KEY UPDATE, which
    leaves answers' foreign-key checks free), SQLite takes its write lock first."""
    if project.quota is None and not project.arms:
        return
    if session.get_bind().dialect.name == "sqlite":
        session.execute(
            update(Project)
            .where(Project.id == project.id)
            .values(quota=Project.quota)
            .execution_options(synchronize_session=False)
        )
    else:
        session.execute(
            select(Project.id).where(Project.id == project.id).with_for_update(key_share=True)
        )
    if project.quota is None:
        return  # (the arms are counted by the caller, under the same lock)
    notice = full_notice(project, taken(session=session, project=project))
    if notice is not None:
        raise Conflict(notice)
