"""The triplets table read as a log: which ids are safe to read up to.

Builds and routings fold answers in id order and remember the last id read. On
PostgreSQL ids are drawn when a row is inserted but become visible when its transaction
commits, so a reader could see id 101 before a slower transaction commits id 100 and
skip it for ever. Every writer therefore holds a shared advisory lock on the project's
log for its transaction, taken before its ids are drawn. A reader reads the highest
committed id, then which transactions hold the log, and waits until those have ended:
any id below the highest that is not committed yet was drawn by one of them. The reader
never takes the lock itself, so no answer ever waits for a reader (an exclusive lock,
queued, held back every answer behind it, and a reader at idle CPU priority holding it
across round trips held them up for as long as it was off the CPU).
SQLite runs one write transaction at a time, so ids commit in order there.

A triplet upload commits its rows in chunks, so that answers get through while it runs,
and publishes them at the end (`Upload.pending`). Until then nobody reads them: ordered
reads stop below the upload's `first_triplet_id` (answers after it wait for the upload
too, as they would behind one long transaction), and counts and exports filter with
`published()`.

Writers take the lock as their transaction's last step (an answer appends its triplet
just before the commit), so it is held for a moment only.
"""

from __future__ import annotations

import time
from collections.abc import Collection

import numpy as np
from sqlalchemy import ColumnElement, func, select, text
from sqlalchemy.orm import Session

from app.models import Item, Triplet, Upload

LOG_LOCK = 0x7121  # the advisory-lock namespace of the triplets log
# How long a reader waits for the writers it found in the log at most (an answer holds it
# for a moment; an upload's chunk for longer): then it reads nothing new this time.
WAIT_MS = 250


def _is_postgres(session: Session) -> bool:
    return session.get_bind().dialect.name == "postgresql"


def hold_append_lock(session: Session, project_id: int) -> None:
    """Call before inserting triplets: readers wait for this transaction to end."""
    if _is_postgres(session):
        session.execute(
            text("SELECT pg_advisory_xact_lock_shared(:space, :project)"),
            {"space": LOG_LOCK, "project": project_id},
        )


def published(project_id: int) -> ColumnElement[bool]:
    """Triplets of the project that no unfinished upload holds back (for reads that are
    not in id order up to a bound: counts, exports)."""
    unpublished = select(Upload.id).where(Upload.project_id == project_id, Upload.pending)
    return Triplet.upload_id.is_(None) | Triplet.upload_id.not_in(unpublished)


def newest_id(session: Session, project_id: int) -> int:
    """The project's highest triplet id, published or not (0 for none)."""
    return session.scalar(select(func.max(Triplet.id)).where(Triplet.project_id == project_id)) or 0


def readable_bound(session: Session, project_id: int) -> int:
    """The highest triplet id of the project that an ordered read may reach, leaving out
    any write still in flight (see `committed_bound` for that)."""
    return _below_pending_uploads(session, project_id, newest_id(session, project_id))


def _below_pending_uploads(session: Session, project_id: int, newest: int) -> int:
    floor = session.scalar(
        select(func.min(Upload.first_triplet_id)).where(
            Upload.project_id == project_id, Upload.pending
        )
    )
    return newest if floor is None else min(newest, floor - 1)


def committed_bound(session: Session, project_id: int) -> int | None:
    """The highest triplet id of the project below which nothing can still appear, or
    None when a write kept the log busy for `WAIT_MS` (read nothing new now; a later
    step will).

    Under a steady stream of answers some writer always holds the log, so a reader that
    waited for a moment when none did found none for minutes. It waits instead for the
    writers holding the log just after it read the highest id, and none that come later.
    Pending uploads are looked up once those have ended: an upload's first chunk marks it
    pending in the chunk's own transaction."""
    if not _is_postgres(session):
        return readable_bound(session, project_id)
    newest = newest_id(session, project_id)
    params = {"space": LOG_LOCK, "project": project_id}
    writers = set(session.scalars(_WRITERS, params))
    deadline = time.monotonic() + WAIT_MS / 1000
    pause = 0.001
    while writers:
        if time.monotonic() > deadline:
            return None
        time.sleep(pause)
        pause = min(2 * pause, 0.01)
        writers &= set(session.scalars(_WRITERS, params))
    return _below_pending_uploads(session, project_id, newest)


# The other transactions holding the log's shared lock (a routing step reads the log in
# the transaction that appended to it; two-key advisory locks have objsubid 2).
_WRITERS = text(
    "SELECT virtualtransaction FROM pg_locks WHERE locktype = 'advisory' AND granted"
    " AND mode = 'ShareLock' AND classid = :space AND objid = :project AND objsubid = 2"
    " AND pid <> pg_backend_pid()"
)


# COPY … (FORMAT BINARY) of bigint columns: a 19-byte header, then per row a field count
# (int16) and per field its length (int32, always 8 here: no NULLs) and value (int64),
# all big-endian, and a 2-byte trailer.
_ANSWER_COLUMNS = ("id", "anchor_id", "closer_id", "farther_id")
_ROLES = ("anchor_id", "closer_id", "farther_id")
# Ids read per query: the joined text of a window stays near 40 MB.
_WINDOW = 1 << 21


def answer_columns(
    session: Session,
    project_id: int,
    cutoff: int,
    *,
    test_split: bool = False,
    excluded_raters: Collection[int] = (),
    arm: str | None = None,
) -> dict[str, np.ndarray]:
    """The project's answers with ids up to `cutoff`, in id order, as int64 columns (id,
    anchor_id, closer_id, farther_id), read in the session's transaction. The researcher's
    test split with `test_split` (an index of its own finds it), the other answers
    without, less those of `excluded_raters` (and with `arm`, only that arm's). An item id that no item of the project has
    may come back as another such id.

    A fit reads millions of rows, and a Python object per value cost most of a fit's
    wait: the database joins each column of a window of ids into one text (SQLite's
    group_concat, PostgreSQL's string_agg), which numpy parses in C, and the three item
    ids travel packed into one integer where the project's item ids span fewer than 2^21
    (as offsets from its lowest, 21 bits each): about 2 million rows a second on both."""
    where = [
        f"project_id = {int(project_id)}",
        f"id <= {int(cutoff)}",
        "is_test" if test_split else "NOT is_test",
    ]
    if excluded_raters:
        listed = ", ".join(str(int(rater)) for rater in excluded_raters)
        where.append(f"(rater_id IS NULL OR rater_id NOT IN ({listed}))")
    if arm is not None:
        where.append("arm = '" + arm.replace("'", "''") + "'")
    condition = " AND ".join(where)
    packing = _packing(session, project_id)
    if packing is None:
        ids, *roles = _joined_columns(session, project_id, cutoff, condition, _ANSWER_COLUMNS)
        return dict(zip(_ANSWER_COLUMNS, [ids, *roles], strict=True))
    low, high = packing
    inside = " AND ".join(f"{role} BETWEEN {low} AND {high}" for role in _ROLES)
    packed = (
        f"CASE WHEN {inside} THEN ((anchor_id - {low}) << 42) | ((closer_id - {low}) << 21)"
        f" | (farther_id - {low}) ELSE -1 END"
    )
    ids, packed_ids = _joined_columns(session, project_id, cutoff, condition, ("id", packed))
    mask = (1 << 21) - 1
    columns = {"id": ids}
    outside = packed_ids < 0  # an item deleted since: an id no item has
    for role, shift in zip(_ROLES, (42, 21, 0), strict=True):
        role_ids = ((packed_ids >> shift) & mask) + low
        role_ids[outside] = low - 1
        columns[role] = role_ids
    return columns


def adaptive_ids(session: Session, project_id: int, cutoff: int) -> np.ndarray:
    """Ids, up to `cutoff`, of the project's answers to adaptively chosen questions.

    The condition is written as the partial index's own `adaptive`: SQLite uses a
    partial index only where the query repeats its WHERE term, and SQLAlchemy writes
    `adaptive = 1` there, which scanned every answer (0.14 s at a million)."""
    return np.fromiter(
        session.scalars(
            select(Triplet.id).where(
                Triplet.project_id == project_id, Triplet.id <= cutoff, text("adaptive")
            )
        ),
        np.int64,
    )


def judgement_groups(
    session: Session, project_id: int, cutoff: int, answer_ids: np.ndarray
) -> np.ndarray | None:
    """Per answer of `answer_ids` (ascending): the judgement it was derived from, or a
    negative label of its own where none; None where no answer came from a judgement.
    The triplets of one judgement share a label: a held-out split keeps them together."""
    condition = (
        f"project_id = {int(project_id)} AND id <= {int(cutoff)} AND judgement_id IS NOT NULL"
    )
    ids, judgements = _joined_columns(
        session, project_id, cutoff, condition, ("id", "judgement_id")
    )
    if len(ids) == 0:
        return None
    groups = -np.arange(1, len(answer_ids) + 1, dtype=np.int64)
    positions = np.searchsorted(answer_ids, ids)
    present = positions < len(answer_ids)
    present[present] = answer_ids[positions[present]] == ids[present]
    if not present.any():
        return None
    groups[positions[present]] = judgements[present]
    return groups


def published_columns(
    session: Session, project_id: int, expressions: Collection[str]
) -> list[np.ndarray]:
    """Integer `expressions` over every published triplet of the project (see
    `published`), in id order, the first expression the id: a read of all the answers
    as arrays where no bound applies (raters' agreement with the majority)."""
    held_back = published(project_id).compile(
        dialect=session.get_bind().dialect, compile_kwargs={"literal_binds": True}
    )
    condition = f"project_id = {int(project_id)} AND ({held_back})"
    return _joined_columns(
        session, project_id, newest_id(session, project_id), condition, expressions
    )


def _joined_columns(
    session: Session, project_id: int, cutoff: int, condition: str, expressions: Collection[str]
) -> list[np.ndarray]:
    """Integer `expressions` over the triplets meeting `condition`, in id order (the first
    expression must be the id), read window by window of ids as joined text."""
    first = session.scalar(select(func.min(Triplet.id)).where(Triplet.project_id == project_id))
    last = session.scalar(
        select(func.max(Triplet.id)).where(Triplet.project_id == project_id, Triplet.id <= cutoff)
    )
    pieces: list[list[np.ndarray]] = [[] for _ in expressions]
    if first is not None and last is not None:
        if _is_postgres(session):
            joined = ", ".join(
                f"string_agg(({expression})::text, ',')" for expression in expressions
            )
        else:
            joined = ", ".join(f"group_concat({expression})" for expression in expressions)
        for start in range(first, last + 1, _WINDOW):
            row = session.execute(
                text(
                    f"SELECT {joined} FROM triplets WHERE {condition} "
                    f"AND id BETWEEN {start} AND {start + _WINDOW - 1}"
                )
            ).one()
            if row[0] is not None:
                for piece, values in zip(pieces, row, strict=True):
                    piece.append(np.fromstring(values, dtype=np.int64, sep=","))
    columns = [np.concatenate(piece) if piece else np.empty(0, np.int64) for piece in pieces]
    ids = columns[0]
    if len(ids) > 1 and not np.all(ids[1:] > ids[:-1]):  # the database chose another order
        order = np.argsort(ids, kind="stable")
        columns = [column[order] for column in columns]
    return columns


def _packing(session: Session, project_id: int) -> tuple[int, int] | None:
    """The project's lowest and highest item id, where 21 bits hold their difference."""
    low, high = session.execute(
        select(func.min(Item.id), func.max(Item.id)).where(Item.project_id == project_id)
    ).one()
    if low is None or high - low >= 1 << 21:
        return None
    return int(low), int(high)


def item_positions(item_ids: np.ndarray, block: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Positions in `item_ids` (sorted) of the ids in `block`'s rows, and which rows name
    known items only. A project's item ids mostly form a narrow range: a lookup table
    then maps millions of ids at memory speed, where a binary search took longer than
    reading them."""
    if not len(item_ids):
        return np.zeros(block.shape, np.int64), np.zeros(len(block), bool)
    low, span = int(item_ids[0]), int(item_ids[-1] - item_ids[0]) + 1
    if span <= 4 * len(item_ids) + 1024:
        lookup = np.full(span, -1, np.int64)
        lookup[item_ids - low] = np.arange(len(item_ids))
        offsets = block - low
        inside = (offsets >= 0) & (offsets < span)
        positions = lookup[np.where(inside, offsets, 0)]
        positions[~inside] = -1
        known = np.asarray((positions >= 0).all(axis=1))
        return positions, known
    positions = np.minimum(np.searchsorted(item_ids, block), len(item_ids) - 1)
    return positions, (item_ids[positions] == block).all(axis=1)
