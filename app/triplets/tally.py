"""Answer counts that stay cheap at millions of answers: hourly tallies per source, kept
by the worker up to a cursor, plus a live count of the few answers after it.

The workspace shows a project's answers and its answers per hour on every page view.
Counting a million rows each time took 90 ms; the tallies are a few hundred rows. The
cursor moves only to an id below which nothing can still appear (`committed_bound`), so
no answer is ever tallied twice or skipped, and what is after it is counted as it is.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy import func, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app.core.db import rows_changed
from app.models import AnswerTally, AnswerTallyCursor, Project, Triplet, TripletSource
from app.triplets.log import committed_bound, newest_id, published


def _hour_of(session: Session):
    """The answer's hour (UTC) as the database truncates it."""
    if session.get_bind().dialect.name == "postgresql":
        return func.date_trunc("hour", func.timezone("UTC", Triplet.created_at))
    return func.substr(Triplet.created_at, 1, 13)  # stored as 'YYYY-MM-DD HH:MM:SS…' in UTC


def _as_hour(value) -> datetime:
    if isinstance(value, str):
        return datetime.strptime(value, "%Y-%m-%d %H").replace(tzinfo=UTC)
    return value.replace(minute=0, second=0, microsecond=0, tzinfo=UTC)


def _cursor(session: Session, project_id: int) -> int:
    found = session.scalar(
        select(AnswerTallyCursor.through_id).where(AnswerTallyCursor.project_id == project_id)
    )
    return found or 0


def advance(session: Session, project_id: int) -> int:
    """Tally the project's answers since the cursor; returns how many were tallied (0
    when another worker got there first, or writers kept the log busy)."""
    bound = committed_bound(session, project_id)
    if bound is None:
        return 0
    if session.get(AnswerTallyCursor, project_id) is None:
        try:
            with session.begin_nested():
                session.add(AnswerTallyCursor(project_id=project_id, through_id=0))
        except IntegrityError:
            pass  # another worker made it a moment ago
    old = _cursor(session, project_id)
    if bound <= old:
        return 0
    # Claimed by moving the cursor first: of two workers, the second finds it moved.
    claimed = rows_changed(
        session.execute(
            update(AnswerTallyCursor)
            .where(AnswerTallyCursor.project_id == project_id, AnswerTallyCursor.through_id == old)
            .values(through_id=bound)
        )
    )
    if claimed != 1:
        return 0
    hour = _hour_of(session)
    groups = session.execute(
        select(hour, Triplet.source, func.count())
        .where(
            Triplet.project_id == project_id,
            Triplet.id > old,
            Triplet.id <= bound,
            published(project_id),
        )
        .group_by(hour, Triplet.source)
    ).all()
    tallied = 0
    for value, source, count in groups:
        key = (project_id, _as_hour(value), TripletSource(source).value)
        tally = session.get(AnswerTally, key)
        if tally is None:
            session.add(AnswerTally(project_id=key[0], hour=key[1], source=key[2], answers=count))
        else:
            tally.answers += count
        tallied += count
    session.flush()
    return tallied


def forget(session: Session, project_id: int, which) -> int:
    """Take the project's answers matching `which` out of the tallies, before the caller
    deletes them; returns how many there are (published ones). The cursor's row stays
    locked until the caller commits, so no worker tallies them in between."""
    locked = session.execute(
        update(AnswerTallyCursor)
        .where(AnswerTallyCursor.project_id == project_id)
        .values(through_id=AnswerTallyCursor.through_id)
        .returning(AnswerTallyCursor.through_id)
    ).scalar()
    cursor = locked or 0
    hour = _hour_of(session)
    mine = (Triplet.project_id == project_id, published(project_id), which)
    for value, source, count in session.execute(
        select(hour, Triplet.source, func.count())
        .where(*mine, Triplet.id <= cursor)
        .group_by(hour, Triplet.source)
    ).all():
        tally = session.get(AnswerTally, (project_id, _as_hour(value), TripletSource(source).value))
        if tally is not None:
            tally.answers = max(tally.answers - count, 0)
    return session.scalar(select(func.count()).where(*mine)) or 0


def behind(session: Session) -> list[int]:
    """Projects with answers past their tally cursor."""
    cursors = dict(
        session.execute(select(AnswerTallyCursor.project_id, AnswerTallyCursor.through_id)).all()
    )
    return [
        project_id
        for project_id in session.scalars(select(Project.id))
        if newest_id(session, project_id) > cursors.get(project_id, 0)
    ]


def _tail(session: Session, project_id: int, cursor: int, *conditions):
    return (
        Triplet.project_id == project_id,
        Triplet.id > cursor,
        published(project_id),
        *conditions,
    )


def answer_count(session: Session, project_id: int) -> int:
    """The project's published answers: tallied, and counted after the cursor."""
    cursor = _cursor(session, project_id)
    tallied = session.scalar(
        select(func.coalesce(func.sum(AnswerTally.answers), 0)).where(
            AnswerTally.project_id == project_id
        )
    )
    tail = session.scalar(select(func.count()).where(*_tail(session, project_id, cursor)))
    return int(tallied or 0) + int(tail or 0)


def answers_per_hour(
    session: Session, project_id: int, first_hour: datetime, hours: int, source: TripletSource
) -> list[int]:
    """Answers of `source` in each of `hours` hours from `first_hour` (UTC)."""
    counts = [0] * hours
    cursor = _cursor(session, project_id)
    for hour, answers in session.execute(
        select(AnswerTally.hour, AnswerTally.answers).where(
            AnswerTally.project_id == project_id,
            AnswerTally.source == source.value,
            AnswerTally.hour >= first_hour,
        )
    ):
        slot = int((hour - first_hour) / timedelta(hours=1))
        if 0 <= slot < hours:
            counts[slot] += answers
    for stamp in session.scalars(
        select(Triplet.created_at).where(
            *_tail(session, project_id, cursor, Triplet.source == source)
        )
    ):
        slot = int((stamp - first_hour) / timedelta(hours=1))
        if 0 <= slot < hours:
            counts[slot] += 1
    return counts
