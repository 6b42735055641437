"""Raters: who they are (the recruiting platform's ids), their sessions, their quality.

A rater reaches a project through its public link. Joining creates the rater (or finds
the one the platform id names) and hands out a random session token of its own; only its
hash is kept. A second join with the same id (another device, or someone else who knows
the id) adds a session: it never revokes one, so nobody takes over a participant's
session by joining with their id. Recognised platform parameters are Prolific's
(PROLIFIC_PID, STUDY_ID, SESSION_ID), Amazon Mechanical Turk's (workerId, assignmentId,
hitId) and a plain `participant`; without any, the rater is anonymous.
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any

import numpy as np
from sqlalchemy import ColumnElement, bindparam, delete, exists, func, select
from sqlalchemy.orm import Session

from app.auth.service import hash_token
from app.core import caches
from app.core.db import rows_changed
from app.core.errors import Conflict, NotFound, ServiceError
from app.core.i18n import N_
from app.learn.keys import MAX_ITEMS, query_keys
from app.models import LinkState, Project, Rater, RaterSession, Triplet
from app.models._types import utcnow
from app.raters import arms, places
from app.scheduling.service import ActiveRater, is_asking
from app.scheduling.thresholds import apply_thresholds
from app.triplets.log import published_columns

PLATFORM_PARAMETERS = {
    "prolific": ("PROLIFIC_PID", "STUDY_ID", "SESSION_ID"),
    "mturk": ("workerId", "assignmentId", "hitId"),
    "participant": ("participant",),
}
MAX_ID_LENGTH = 200
# An anonymous visitor who answered nothing for this long is shed (see shed_idle_joins).
IDLE_JOIN_AFTER = timedelta(minutes=30)
SHED_AT_ONCE = 10_000
ANONYMOUS_PREFIX = "anonymous-"


def platform_ids(params: Mapping[str, str]) -> tuple[str | None, str | None, dict[str, str]]:
    """(platform, external id, every recognised parameter) from a link's query string."""
    found: dict[str, str] = {}
    for names in PLATFORM_PARAMETERS.values():
        for name in names:
            value = (params.get(name) or "").strip()
            if value:
                if len(value) > MAX_ID_LENGTH:
                    raise ServiceError(f"{name} is longer than {MAX_ID_LENGTH} characters")
                found[name] = value
    for platform, names in PLATFORM_PARAMETERS.items():
        if names[0] in found:
            return platform, found[names[0]], found
    return None, None, found


def project_by_slug(*, session: Session, slug: str) -> Project:
    project = session.scalar(select(Project).where(Project.public_slug == slug))
    if project is None:
        raise NotFound(N_("no study at this link: check the address you were given"))
    return project


def join(
    *,
    session: Session,
    project: Project,
    params: Mapping[str, str],
    admit: Callable[[bool], None] | None = None,
) -> tuple[ActiveRater, str]:
    """The rater for these platform ids (created if new) with a fresh session token; a
    link that is not open takes nobody, and a full study nobody new (409, saying why).
    `admit(named)` may refuse a newcomer (the study's budget of new raters: 429); it is
    asked only for one, named or not by a platform's participant id."""
    notice = link_notice(project)
    if notice is not None:
        raise Conflict(notice)
    platform, external_id, ids = platform_ids(params)
    rater = None
    if external_id is not None:
        rater = session.scalar(
            select(Rater).where(Rater.project_id == project.id, Rater.external_id == external_id)
        )
    if rater is None:
        if admit is not None:
            admit(external_id is not None)
        places.hold_one(session=session, project=project)
        rater = Rater(
            project_id=project.id,
            external_id=external_id or f"{ANONYMOUS_PREFIX}{secrets.token_hex(8)}",
            platform=platform,
            platform_ids=ids,
            arm=arms.allocate(session=session, project=project),
            design_version=project.design_version,
        )
        session.add(rater)
    rater.last_seen_at = utcnow()
    session.flush()
    token = secrets.token_urlsafe(24)
    session.add(RaterSession(token_hash=hash_token(token), rater_id=rater.id))
    session.flush()
    return ActiveRater.of(rater), token


def shed_idle_joins(session: Session) -> int:
    """Remove raters who joined and did nothing more (no answer, consent, practice or
    questionnaire, no ending) and have not been seen for IDLE_JOIN_AFTER: a flood of
    joins leaves no rows behind, with a participant id of its choosing or without. A
    participant the platform sent who comes back later joins anew. Returns how many
    went."""
    cutoff = utcnow() - IDLE_JOIN_AFTER
    idle = (
        select(Rater.id)
        .where(
            Rater.answers == 0,
            Rater.attention_passed + Rater.attention_failed == 0,
            Rater.practice_answered == 0,
            Rater.completed_at.is_(None),
            Rater.out_of_work_at.is_(None),
            Rater.screened_out_at.is_(None),
            Rater.consented_at.is_(None),
            Rater.consent_declined_at.is_(None),
            Rater.questionnaire_at.is_(None),
            Rater.timed_out_at.is_(None),
            Rater.exclusion_override.is_(None),
            Rater.created_at < cutoff,
            func.coalesce(Rater.last_seen_at, Rater.created_at) < cutoff,
            ~exists().where(Triplet.rater_id == Rater.id),
        )
        .limit(SHED_AT_ONCE)
    )
    return rows_changed(session.execute(delete(Rater).where(Rater.id.in_(idle))))


def link_notice(project: Project) -> str | None:
    """What a rater of a link that is not open reads (the page and the API alike); None
    while it is open."""
    if is_asking(project):
        return None
    if project.link_state is LinkState.paused:
        return N_("This study is paused for now. Please come back later.")
    if project.link_opened_at is None:
        return N_("This study has not opened yet. Please come back later.")
    return N_("This study has closed and takes no more answers. Thank you for your interest.")


# An ActiveRater's fields, in its order.
_ACTIVE_RATER = (
    Rater.id,
    Rater.answers,
    Rater.excluded,
    Rater.screened_out_at.is_not(None),
    Rater.consented_at.is_not(None),
    Rater.consent_declined_at.is_not(None),
    Rater.questionnaire_at.is_not(None),
    Rater.timed_out_at.is_not(None),
    Rater.created_at,
    Rater.arm,
    Rater.practice_answered,
    Rater.practice_correct,
    Rater.practice_failed_at.is_not(None),
)

_RATER_IN_PROJECT = (
    select(*_ACTIVE_RATER)
    .join(RaterSession, RaterSession.rater_id == Rater.id)
    .where(
        RaterSession.token_hash == bindparam("token_hash"),
        Rater.project_id == bindparam("project"),
    )
)


def authenticate(*, session: Session, project: Project, token: str | None) -> ActiveRater | None:
    if not token:
        return None
    row = session.execute(
        _RATER_IN_PROJECT, {"token_hash": hash_token(token), "project": project.id}
    ).first()
    if row is None:
        return None
    fields: tuple[Any, ...] = tuple(row)
    return ActiveRater(*fields)


class _Studies:
    """Each study's settings, kept per process while their version stands: every answer
    needs them, and they change only when the researcher edits them. The copies are
    detached: read, never written."""

    def __init__(self) -> None:
        self._studies: dict[str, Project] = {}
        self._lock = threading.Lock()

    def cached(self, slug: str) -> Project | None:
        """This process's copy, whatever its version (the caller compares)."""
        with self._lock:
            return self._studies.get(slug)

    def get(self, session: Session, slug: str, version: int) -> Project:
        with self._lock:
            hit = self._studies.get(slug)
        if hit is not None and hit.settings_version == version:
            return hit
        # A copy built from the row, in no session: the caller's session may hold the
        # project itself, which must stay there.
        names = [column.key for column in Project.__mapper__.column_attrs]
        row = session.execute(
            select(*(getattr(Project, name) for name in names)).where(Project.public_slug == slug)
        ).one()
        project = Project(**dict(zip(names, row, strict=True)))
        with self._lock:
            self._studies[slug] = project
        return project


def studies() -> _Studies:
    return caches.current().get("raters.studies", _Studies)


_RATER_BY_TOKEN = (
    select(*_ACTIVE_RATER, Project.settings_version)
    .select_from(RaterSession)
    .join(Rater, Rater.id == RaterSession.rater_id)
    .join(Project, Project.id == Rater.project_id)
    .where(
        RaterSession.token_hash == bindparam("token_hash"),
        Project.public_slug == bindparam("slug"),
    )
)


def authenticate_in_study(
    *, session: Session, slug: str, token: str | None
) -> tuple[Project, ActiveRater] | None:
    """The study and the rater a session token belongs to (one query, while this
    process's copy of the study's settings is current)."""
    if not token:
        return None
    row = (
        session.connection()
        .execute(_RATER_BY_TOKEN, {"token_hash": hash_token(token), "slug": slug})
        .first()
    )
    if row is None:
        return None
    fields: tuple[Any, ...] = tuple(row)
    rater, version = ActiveRater(*fields[:-1]), fields[-1]
    return arms.seen_by(studies().get(session, slug, version), rater.arm), rater


def list_raters(
    *, session: Session, project: Project, limit: int | None = None, offset: int = 0
) -> list[Rater]:
    """The project's raters in the order they joined; `limit` and `offset` page through
    them (a study of 10,000 raters is 4 MB of JSON at once)."""
    query = select(Rater).where(Rater.project_id == project.id).order_by(Rater.id)
    return list(session.scalars(query.limit(limit).offset(offset or None)))


def get_rater(*, session: Session, project: Project, rater_id: int) -> Rater:
    rater = session.get(Rater, rater_id)
    if rater is None or rater.project_id != project.id:
        raise NotFound(f"no rater {rater_id} in project {project.id}")
    return rater


def refresh_majority_agreement(*, session: Session, project: Project) -> list[Rater]:
    """Each rater's agreement with the majority of the *other* answers to the same
    queries, over the queries others answered too; then the thresholds are applied.
    Returns the raters whose exclusion changed."""
    raters = {rater.id: rater for rater in list_raters(session=session, project=project)}
    if not raters:  # uploaded answers alone: nobody to measure
        return []
    _, rater_of, anchor, closer, farther = published_columns(
        session,
        project.id,
        ("id", "coalesce(rater_id, -1)", "anchor_id", "closer_id", "farther_id"),
    )
    if len(anchor):
        lo, hi = np.minimum(closer, farther), np.maximum(closer, farther)
        query = _query_numbers(anchor, lo, hi)
        for_lo = (closer == lo).astype(np.int64)
        votes_lo = np.bincount(query, weights=for_lo).astype(np.int64)
        votes = np.bincount(query).astype(np.int64)
        # Votes of the others: this answer's own vote taken out.
        others_lo = votes_lo[query] - for_lo
        others = votes[query] - 1
        decided = (others > 0) & (2 * others_lo != others)
        agrees = (2 * others_lo > others) == (for_lo == 1)
        counted = decided & (rater_of >= 0)
        compared = np.bincount(rater_of[counted], minlength=1)
        agreed = np.bincount(rater_of[counted], weights=agrees[counted], minlength=1)
        for rater_id, rater in raters.items():
            n = int(compared[rater_id]) if rater_id < len(compared) else 0
            rater.majority_compared = n
            rater.majority_agreement = float(agreed[rater_id] / n) if n else None
    return [rater for rater in raters.values() if apply_thresholds(project=project, rater=rater)]


def _query_numbers(anchor: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """One number per distinct query ``(anchor, lo, hi)``, for each answer. Packed into
    one int64 each first: grouping rows of three took 10 s at 5 M answers, one sort of
    keys 0.8 s."""
    ids = np.concatenate([anchor, lo, hi])
    base = ids.min()
    if ids.max() - base < MAX_ITEMS:
        anchor, lo, hi = anchor - base, lo - base, hi - base
    else:  # ids spread wider than a key holds: their ranks among the ids answered about
        distinct = np.unique(ids)
        if len(distinct) >= MAX_ITEMS:
            rows = np.stack([anchor, lo, hi], axis=1)
            return np.unique(rows, axis=0, return_inverse=True)[1].ravel()
        anchor, lo, hi = (np.searchsorted(distinct, column) for column in (anchor, lo, hi))
    _, query = np.unique(query_keys(anchor, lo, hi), return_inverse=True)
    return query.ravel()


def set_override(
    *, session: Session, project: Project, rater: Rater, excluded: bool | None
) -> bool:
    """The researcher's decision (None hands it back to the thresholds); returns whether
    the decision in force changed."""
    rater.exclusion_override = excluded
    changed = apply_thresholds(project=project, rater=rater)
    session.flush()
    return changed


RATER_SORTS = {
    "id": Rater.id,
    "answers": Rater.answers,
    "attention": Rater.attention_passed,
    "agreement": Rater.majority_agreement,
    "excluded": Rater.excluded,
    "last_seen": Rater.last_seen_at,
}


def page_of_raters(
    *,
    session: Session,
    project: Project,
    sort: str = "id",
    descending: bool = False,
    offset: int = 0,
    limit: int = 50,
) -> tuple[list[Rater], int]:
    """One page of the project's raters in the order asked for, and how many there are."""
    column = RATER_SORTS.get(sort, Rater.id)
    # Raters without a figure ("—") come last whichever way: a researcher sorting by
    # agreement looks for the lowest or the highest, never for the unknown.
    order = (column.desc() if descending else column.asc()).nulls_last()
    raters = list(
        session.scalars(
            select(Rater)
            .where(Rater.project_id == project.id)
            .order_by(order, Rater.id)
            .offset(offset)
            .limit(limit)
        )
    )
    total = session.scalar(select(func.count()).where(Rater.project_id == project.id)) or 0
    return raters, total


def median_response_times(*, session: Session, rater_ids: list[int]) -> dict[int, float]:
    """Each rater's median time to answer, in milliseconds (raters who timed none are
    left out)."""
    if not rater_ids:
        return {}
    timed = response_times(session=session, where=Triplet.rater_id.in_(rater_ids))
    return {rater_id: median for rater_id, (median, _) in timed.items()}


def response_times(*, session: Session, where: ColumnElement[bool]) -> dict[int, tuple[float, int]]:
    """The median time to answer in milliseconds and the number of answers timed, for
    each rater with timed answers among those `where` selects."""
    answered = (
        Triplet.rater_id.is_not(None),  # the index's own condition, spelled out
        where,
        Triplet.response_time_ms.is_not(None),
    )
    if session.get_bind().dialect.name == "postgresql":
        # Read from the index alone and reduced where it lies: a page of 50 raters with
        # a thousand answers each would otherwise send 50,000 rows to Python.
        median = func.percentile_cont(0.5).within_group(Triplet.response_time_ms)
        return {
            rater_id: (float(value), int(count))
            for rater_id, value, count in session.execute(
                select(Triplet.rater_id, median, func.count())
                .where(*answered)
                .group_by(Triplet.rater_id)
            )
        }
    times: dict[int, list[int]] = {}
    for rater_id, elapsed in session.execute(
        select(Triplet.rater_id, Triplet.response_time_ms).where(*answered)
    ):
        if rater_id is not None and elapsed is not None:  # (as `answered` holds)
            times.setdefault(rater_id, []).append(elapsed)
    return {rater_id: (float(np.median(values)), len(values)) for rater_id, values in times.items()}


def refresh_response_times(*, session: Session, project: Project) -> None:
    """Each rater's median time per answer and how many answers it is over, as the
    speeder threshold reads them."""
    timed = response_times(session=session, where=Triplet.project_id == project.id)
    for rater in list_raters(session=session, project=project):
        rater.median_response_ms, rater.timed_answers = timed.get(rater.id, (None, 0))
