"""The raters' usual answer on PostgreSQL: one call of `closer_answer()` (migration 0005).

The call records the answer, counts it, leases the rater's next query and appends the
triplet, in one round trip on an autocommit connection of an asyncio pool, so the answer
route needs neither a worker thread nor a statement per step. It implements the
scheduler's rules for the common case only; whenever it answers `full` it has written
nothing, and the route runs the Python scheduler (`app/scheduling/service.py`), which
stays the reference for every case and the only path on SQLite.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from datetime import datetime

import numpy as np
import psycopg
from psycopg.rows import namedtuple_row
from psycopg_pool import AsyncConnectionPool

from app.core.db import libpq_conninfo
from app.models import Choice
from app.scheduling.draws import Draws

log = logging.getLogger(__name__)

_CALL = (
    "SELECT * FROM closer_answer(%s, %s, %s, %s, %s, %s, %s, %s, %s::bigint[], %s, "
    "%s, %s, %s::bigint[])"
)


@dataclass(frozen=True)
class Answered:
    """What the call did: the rater's count, the build or routing the answer feeds,
    and the next query served (None once the session is complete or nothing is left)."""

    settings_version: int
    answers: int
    build_id: int | None
    routing_id: int | None
    served: tuple[int, int, int, int] | None  # (assignment id, anchor, left, right)
    arm: str | None = None  # the rater's arm (app/raters/arms.py)
    # What the next query was to be, decided as the answered one was served (the Python
    # path takes it on where the function served none), and the items of the one drawn
    # ahead of the query served (app/scheduling/upcoming.py).
    next_purpose: int | None = None
    upcoming: tuple[int, ...] | None = None


# The cards of a few items (app/rating/cards.py: id and CARD_COLUMNS), read on the same
# pool: an answer whose items this process does not hold needs no worker thread.
_CARDS = (
    "SELECT id, key, text, image_file, image_type, clip_seconds, alt FROM items "
    "WHERE project_id = %s AND id = ANY(%s::bigint[])"
)


class AnswerFunction:
    """A pool of autocommit connections and the call itself."""

    def __init__(self, database_url: str, size: int) -> None:
        self.conninfo = libpq_conninfo(database_url)
        self.size = size
        self.pool: AsyncConnectionPool | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    @property
    def ready(self) -> bool:
        """Open, and on this event loop: the pool's connections belong to the loop that
        opened it (an app served from a second loop takes the full path there)."""
        return self._loop is not None and self._loop is asyncio.get_running_loop()

    async def open(self) -> None:
        if self._loop is None:
            self.pool = AsyncConnectionPool(
                self.conninfo,
                min_size=min(2, self.size),
                max_size=self.size,
                kwargs={"autocommit": True},
                open=False,
            )
            await self.pool.open()
            self._loop = asyncio.get_running_loop()

    async def close(self) -> None:
        if self.ready and self.pool is not None:
            self._loop = None
            await self.pool.close()

    async def answer(
        self,
        *,
        slug: str,
        token_hash: str,
        assignment_id: int,
        choice: Choice,
        response_time_ms: int | None,
        now: datetime,
        draws: Draws,
        item_ids: np.ndarray,
        log_lock: int,
    ) -> Answered | None:
        """Record the answer in one call; None when the Python path must handle it
        (it has then written nothing, and takes the same `draws`). Never called where the
        draws ahead ask a repeated question (the Python path looks for it ahead), so the
        function's `p_ahead_repeat` is false."""
        candidates = [item for triple in draws.candidates(item_ids) for item in triple]
        ahead = draws.ahead or draws
        ahead_candidates = [item for triple in ahead.candidates(item_ids) for item in triple]
        arguments = (
            slug,
            token_hash,
            assignment_id,
            choice.value,
            response_time_ms,
            now,
            draws.kind,
            draws.left_is_lo,
            candidates,
            log_lock,
            ahead.kind,
            False,
            ahead_candidates,
        )
        if self.pool is None:
            return None  # not opened (yet): the Python path takes the answer
        # A connection the server closed (a restart) fails once: the answer is idempotent,
        # so the call is simply made again on a fresh one.
        row = None
        for attempt in range(2):
            try:
                async with self.pool.connection() as connection:
                    row = await (await connection.execute(_CALL, arguments)).fetchone()
                break
            except psycopg.OperationalError:
                if attempt:
                    raise
                log.warning("answer connection lost; calling again on a fresh one")
        if row is None:  # the function always returns its one row
            return None
        (outcome, version, answers, build_id, routing_id, served, anchor, left, right, arm) = row[
            :10
        ]
        next_purpose, ahead_anchor, ahead_lo, ahead_hi = row[10:]
        if outcome != "answered":
            return None
        return Answered(
            settings_version=version,
            answers=answers,
            build_id=build_id,
            routing_id=routing_id,
            served=None if served is None else (served, anchor, left, right),
            arm=arm,
            next_purpose=next_purpose,
            upcoming=(
                None
                if ahead_anchor is None
                else tuple(dict.fromkeys((ahead_anchor, ahead_lo, ahead_hi)))
            ),
        )

    async def card_rows(self, project_id: int, item_ids: list[int]) -> list:
        """The rows the cards of these items are made from, by column name (deleted
        items are left out)."""
        if self.pool is None:
            return []
        async with self.pool.connection() as connection:
            cursor = connection.cursor(row_factory=namedtuple_row)
            return await (await cursor.execute(_CARDS, (project_id, item_ids))).fetchall()
