from __future__ import annotations

from datetime import datetime
from enum import IntEnum, StrEnum

from sqlalchemy import BigInteger, ForeignKey, Index, Integer, LargeBinary, SmallInteger, text
from sqlalchemy.orm import Mapped, deferred, mapped_column

from app.core.db import Base
from app.formats import TRIPLET, Choice, JudgementFormat
from app.models._types import BigId, FormatName, JsonValue, Timestamp, string_enum, utcnow


class Purpose(IntEnum):
    """Why a query is asked; the scheduler serves lower values first."""

    routing = 0  # a new item routed down a finished forest, to predict its label
    build = 1  # the first answer an open CompRF node waits for
    majority = 2  # a further answer for a query's majority (or a tie breaker)
    random = 3  # a random triplet for the passive learners
    attention = 4  # a check with a known answer: the anchor is one of the candidates
    proposal = 5  # a sampler's question (labelling, embedding, placement): after the rest
    # A triplet study's random question repeated to several raters (the noise ceiling's
    # answers): drawn at random once, so fitted and held out like a random one.
    repeat = 6


# Questions a scheduler chose for what they would teach, not uniformly at random: their
# answers are fitted but never held out to measure a model (migration 0014 marks them).
ADAPTIVE_PURPOSES = frozenset({Purpose.routing, Purpose.build, Purpose.majority, Purpose.proposal})

# An assignment's `upcoming_purpose` when the rater's next query comes from the queue:
# whichever slot is free then (else a random question).
FROM_QUEUE = -1


class SlotState(StrEnum):
    open = "open"
    answered = "answered"
    withdrawn = "withdrawn"


class QuerySlot(Base):
    """One answer the scheduler wants: a query `(anchor, {lo, hi})` with a purpose.

    A query that needs k answers has k slots. A slot is served to one rater at a time:
    serving sets its lease (`lease_rater_id`, `lease_expires_at`) under a row lock, so
    two raters never hold the same slot; an expired lease makes the slot free again.
    The partial index keeps choosing the next slot a walk along the open slots of a
    project in priority order, never a scan of all queries.
    """

    __tablename__ = "query_slots"
    __table_args__ = (
        Index(
            "ix_query_slots_open",
            "project_id",
            "priority",
            "id",
            postgresql_where=text("state = 'open'"),
            sqlite_where=text("state = 'open'"),
        ),
        Index(
            "ix_query_slots_build_open",
            "build_id",
            "query_key",
            postgresql_where=text("state = 'open'"),
            sqlite_where=text("state = 'open'"),
        ),
        Index(
            "ix_query_slots_routing_open",
            "routing_id",
            "query_key",
            postgresql_where=text("state = 'open'"),
            sqlite_where=text("state = 'open'"),
        ),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    project_id: Mapped[int] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"))
    priority: Mapped[int] = mapped_column(SmallInteger)
    build_id: Mapped[int | None] = mapped_column(ForeignKey("builds.id", ondelete="CASCADE"))
    routing_id: Mapped[int | None] = mapped_column(ForeignKey("routings.id", ondelete="CASCADE"))
    # The query as its owner (build or routing) numbers it, to find its slots again.
    query_key: Mapped[int] = mapped_column(BigInteger)
    anchor_id: Mapped[int] = mapped_column(BigId)
    lo_id: Mapped[int] = mapped_column(BigId)
    hi_id: Mapped[int] = mapped_column(BigId)
    state: Mapped[SlotState] = mapped_column(
        string_enum(SlotState, "slot_state"), default=SlotState.open
    )
    lease_rater_id: Mapped[int | None] = mapped_column(Integer)
    lease_expires_at: Mapped[datetime | None] = mapped_column(Timestamp)
    created_at: Mapped[datetime] = mapped_column(Timestamp, default=utcnow)


class Assignment(Base):
    """A query served to one rater: the lease they hold, and then their answer.

    Its id is the answer's idempotency key: the first answer sets `answered_at`, any
    retry finds it set and stores nothing. A rater is never served the same query
    twice (the unique index over rater and query). `left_id` / `right_id` are the
    candidates in the order shown.

    A screen of another format (odd-one-out, rank) keeps its items in display order in
    `shown` and the rater's picks in `chosen`; its `anchor_id`, `lo_id` and `hi_id` are
    then its key (see app/scheduling/screens.py): the rank screen's reference (the
    odd-one-out's smallest item) and the smallest and largest of the rest.

    A sorting screen (a CompRF node's items beside its two pivots) is one assignment per
    item, each an ordinary triplet query (item, pivots) with its own slot and choice;
    the first keeps the items in `shown`, the others name it in `screen_id`.
    """

    __tablename__ = "assignments"
    __table_args__ = (
        Index(
            "uq_assignments_rater_query",
            "rater_id",
            "anchor_id",
            "lo_id",
            "hi_id",
            unique=True,
        ),
        Index(
            "ix_assignments_screen_id",
            "screen_id",
            postgresql_where=text("screen_id IS NOT NULL"),
            sqlite_where=text("screen_id IS NOT NULL"),
        ),
        # A triplet study's repeated questions, counted per question as they fill; only
        # they are in it, so the answer path's other inserts write no entry.
        Index(
            "ix_assignments_repeated",
            "project_id",
            "anchor_id",
            "lo_id",
            "hi_id",
            postgresql_where=text("purpose = 6"),
            sqlite_where=text("purpose = 6"),
        ),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    project_id: Mapped[int] = mapped_column(Integer, index=True)
    rater_id: Mapped[int] = mapped_column(ForeignKey("raters.id", ondelete="CASCADE"))
    slot_id: Mapped[int | None] = mapped_column(BigId)
    purpose: Mapped[int] = mapped_column(SmallInteger)
    anchor_id: Mapped[int] = mapped_column(BigId)
    lo_id: Mapped[int] = mapped_column(BigId)
    hi_id: Mapped[int] = mapped_column(BigId)
    left_is_lo: Mapped[bool] = mapped_column()
    served_at: Mapped[datetime] = mapped_column(Timestamp, default=utcnow)
    expires_at: Mapped[datetime] = mapped_column(Timestamp)
    answered_at: Mapped[datetime | None] = mapped_column(Timestamp)
    choice: Mapped[Choice | None] = mapped_column(string_enum(Choice, "answer_choice"))
    response_time_ms: Mapped[int | None] = mapped_column(Integer)
    triplet_id: Mapped[int | None] = mapped_column(BigId)
    format: Mapped[JudgementFormat] = mapped_column(
        FormatName(), default=TRIPLET, server_default=TRIPLET.name
    )
    shown: Mapped[list | None] = mapped_column(JsonValue)
    picks: Mapped[int | None] = mapped_column(SmallInteger)  # how many the rater picks
    chosen: Mapped[list | None] = mapped_column(JsonValue)
    screen_id: Mapped[int | None] = mapped_column(BigId)  # a sorting screen's first
    # A screen of sounds or videos: how often each item (by key) was played before the
    # answer, as the rater's page counted (null: nothing to play, or not counted).
    plays: Mapped[dict | None] = mapped_column(JsonValue)
    # The rater's next query, decided as this one is served (app/scheduling/upcoming.py):
    # its purpose (a check, a random or repeated question, or FROM_QUEUE), and for a check
    # or a random question its key (and a screen's items), so that the page loads them
    # while this one is answered. Null: decided at the answer (a sorting screen).
    upcoming_purpose: Mapped[int | None] = mapped_column(SmallInteger)
    upcoming_anchor_id: Mapped[int | None] = mapped_column(BigId)
    upcoming_lo_id: Mapped[int | None] = mapped_column(BigId)
    upcoming_hi_id: Mapped[int | None] = mapped_column(BigId)
    upcoming_screen: Mapped[dict | None] = mapped_column(JsonValue)

    @property
    def left_id(self) -> int:
        return self.lo_id if self.left_is_lo else self.hi_id

    @property
    def right_id(self) -> int:
        return self.hi_id if self.left_is_lo else self.lo_id


class RoutingStatus(StrEnum):
    routing = "routing"
    complete = "complete"
    cancelled = "cancelled"


class Routing(Base):
    """New items routed down a finished CompRF build: their routing queries go to raters
    (or to a client that answers them); once every item reached a leaf in every tree,
    `result` holds their labels and class shares."""

    __tablename__ = "routings"

    id: Mapped[int] = mapped_column(primary_key=True)
    project_id: Mapped[int] = mapped_column(
        ForeignKey("projects.id", ondelete="CASCADE"), index=True
    )
    build_id: Mapped[int] = mapped_column(ForeignKey("builds.id", ondelete="CASCADE"))
    status: Mapped[RoutingStatus] = mapped_column(
        string_enum(RoutingStatus, "routing_status"), default=RoutingStatus.routing
    )
    item_ids: Mapped[list[int]] = mapped_column(JsonValue, default=list)
    # The answers about these items read so far (int64 rows of forest positions) and the
    # id of the last triplet read, as a build keeps them; loaded only where routing reads
    # them (pages and lists show a routing's progress and result on every refresh).
    answers: Mapped[bytes] = deferred(mapped_column(LargeBinary, nullable=False, default=b""))
    answers_cursor: Mapped[int] = mapped_column(BigInteger, default=0)
    progress: Mapped[dict] = mapped_column(JsonValue, default=dict)
    result: Mapped[dict | None] = mapped_column(JsonValue)
    ask_raters: Mapped[bool] = mapped_column(default=True)
    created_at: Mapped[datetime] = mapped_column(Timestamp, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(Timestamp, default=utcnow, onupdate=utcnow)
