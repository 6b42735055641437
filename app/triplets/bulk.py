"""Fast appends to the triplets table: COPY on PostgreSQL, executemany on SQLite.

Both run on the session's own connection. An upload commits its rows chunk by chunk
(`write(rows, commit=True)`) as an unpublished upload that nobody reads (see
app/triplets/log.py): SQLite has one writer at a time, and one transaction over a large
file kept every rater's answer waiting for its end. A rejected upload is then taken out
again with `discard_upload`, so it still changes nothing that anyone sees.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import delete, exists, select, update
from sqlalchemy.orm import Session

from app.core.db import driver_connection, rows_changed
from app.models import Judgement, Rater, RaterSession, Triplet, Upload
from app.models._types import utcnow
from app.triplets.log import hold_append_lock, newest_id

DISCARD_BATCH = 20_000
# An unpublished upload whose last chunk is this old died with its process: a chunk
# takes well under a second.
ABANDONED_AFTER = timedelta(minutes=10)

BASE_COLUMNS = (
    "project_id",
    "anchor_id",
    "closer_id",
    "farther_id",
    "source",
    "upload_id",
    "created_at",
)


class TripletWriter:
    """Rows arrive already encoded for the database at hand (see `encode`): on PostgreSQL
    tuples of COPY text fields, on SQLite tuples of Python values."""

    def __init__(
        self,
        session: Session,
        project_id: int,
        extra_columns: tuple[str, ...] = (),
        upload: Upload | None = None,
    ) -> None:
        self._session = session
        self._project_id = project_id
        self._upload = upload
        self.is_postgres = session.connection().dialect.name == "postgresql"
        # The append lock is taken by the first write, not before: a file's rows are
        # read and checked without holding up the log's readers.
        self._driver: Any = None
        self._floor: int | None = None
        self.columns = BASE_COLUMNS + extra_columns
        self.written = 0

    def _hold_lock(self) -> None:
        hold_append_lock(self._session, self._project_id)
        self._driver = driver_connection(self._session.connection())
        if self._floor is None and self._upload is not None:
            # Every id this upload draws comes after the newest one now: with the append
            # lock held on PostgreSQL, or the write lock on SQLite (its first write).
            self._floor = newest_id(self._session, self._project_id)

    def encode(self, value):
        """One field as this writer's rows hold it."""
        if isinstance(value, datetime):
            # SQLite gets SQLAlchemy's own storage format, so ORM reads and SQL exports agree.
            moment = value.astimezone(UTC)
            return (
                moment.isoformat() if self.is_postgres else moment.strftime("%Y-%m-%d %H:%M:%S.%f")
            )
        if not self.is_postgres:
            return value
        return "\\N" if value is None else str(value)

    def write(self, rows: list[tuple], *, commit: bool = False) -> None:
        """Append `rows`; with `commit`, commit them as a chunk of the unpublished upload
        (the writer must have been given one)."""
        if not rows:
            return
        if self._driver is None:
            self._hold_lock()
        names = ", ".join(self.columns)
        if self.is_postgres:
            with self._driver.cursor() as cursor:
                with cursor.copy(f"COPY triplets ({names}) FROM STDIN") as copy:
                    copy.write("\n".join(map("\t".join, rows)) + "\n")
        else:
            placeholders = ", ".join("?" for _ in self.columns)
            self._driver.executemany(
                f"INSERT INTO triplets ({names}) VALUES ({placeholders})", rows
            )
        self.written += len(rows)
        if commit:
            self._commit_chunk()

    def _commit_chunk(self) -> None:
        upload = self._upload
        assert upload is not None  # only an upload's rows are committed a chunk at a time
        assert self._floor is not None  # taken by the first write
        if not upload.pending:
            upload.pending = True
            upload.first_triplet_id = self._floor + 1
        upload.touched_at = utcnow()
        self._session.commit()
        # A new transaction, maybe on another pooled connection.
        self._hold_lock()


@contextmanager
def taken_out_on_failure(session: Session, upload: Upload) -> Iterator[None]:
    """Whatever fails inside, the chunks this upload committed are taken out again, so
    the upload changes nothing."""
    upload_id = upload.id
    try:
        yield
    except BaseException:
        if upload.pending:  # a chunk was committed
            session.rollback()
            discard_upload(session, upload_id)
        raise


def publish(session: Session, upload: Upload, rows: int) -> None:
    """The upload's rows, read by everyone from the request's commit on."""
    upload.row_count = rows
    upload.pending = False
    session.flush()


def claim_abandoned_upload(session: Session, upload_id: int) -> bool:
    """Make this process the one that discards an abandoned upload, and commit the claim.

    Several workers look for abandoned uploads at once. Two discarding the same upload
    each saw a batch come back short (the other had taken rows), took that for the end
    and deleted the upload, which published whatever rows were left. The claim is a
    compare-and-set on `touched_at`: exactly one worker moves it from stale to now, and
    to every other worker the upload then looks alive again for `ABANDONED_AFTER`. The
    discard renews it with every batch, so a claimant that dies mid-way is followed by
    another one later, never by a second one at the same time."""
    now = utcnow()
    claimed = rows_changed(
        session.execute(
            update(Upload)
            .where(
                Upload.id == upload_id, Upload.pending, Upload.touched_at < now - ABANDONED_AFTER
            )
            .values(touched_at=now)
        )
    )
    session.commit()
    return claimed == 1


def discard_upload(session: Session, upload_id: int) -> int:
    """Take out an unpublished upload: its rows a chunk per transaction (they are read by
    nobody meanwhile), then its judgements, then the raters it created that nothing else
    refers to, then the upload itself. Returns the number of rows removed.

    The caller must be the upload's only discarder: its writer (a rejected upload) or the
    worker holding `claim_abandoned_upload`. Even so the upload row goes only once none
    of its rows is left, since its row is what keeps them unpublished."""
    upload = session.get(Upload, upload_id)
    if upload is None or not upload.pending:
        return 0
    project_id, created_at, floor = upload.project_id, upload.created_at, upload.first_triplet_id
    ours = (
        Triplet.project_id == project_id,
        Triplet.id >= (floor if floor is not None else 0),
        Triplet.upload_id == upload_id,
    )
    removed = 0
    if floor is not None:
        while True:
            batch = select(Triplet.id).where(*ours).limit(DISCARD_BATCH)
            count = rows_changed(session.execute(delete(Triplet).where(Triplet.id.in_(batch))))
            # Renews the claim: this discard is alive.
            session.execute(
                update(Upload).where(Upload.id == upload_id).values(touched_at=utcnow())
            )
            session.commit()
            removed += count
            if count == 0:  # a short batch is no proof of the end: only an empty one is
                break
        while True:  # a judgement upload's judgements, once their triplets are gone
            batch = select(Judgement.id).where(Judgement.upload_id == upload_id)
            count = rows_changed(
                session.execute(
                    delete(Judgement).where(Judgement.id.in_(batch.limit(DISCARD_BATCH)))
                )
            )
            session.execute(
                update(Upload).where(Upload.id == upload_id).values(touched_at=utcnow())
            )
            session.commit()
            if count == 0:
                break
        # Triplets naming a rater created after the upload began come after its floor.
        session.execute(
            delete(Rater).where(
                Rater.project_id == project_id,
                Rater.created_at >= created_at,
                ~exists().where(RaterSession.rater_id == Rater.id),
                ~exists().where(
                    Triplet.project_id == project_id,
                    Triplet.id >= floor,
                    Triplet.rater_id == Rater.id,
                ),
            )
        )
    session.execute(
        delete(Upload).where(Upload.id == upload_id, Upload.pending, ~exists().where(*ours))
    )
    session.commit()
    return removed


def abandoned_uploads(session: Session) -> list[int]:
    """Unpublished uploads whose writer is gone (its process crashed mid-upload)."""
    return list(
        session.scalars(
            select(Upload.id).where(Upload.pending, Upload.touched_at < utcnow() - ABANDONED_AFTER)
        )
    )
