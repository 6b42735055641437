"""Fast appends to the triplets table: COPY on PostgreSQL, executemany on SQLite.

Both run on the session's own connection, inside its transaction, so a rejected upload
rolls back everything written before the problem was found.
"""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy.orm import Session

from app.triplets.log import hold_append_lock

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
        self, session: Session, project_id: int, extra_columns: tuple[str, ...] = ()
    ) -> None:
        hold_append_lock(session, project_id)
        connection = session.connection()
        self.is_postgres = connection.dialect.name == "postgresql"
        self._driver = connection.connection.driver_connection
        self.columns = BASE_COLUMNS + extra_columns
        self.written = 0

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

    def write(self, rows: list[tuple]) -> None:
        if not rows:
            return
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
