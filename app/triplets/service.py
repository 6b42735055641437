"""Triplets: validated bulk uploads by item key, and streamed exports."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import ColumnElement, Engine, String, case, func, literal, or_, select, type_coerce
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session, aliased

from app.core.config import Settings
from app.core.db import driver_connection
from app.core.errors import ProblemCollector, echo
from app.core.spreadsheets import spreadsheet_safe_sql
from app.models import Item, Project, Rater, Triplet, TripletSource, Upload, UploadKind
from app.models.rater import rater_label
from app.triplets.bulk import TripletWriter, publish, taken_out_on_failure
from app.triplets.log import published
from app.triplets.tally import answer_count
from app.uploads.files import (
    FileFormat,
    UploadedFile,
    csv_rows,
    detect_format,
    json_array_entries,
    read_header,
)
from app.uploads.service import Retryable, UploadResult, find_replay, open_upload

TRIPLET_FORMATS = (FileFormat.csv, FileFormat.json)
ROLES = ("anchor", "closer", "farther")
OPTIONAL_COLUMNS = (
    "source",
    "rater",
    "response_time_ms",
    "created_at",
    "split",
    "adaptive",
    "arm",
    "version",
)
# The judgement (screen) an answer is one of the triplets of: its id in the project's
# judgements export, so a rank screen's triplets group. An upload reads past it: the
# judgements travel in their own file, and an id names a row of this project only.
EXPORT_ONLY_COLUMNS = ("judgement",)
EXPORT_COLUMNS = ROLES + OPTIONAL_COLUMNS + EXPORT_ONLY_COLUMNS
SPLITS = ("train", "test")
_BATCH = 20_000
_CHUNK_BYTES = 256 * 1024


def count_triplets(*, session: Session, project: Project) -> int:
    """The project's answers (published ones), from the hourly tallies and what came
    after them: cheap at millions of answers."""
    return answer_count(session, project.id)


class _RowParser:
    """Turns one record's cells into an encoded row, or records what is wrong with it."""

    def __init__(
        self,
        *,
        session: Session,
        project: Project,
        upload: Upload | None,
        extras: tuple[str, ...],
        file: str,
        problems: ProblemCollector,
        split: str = "train",
        judgement_ids: Mapping[int, int] | None = None,
        typed: bool = False,
    ) -> None:
        # A JSON file's cells are typed: a number sent as text is refused there, as the
        # rater API refuses it.
        self._typed = typed
        # A test split given for the whole file is stored on every row, as a column would.
        self._default_test = split == "test"
        if self._default_test and "split" not in extras:
            extras = (*extras, "split")
        self._appended = tuple(name for name in extras if name in _APPENDED_COLUMNS)
        writer = TripletWriter(
            session, project.id, tuple(_APPENDED_COLUMNS[n] for n in self._appended), upload
        )
        self.writer = writer
        self.file = file
        self.problems = problems
        self.extras = extras
        self._session = session
        self._project = project
        encode = writer.encode
        self._encode = encode
        self.ids: dict[str, Any] = {
            key: encode(item_id)
            for key, item_id in session.execute(
                select(Item.key, Item.id).where(Item.project_id == project.id)
            )
        }
        self._received_at = datetime.now(UTC)
        self._head = (encode(project.id),)
        self._upload = encode(None if upload is None else upload.id)  # None: a check pass
        self._tail = (encode(TripletSource.upload.value), self._upload, encode(self._received_at))
        self._raters: dict[str, Any] = {}
        self._parse_extra: dict[str, Callable[[int, Any], Any]] = {
            "source": self._source,
            "rater": self._rater,
            "response_time_ms": self._response_time,
            "created_at": self._created_at,
            "split": self._split,
            "adaptive": self._adaptive,
            "judgement": self._judgement,
            "arm": self._arm,
            "version": self._version,
        }
        self._judgement_ids = judgement_ids or {}

    def _bad(self, row: int, column: str | None, message: str) -> None:
        self.problems.add(self.file, message, row=row, column=column)

    def _item(self, row: int, role: str, key: Any) -> Any:
        if isinstance(key, str):
            found = self.ids.get(key)
            if found is None:
                found = self.ids.get(key.strip())
        elif isinstance(key, int) and not isinstance(key, bool):
            found = self.ids.get(str(key))
        else:
            self._bad(row, role, "must be an item key")
            return None
        if found is None:
            if key in ("", None):
                self._bad(row, role, "item key is required")
            else:
                self._bad(row, role, f"unknown item '{echo(key)}' (not in this project)")
        return found

    def parse(
        self, row: int, anchor: Any, closer: Any, farther: Any, extra_values: tuple = ()
    ) -> tuple | None:
        a = self._item(row, "anchor", anchor)
        c = self._item(row, "closer", closer)
        f = self._item(row, "farther", farther)
        if a is None or c is None or f is None:
            return None
        if a == c or a == f or c == f:
            self._bad(
                row,
                None,
                f"repeats an item ({anchor}, {closer}, {farther}); "
                "a triplet needs three different items",
            )
            return None
        if not self.extras:
            return (*self._head, a, c, f, *self._tail)
        values = {"split": self._default_test}
        for name, raw in zip(self.extras, extra_values, strict=False):
            value = self._parse_extra[name](row, raw)
            if value is _INVALID:
                return None
            values[name] = value
        encode = self._encode
        source = encode(values["source"]) if values.get("source") else self._tail[0]
        created = encode(values["created_at"]) if "created_at" in values else self._tail[2]
        return (
            *self._head,
            a,
            c,
            f,
            source,
            self._upload,
            created,
            *(encode(values[name]) for name in self._appended),
        )

    def _source(self, row: int, raw: Any) -> Any:
        if raw in ("", None):
            return None
        try:
            return TripletSource(raw).value
        except ValueError:
            self._bad(row, "source", f"'{echo(raw)}' is not one of upload, rater, oracle")
            return _INVALID

    def _rater(self, row: int, raw: Any) -> Any:
        if raw in ("", None):
            return None
        external_id = str(raw).strip()
        if len(external_id) > 200:
            self._bad(row, "rater", "longer than 200 characters")
            return _INVALID
        if external_id not in self._raters:
            rater = self._session.scalar(
                select(Rater).where(
                    Rater.project_id == self._project.id, Rater.external_id == external_id
                )
            )
            if rater is None:
                rater = Rater(project_id=self._project.id, external_id=external_id)
                self._session.add(rater)
                self._session.flush()
            self._raters[external_id] = rater.id
        return self._raters[external_id]

    def _split(self, row: int, raw: Any) -> Any:
        if raw in ("", None):
            return self._default_test
        if raw not in SPLITS:
            self._bad(row, "split", f"'{echo(raw)}' is not train or test")
            return _INVALID
        return raw == "test"

    def _judgement(self, row: int, raw: Any) -> Any:
        """An archive's answer names its judgement by the ref the archive gave it."""
        if raw in ("", None):
            return None
        ref = int(raw) if isinstance(raw, str) and raw.isascii() and raw.isdigit() else raw
        found = self._judgement_ids.get(ref) if isinstance(ref, int) else None
        if found is None:
            self._bad(row, "judgement", f"'{echo(raw)}' is not one of the archive's judgements")
            return _INVALID
        return found

    def _arm(self, row: int, raw: Any) -> Any:
        """The study's arm (condition) the answer came from, as a name."""
        if raw in ("", None):
            return None
        if not isinstance(raw, str | int) or isinstance(raw, bool) or len(str(raw).strip()) > 64:
            self._bad(row, "arm", "must be an arm's name of at most 64 characters")
            return _INVALID
        return str(raw).strip()

    def _version(self, row: int, raw: Any) -> Any:
        """The design version that asked it: a whole number from 1."""
        if raw in ("", None):
            return None
        text = str(raw).strip()
        if (
            isinstance(raw, bool)
            or not (text.isascii() and text.isdigit())
            or not 0 < int(text) < 2**31
        ):
            self._bad(row, "version", f"'{echo(raw)}' is not a design version (1, 2, …)")
            return _INVALID
        return int(text)

    def _adaptive(self, row: int, raw: Any) -> Any:
        if raw in ("", None):
            return False
        if isinstance(raw, bool):
            return raw
        if raw not in ("true", "false"):
            self._bad(row, "adaptive", f"'{echo(raw)}' is not true or false")
            return _INVALID
        return raw == "true"

    def _response_time(self, row: int, raw: Any) -> Any:
        """A whole number of milliseconds, as the rater API takes it (a JSON number, a
        CSV cell of digits)."""
        if raw in ("", None):
            return None
        if isinstance(raw, str) and not self._typed and raw.strip().isascii():
            text = raw.strip()
            value = int(text) if text.isdigit() else None
        else:
            value = raw if isinstance(raw, int) and not isinstance(raw, bool) else None
        if value is None or not 0 <= value <= 2**31 - 1:
            shown = f"'{echo(raw)}'"
            if self._typed and isinstance(raw, str):
                shown = f'"{echo(raw)}", text,'
            elif self._typed:
                shown = echo(json.dumps(raw))
            self._bad(
                row,
                "response_time_ms",
                f"{shown} is not a whole number of milliseconds (0 to 2147483647)",
            )
            return _INVALID
        return value

    def _created_at(self, row: int, raw: Any) -> Any:
        if raw in ("", None):
            return self._received_at
        try:
            moment = datetime.fromisoformat(str(raw).strip().replace("Z", "+00:00"))
            moment = moment.astimezone(UTC) if moment.tzinfo else moment.replace(tzinfo=UTC)
        except (ValueError, OverflowError):
            self._bad(row, "created_at", f"'{echo(raw)}' is not an ISO 8601 date and time (UTC)")
            return _INVALID
        return moment


_INVALID = object()
# Optional columns stored after the fixed ones, with their column names in the table.
_APPENDED_COLUMNS = {
    "rater": "rater_id",
    "response_time_ms": "response_time_ms",
    "split": "is_test",
    "adaptive": "adaptive",
    "judgement": "judgement_id",  # a judgement upload's triplets (app/triplets/judged.py)
    "arm": "arm",
    "version": "design_version",
}


def _ingest_csv(
    upload: UploadedFile,
    make_parser: Callable[[tuple[str, ...]], _RowParser],
    problems: ProblemCollector,
    read: tuple[str, ...],
) -> _RowParser:
    rows = csv_rows(upload, problems)
    columns = read_header(upload, rows, ROLES, OPTIONAL_COLUMNS + EXPORT_ONLY_COLUMNS)
    extras = tuple(name for name in read if name in columns)
    parser = make_parser(extras)
    writer = parser.writer
    ia, ic, i_f = (columns.index(role) for role in ROLES)
    extra_positions = [columns.index(name) for name in extras]
    width = len(columns)
    batch: list[tuple] = []
    parse = parser.parse
    for line, fields in rows:
        if len(fields) != width:
            if fields:
                problems.add(upload.name, f"expected {width} fields, found {len(fields)}", row=line)
            continue
        encoded = parse(
            line, fields[ia], fields[ic], fields[i_f], tuple(fields[i] for i in extra_positions)
        )
        if encoded is None or problems.problems:
            continue
        batch.append(encoded)
        if len(batch) >= _BATCH:
            writer.write(batch, commit=True)
            batch = []
    if not problems.problems:
        writer.write(batch)
    return parser


def _ingest_json(
    upload: UploadedFile,
    make_parser: Callable[[tuple[str, ...]], _RowParser],
    problems: ProblemCollector,
    read: tuple[str, ...],
) -> _RowParser:
    """A JSON array of [anchor, closer, farther] lists or of objects with those fields."""
    # Read once, as it streams: every field read is parsed, absent ones as empty cells.
    extras = read
    parser = make_parser(extras)
    writer = parser.writer
    allowed = set(ROLES) | set(OPTIONAL_COLUMNS) | set(EXPORT_ONLY_COLUMNS)
    batch: list[tuple] = []
    for index, entry in json_array_entries(upload, "triplets", "triplets"):
        if isinstance(entry, list):
            if len(entry) != 3:
                problems.add(
                    upload.name,
                    f"expected [anchor, closer, farther], found {len(entry)} values",
                    row=index,
                )
                continue
            anchor, closer, farther = entry
            encoded = parser.parse(index, anchor, closer, farther, tuple(None for _ in extras))
        elif isinstance(entry, dict):
            unknown = sorted(set(entry) - allowed)
            for name in unknown:
                problems.add(
                    upload.name,
                    "unknown field (expected anchor, closer, farther, "
                    f"{', '.join(OPTIONAL_COLUMNS)})",
                    row=index,
                    column=name,
                )
            if unknown:
                continue
            encoded = parser.parse(
                index,
                entry.get("anchor"),
                entry.get("closer"),
                entry.get("farther"),
                tuple(entry.get(n) for n in extras),
            )
        else:
            problems.add(upload.name, "expected a list or an object", row=index)
            continue
        if encoded is not None and not problems.problems:
            batch.append(encoded)
            if len(batch) >= _BATCH:
                writer.write(batch, commit=True)
                batch = []
    if not problems.problems:
        writer.write(batch)
    return parser


def ingest_triplets(
    *,
    session: Session,
    settings: Settings,
    project: Project,
    upload: UploadedFile,
    requested_format: FileFormat | None,
    idempotency_key: str | None,
    on_error: str = "reject",
    split: str = "train",
    judgement_ids: Mapping[int, int] | None = None,
) -> UploadResult:
    """Stream the file into the table in committed chunks and publish it at the end; on
    any problem, take out what was committed, so the upload changes nothing (with
    on_error="skip", a row with a problem is left out and listed instead). `split`
    "test" stores the file as the researcher's test split (a `split` column decides per
    row). An upload reads past the export's `judgement` column, unless `judgement_ids`
    maps its values (an archive's judgements, restored first) to the judgements made."""
    request = Retryable.of(idempotency_key, upload, "triplets", requested_format, on_error, split)
    replay = find_replay(
        session=session, project=project, kind=UploadKind.triplets, request=request
    )
    if replay:
        return replay
    fmt = detect_format(upload, requested_format, TRIPLET_FORMATS)
    upload_row = open_upload(
        session=session,
        project=project,
        kind=UploadKind.triplets,
        filename=upload.name,
        request=request,
    )
    problems = ProblemCollector(settings.max_upload_errors, skip_rows=on_error == "skip")

    def make_parser(extras: tuple[str, ...]) -> _RowParser:
        return _RowParser(
            session=session,
            project=project,
            upload=upload_row,
            extras=extras,
            file=upload.name,
            problems=problems,
            split=split,
            judgement_ids=judgement_ids,
            typed=fmt is FileFormat.json,
        )

    ingest = _ingest_csv if fmt is FileFormat.csv else _ingest_json
    read = OPTIONAL_COLUMNS + (EXPORT_ONLY_COLUMNS if judgement_ids is not None else ())
    with taken_out_on_failure(session, upload_row):
        written = ingest(upload, make_parser, problems, read).writer.written
        if not problems.problems and written == 0:
            skipped = (
                f" ({len(problems.skipped_rows)} rows skipped)" if problems.skipped_rows else ""
            )
            problems.add(upload.name, f"no triplets in the file{skipped}")
        problems.raise_if_any()
    publish(session, upload_row, written)
    return UploadResult(upload_row.id, UploadKind.triplets, written).with_skipped(problems)


@dataclass(frozen=True)
class ExportFilter:
    """Which answers an export holds: one source, one rater (by the id their platform
    gave them), and whether excluded raters' answers are in ("all"), out ("counted")
    or the only ones ("excluded"); a caller who may not see the platform ids gets
    pseudonyms (`identified` false)."""

    source: TripletSource | None = None
    rater: str | None = None
    raters: str = "all"
    # Whether raters are named by their platform ids (else by pseudonym: rater_label).
    identified: bool = True

    def clauses(self) -> list:
        found = []
        if self.source is not None:
            found.append(Triplet.source == self.source)
        if self.rater is not None:
            found.append(Rater.external_id == self.rater)
        if self.raters == "counted":
            found.append(or_(Triplet.rater_id.is_(None), Rater.excluded.is_(False)))
        elif self.raters == "excluded":
            found.append(Rater.excluded.is_(True))
        return found


EVERY_ANSWER = ExportFilter()


def export_select(
    dialect: str, project_id: int, spreadsheet: bool = False, only: ExportFilter = EVERY_ANSWER
) -> str:
    """Rows by item key, oldest first, with keys joined and timestamps formatted by the
    database itself: per-row work in Python is what made exports slow. For a CSV
    download (`spreadsheet`), text that a spreadsheet would run as a formula is quoted."""
    anchor, closer, farther = (aliased(Item, name=name) for name in ("a", "c", "f"))
    created: ColumnElement[str]
    if dialect == "postgresql":
        created = func.to_char(
            func.timezone("UTC", Triplet.created_at), literal('YYYY-MM-DD"T"HH24:MI:SS.US"+00:00"')
        )
    else:  # stored as "YYYY-MM-DD HH:MM:SS.ffffff" in UTC (see TripletWriter.encode)
        created = func.replace(Triplet.created_at, " ", "T").concat("+00:00")
    safe = spreadsheet_safe_sql if spreadsheet else (lambda column: column)
    query = (
        select(
            safe(anchor.key),
            safe(closer.key),
            safe(farther.key),
            type_coerce(Triplet.source, String),
            safe(rater_label(only.identified)),
            Triplet.response_time_ms,
            type_coerce(created, String),
            case((Triplet.is_test, literal("test")), else_=literal("train")),
            case((Triplet.adaptive, literal("true")), else_=literal("false")),
            safe(Triplet.arm),
            Triplet.design_version,
            Triplet.judgement_id,
        )
        .join(anchor, anchor.id == Triplet.anchor_id)
        .join(closer, closer.id == Triplet.closer_id)
        .join(farther, farther.id == Triplet.farther_id)
        .outerjoin(Rater, Rater.id == Triplet.rater_id)
        .where(Triplet.project_id == project_id, published(project_id), *only.clauses())
        .order_by(Triplet.id)
    )
    dialect_impl = postgresql.dialect() if dialect == "postgresql" else sqlite.dialect()
    return str(query.compile(dialect=dialect_impl, compile_kwargs={"literal_binds": True}))


def export_rows(
    engine: Engine, project_id: int, spreadsheet: bool = False, only: ExportFilter = EVERY_ANSWER
) -> Iterator[list[tuple]]:
    """Plain tuples in batches from the driver's cursor (server-side on PostgreSQL)."""
    sql = export_select(engine.dialect.name, project_id, spreadsheet, only)
    with engine.connect() as connection:
        driver = driver_connection(connection)
        if engine.dialect.name == "postgresql":
            cursor = driver.cursor(name="closer_triplet_export")
            cursor.itersize = _BATCH
        else:
            cursor = driver.cursor()
        try:
            cursor.execute(sql)
            while batch := cursor.fetchmany(_BATCH):
                yield batch
        finally:
            cursor.close()


def copied_csv(engine: Engine, sql: str, chunk_bytes: int) -> Iterator[bytes]:
    """PostgreSQL's rows of `sql` as CSV through COPY, in chunks of whole rows of at
    least `chunk_bytes` (the last one aside). PostgreSQL sends a message per row; every
    chunk handed on costs (a thread hop to the response, a parse), so large ones."""
    with engine.connect() as connection:
        driver = driver_connection(connection)
        with driver.cursor() as cursor:
            with cursor.copy(f"COPY ({sql}) TO STDOUT WITH (FORMAT csv)") as copy:
                pending = bytearray()
                for block in copy:
                    pending += block
                    if len(pending) >= chunk_bytes:
                        yield bytes(pending)
                        pending.clear()
                if pending:
                    yield bytes(pending)


def export_triplets_csv(
    engine: Engine, project_id: int, only: ExportFilter = EVERY_ANSWER
) -> Iterator[bytes]:
    # With a byte-order mark, as the participants CSV: Excel reads UTF-8 only with one.
    yield ("\ufeff" + ",".join(EXPORT_COLUMNS) + "\n").encode()
    if engine.dialect.name == "postgresql":
        sql = export_select("postgresql", project_id, spreadsheet=True, only=only)
        yield from copied_csv(engine, sql, _CHUNK_BYTES)
        return
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    for batch in export_rows(engine, project_id, spreadsheet=True, only=only):
        writer.writerows(batch)
        yield buffer.getvalue().encode()
        buffer.seek(0)
        buffer.truncate()


def export_triplets_json(
    engine: Engine, project_id: int, only: ExportFilter = EVERY_ANSWER
) -> Iterator[str]:
    yield "["
    separator = ""
    encode = json.JSONEncoder(ensure_ascii=False).encode
    for batch in export_rows(engine, project_id, only=only):
        objects = [dict(zip(EXPORT_COLUMNS, row, strict=True)) for row in batch]
        yield separator + encode(objects)[1:-1]
        separator = ","
    yield "]"
