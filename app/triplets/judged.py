"""Judgements in files: uploads of judgements of the formats files take in (app/formats:
odd-one-out, rank ("pick k of n"), …), each stored as one judgement with the triplets its
format says it implies, and the export of every judgement as shown and answered. Each
format checks the shape of its rows and writes its cells.

One column layout serves both, so an export uploads again, and the files real studies
publish map onto it (THINGS' odd-one-out triplets: `item1..item3` and the odd one as
`pick1`; ImageNet-HSJ's 2-of-8 trials: the query as `reference`, the eight shown as
`item1..item8`, the two picks in order as `pick1`, `pick2`):

    reference   rank only: the item the picks are most like
    item1 …     the items shown, in display order (3 to 12; trailing cells may be empty)
    pick1 …     what was picked, in order: the odd one (odd-one-out), or the picks most
                like the reference, most alike first (rank: fewer than the items)
    format      optional: the format's name (else: rank with a reference, else
                odd-one-out), and rater, response_time_ms, created_at, arm, version
                as for triplets

The export adds the judgements of CompRF's sorting screens (format `sort`): their
`pivot_left` and `pivot_right`, the items shown, and as `pick1 …` the side each item was
put on (left, right or cant_tell). Those are not uploaded (their triplets are).

JSON: an array of objects with `reference`, `items` (a list), `picks` (a list) and the
optional fields. An upload commits in chunks like a triplet upload (judgements and their
triplets in the same chunk) and is published whole at its end or taken out whole.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from sqlalchemy import (
    Engine,
    Text,
    bindparam,
    cast,
    exists,
    func,
    insert,
    or_,
    select,
)
from sqlalchemy.orm import Session

from app.core.config import Settings
from app.core.db import FastStatement
from app.core.errors import ProblemCollector, echo
from app.core.spreadsheets import spreadsheet_safe
from app.formats import PickedScreen, UnknownFormat, named, uploaded
from app.models import (
    Item,
    Judgement,
    Project,
    Rater,
    Upload,
    UploadKind,
)
from app.models.rater import rater_label
from app.triplets.bulk import publish, taken_out_on_failure
from app.triplets.service import _INVALID, _RowParser
from app.uploads.files import (
    FileFormat,
    UploadedFile,
    csv_rows,
    detect_format,
    json_array_entries,
    read_header,
)
from app.uploads.service import Retryable, UploadResult, find_replay, open_upload

MOST_ITEMS = 12
# The arm and design version it was asked under travel with an export: a judgement file
# exported and uploaded again keeps them, as a triplet file does.
CELLS = ("rater", "response_time_ms", "created_at", "arm", "version")
# The cells read without the database.
CHECKED_CELLS = ("response_time_ms", "created_at", "arm", "version")
PIVOTS = ("pivot_left", "pivot_right")
OPTIONAL = ("judgement", "format", "reference", *PIVOTS, *CELLS)
_NUMBERED = re.compile(r"^(item|pick)([1-9][0-9]?)$")
_CHUNK = 5_000  # judgements a committed chunk holds (up to 13 triplets each)
_READ_CHUNK = 50_000  # judgements a fit reads a query


class _Judgements:
    """Reads one judgement's cells, checks it, and writes judgements and their triplets
    in committed chunks of the upload. `checking`: only checks them (the first pass)."""

    def __init__(
        self,
        session: Session,
        project: Project,
        upload: Upload | None,
        file: str,
        problems,
        typed: bool,
        checking: bool = False,
    ):
        self.checking = checking
        self.cells = _RowParser(
            session=session,
            project=project,
            upload=upload,
            extras=(*CELLS, "judgement"),
            file=file,
            problems=problems,
            typed=typed,
        )
        self.writer = self.cells.writer
        self.session, self.project, self.file = session, project, file
        self.upload_id = None if upload is None else upload.id
        self.problems = problems
        self.ids = dict(
            session.execute(select(Item.key, Item.id).where(Item.project_id == project.id)).all()
        )
        self.pending: list[dict] = []
        self.judged = 0
        # The formats files take, and the one a row that declares none is read as, by
        # whether the row has a reference: read once, not once a row.
        self.formats = {format.name: format for format in uploaded()}
        self.undeclared = {
            with_reference: next(
                format
                for format in self.formats.values()
                if format.read_when_undeclared and format.has_reference == with_reference
            )
            for with_reference in (False, True)
        }

    def _bad(self, row: int, column: str | None, message: str) -> None:
        self.problems.add(self.file, message, row=row, column=column)

    def _id(self, row: int, column: str, key: Any) -> int | None:
        if isinstance(key, int) and not isinstance(key, bool):
            key = str(key)
        if not isinstance(key, str):
            self._bad(row, column, "must be an item key")
            return None
        found = self.ids.get(key, self.ids.get(key.strip()))
        if found is None:
            self._bad(row, column, f"unknown item '{echo(key)}' (not in this project)")
        return found

    def add(self, row: int, fields: dict[str, Any], items: list, picks: list) -> None:
        """One judgement: its reference (or None), items and picks as keys, and its
        optional cells; a problem is recorded instead of a judgement."""
        reference = fields.get("reference")
        reference = None if reference in ("", None) else reference
        format = self._format(row, fields, reference)
        if format is None:
            return
        problem = format.file_row_problem(reference, items, picks)
        if problem is not None:
            self._bad(row, *problem)
            return
        ids = [self._id(row, f"item{at}", key) for at, key in enumerate(items, start=1)]
        chosen = [self._id(row, f"pick{at}", key) for at, key in enumerate(picks, start=1)]
        anchor = None if reference is None else self._id(row, "reference", reference)
        if None in ids or None in chosen or (reference is not None and anchor is None):
            return
        if len(set(ids)) < len(ids):
            self._bad(row, None, "shows an item twice; a judgement's items are different")
            return
        if anchor in ids:
            self._bad(row, "reference", "is also among the items shown")
            return
        if len(set(chosen)) < len(chosen) or not set(chosen) <= set(ids):
            self._bad(row, None, "picks must be different items, each one of the items shown")
            return
        cells = CHECKED_CELLS if self.checking else CELLS
        values = {name: self.cells._parse_extra[name](row, fields.get(name)) for name in cells}
        if _INVALID in values.values():
            return
        if self.checking:
            return
        known = [item for item in ids if item is not None]  # every one, by now
        self.pending.append(
            {
                "project_id": self.project.id,
                "format": format,
                "context": [] if anchor is None else [anchor],
                "shown": ids,
                "chosen": chosen,
                "screen": format.screen_of([] if anchor is None else [anchor], known),
                "rater_id": values["rater"],
                "upload_id": self.upload_id,
                "response_time_ms": values["response_time_ms"],
                "created_at": values["created_at"],
                "arm": values["arm"],
                "design_version": values["version"],
            }
        )
        if len(self.pending) >= _CHUNK:
            self.flush(commit=True)

    def _format(self, row: int, fields: dict[str, Any], reference) -> PickedScreen | None:
        """The row's format: the one it declares, else the one read by default for a row
        with (or without) a reference; None once a problem is recorded."""
        declared = fields.get("format")
        declared = None if declared in ("", None) else declared
        try:
            known = None if declared is None else named(declared)
        except UnknownFormat:
            known = None
        if (known is not None and known.has_pivots) or any(fields.get(name) for name in PIVOTS):
            self._bad(
                row,
                "format",
                "a sorting screen's judgement is not uploaded: upload its triplets instead",
            )
            return None
        if declared is None:
            return self.undeclared[reference is not None]
        taken = self.formats.get(known.name) if known is not None else None
        if taken is None:
            choices = " or ".join(self.formats)
            self._bad(row, "format", f"'{echo(declared)}' is not {choices}")
        return taken

    def flush(self, commit: bool = False) -> None:
        """Write the judgements read so far, and their triplets (unless a problem was found)."""
        if not self.pending or self.problems.problems:
            self.pending = []
            return
        returned = self.session.execute(
            insert(Judgement).returning(Judgement.id, sort_by_parameter_order=True), self.pending
        )
        encode = self.writer.encode
        rows = []
        for judgement, (judgement_id,) in zip(self.pending, returned.all(), strict=True):
            for anchor, closer, farther in _implied(judgement):
                rows.append(
                    (
                        *self.cells._head,
                        encode(anchor),
                        encode(closer),
                        encode(farther),
                        self.cells._tail[0],
                        self.cells._upload,
                        encode(judgement["created_at"]),
                        encode(judgement["rater_id"]),
                        encode(judgement["response_time_ms"]),
                        encode(judgement["arm"]),
                        encode(judgement["design_version"]),
                        encode(judgement_id),
                    )
                )
        self.judged += len(self.pending)
        self.pending = []
        self.writer.write(rows, commit=commit)


def _implied(judgement: dict) -> list:
    context = judgement["context"]
    reference = context[0] if context else None
    format = judgement["format"]
    return format.implied_triplets(reference, judgement["shown"], judgement["chosen"]).tolist()


def _numbered(columns: list[str], kind: str) -> list[int]:
    """The positions of the item1… (or pick1…) columns, in order; they must run from 1."""
    found = {
        int(m.group(2)): at
        for at, name in enumerate(columns)
        if (m := _NUMBERED.match(name)) and m.group(1) == kind
    }
    return [found[n] for n in range(1, len(found) + 1) if n in found]


def _read_csv(upload: UploadedFile, judgements: _Judgements, problems: ProblemCollector) -> None:
    rows = csv_rows(upload, problems)
    columns = read_header(upload, rows, ("item1", "pick1"), OPTIONAL, ("item", "pick"))
    items, picks = _numbered(columns, "item"), _numbered(columns, "pick")
    if len(items) != sum(name.startswith("item") for name in columns) or len(picks) != sum(
        name.startswith("pick") for name in columns
    ):
        problems.add(upload.name, "item and pick columns must be numbered from 1 without gaps")
        problems.raise_if_any()
    named = {name: columns.index(name) for name in OPTIONAL if name in columns}
    width = len(columns)
    for line, fields in rows:
        if len(fields) != width:
            if fields:
                problems.add(upload.name, f"expected {width} fields, found {len(fields)}", row=line)
            continue
        judgements.add(
            line,
            {name: fields[at] for name, at in named.items()},
            [fields[at] for at in items if fields[at] != ""],
            [fields[at] for at in picks if fields[at] != ""],
        )
    judgements.flush()


def _read_json(upload: UploadedFile, judgements: _Judgements, problems: ProblemCollector) -> None:
    allowed = {"items", "picks", *OPTIONAL}
    for index, entry in json_array_entries(upload, "judgements", "judgements"):
        if not isinstance(entry, dict):
            problems.add(upload.name, "expected an object", row=index)
            continue
        unknown = sorted(set(entry) - allowed)
        for name in unknown:
            problems.add(
                upload.name,
                f"unknown field (expected items, picks, {', '.join(OPTIONAL)})",
                row=index,
                column=name,
            )
        items, picks = entry.get("items"), entry.get("picks")
        if not isinstance(items, list) or not isinstance(picks, list):
            problems.add(upload.name, "items and picks must be lists of item keys", row=index)
            continue
        if unknown or len(items) > MOST_ITEMS or len(picks) > MOST_ITEMS:
            if not unknown:
                problems.add(upload.name, f"at most {MOST_ITEMS} items and picks", row=index)
            continue
        judgements.add(index, entry, items, picks)
    judgements.flush()


def ingest_judgements(
    *,
    session: Session,
    settings: Settings,
    project: Project,
    upload: UploadedFile,
    requested_format: FileFormat | None,
    idempotency_key: str | None,
    on_error: str = "reject",
) -> UploadResult:
    """Judgements from a file, each with the triplets it implies, all or nothing (with
    on_error="skip" a row with a problem is left out and listed). `rows` counts the
    judgements stored."""
    request = Retryable.of(idempotency_key, upload, "judgements", requested_format, on_error)
    replay = find_replay(
        session=session, project=project, kind=UploadKind.triplets, request=request
    )
    if replay:
        return replay
    fmt = detect_format(upload, requested_format, (FileFormat.csv, FileFormat.json))
    read = _read_csv if fmt is FileFormat.csv else _read_json
    typed = fmt is FileFormat.json
    skip = on_error == "skip"
    # A first pass checks every row, writing and locking nothing: a bad key near the end
    # of a long file is refused in the time it takes to read the file, not after its
    # committed chunks were written and taken out again.
    found = ProblemCollector(settings.max_upload_errors, skip_rows=skip)
    start = upload.stream.tell()
    read(upload, _Judgements(session, project, None, upload.name, found, typed, True), found)
    found.raise_if_any()
    upload.stream.seek(start)
    upload_row = open_upload(
        session=session,
        project=project,
        kind=UploadKind.triplets,
        filename=upload.name,
        request=request,
    )
    problems = ProblemCollector(settings.max_upload_errors, skip_rows=skip)
    with taken_out_on_failure(session, upload_row):
        judgements = _Judgements(session, project, upload_row, upload.name, problems, typed)
        read(upload, judgements, problems)
        if not problems.problems and judgements.judged == 0:
            problems.add(upload.name, "no judgements in the file")
        problems.raise_if_any()
    publish(session, upload_row, judgements.judged)
    return UploadResult(upload_row.id, UploadKind.triplets, judgements.judged).with_skipped(
        problems
    )


def published_judgements(project_id: int):
    """The project's judgements but those of an upload still being written."""
    unpublished = exists().where(Upload.id == Judgement.upload_id, Upload.pending)
    return (Judgement.project_id == project_id, or_(Judgement.upload_id.is_(None), ~unpublished))


def _widest(engine: Engine, project_id: int) -> tuple[int, int]:
    length = (
        func.jsonb_array_length if engine.dialect.name == "postgresql" else func.json_array_length
    )
    with engine.connect() as connection:
        items, picks = connection.execute(
            select(func.max(length(Judgement.shown)), func.max(length(Judgement.chosen))).where(
                *published_judgements(project_id)
            )
        ).one()
    return items or 3, picks or 1


def published_batches(
    engine: Engine, project_id: int, size: int = _CHUNK, identified: bool = True
) -> Iterator[tuple[Sequence[Any], dict[int, str], dict[int, str]]]:
    """The published judgements oldest first, `size` at a time, each batch with the
    project's item keys and raters' ids by row id."""
    with engine.connect() as connection:
        keys = dict(
            connection.execute(select(Item.id, Item.key).where(Item.project_id == project_id)).all()
        )
        raters = dict(
            connection.execute(
                select(Rater.id, rater_label(identified)).where(Rater.project_id == project_id)
            ).all()
        )
        after = 0
        while batch := connection.execute(
            select(Judgement)
            .where(*published_judgements(project_id), Judgement.id > after)
            .order_by(Judgement.id)
            .limit(size)
        ).all():
            after = batch[-1].id
            yield batch, keys, raters


def _exported(engine: Engine, project_id: int, identified: bool) -> Iterator[list[dict]]:
    """Judgements with item keys and rater ids, oldest first, in batches."""
    for batch, keys, raters in published_batches(engine, project_id, identified=identified):
        yield [judgement_out(row, keys, raters) for row in batch]


def judgement_out(row, keys: dict[int, str], raters: dict[int, str]) -> dict:
    cells = row.format.exported(row.context, row.shown, row.chosen, keys)
    return {
        "judgement": row.id,
        "format": row.format.name,
        "reference": cells.reference,
        "pivot_left": cells.pivot_left,
        "pivot_right": cells.pivot_right,
        "items": [keys.get(item) for item in row.shown],
        "picks": cells.picks,
        "rater": raters.get(row.rater_id),
        "response_time_ms": row.response_time_ms,
        "created_at": row.created_at.isoformat(),
        "arm": row.arm,
        "version": row.design_version,
    }


def export_judgements_csv(
    engine: Engine, project_id: int, identified: bool = True
) -> Iterator[bytes]:
    widest_items, widest_picks = _widest(engine, project_id)
    header = [
        "judgement",
        "format",
        "reference",
        *PIVOTS,
        *(f"item{n}" for n in range(1, widest_items + 1)),
        *(f"pick{n}" for n in range(1, widest_picks + 1)),
        *CELLS,
    ]
    buffer = io.StringIO()
    buffer.write("\ufeff")  # Excel reads UTF-8 only with a byte-order mark
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(header)
    for batch in _exported(engine, project_id, identified):
        for row in batch:
            items = row["items"] + [""] * (widest_items - len(row["items"]))
            picks = row["picks"] + [""] * (widest_picks - len(row["picks"]))
            writer.writerow(
                [
                    row["judgement"],
                    row["format"],
                    spreadsheet_safe(row["reference"] or ""),
                    *(spreadsheet_safe(row[name] or "") for name in PIVOTS),
                    *(spreadsheet_safe(key) for key in items),
                    *(spreadsheet_safe(key) for key in picks),
                    spreadsheet_safe(row["rater"] or ""),
                    "" if row["response_time_ms"] is None else row["response_time_ms"],
                    row["created_at"],
                    spreadsheet_safe(row["arm"] or ""),
                    "" if row["version"] is None else row["version"],
                ]
            )
        yield buffer.getvalue().encode()
        buffer.seek(0)
        buffer.truncate()
    yield buffer.getvalue().encode()


def export_judgements_json(
    engine: Engine, project_id: int, identified: bool = True
) -> Iterator[str]:
    yield "["
    separator = ""
    encode = json.JSONEncoder(ensure_ascii=False).encode
    for batch in _exported(engine, project_id, identified):
        if batch:
            yield separator + encode(batch)[1:-1]
            separator = ","
    yield "]"


@dataclass(frozen=True)
class AnsweredScreens:
    """Judgements of one format and shape (as many items shown, as many picked) as
    arrays of item ids: `references` (or None where the format has none), `shown` (m, n)
    and `chosen` (m, k), with the judgements' `ids`."""

    format: str
    ids: np.ndarray
    references: np.ndarray | None
    shown: np.ndarray
    chosen: np.ndarray


_SCREENS = FastStatement(
    select(
        Judgement.id,
        Judgement.format,
        cast(Judgement.context, Text),
        cast(Judgement.shown, Text),
        cast(Judgement.chosen, Text),
    )
    .where(
        Judgement.project_id == bindparam("project"),
        Judgement.id > bindparam("after"),
        Judgement.id <= bindparam("last"),
    )
    .order_by(Judgement.id)
    .limit(bindparam("most"))
)


def _numbers(texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """JSON arrays of integers ("[3, 1, 2]") as one flat array and each one's length."""
    lengths = np.array([0 if text == "[]" else text.count(",") + 1 for text in texts])
    joined = ",".join(text[1:-1] for text in texts if text != "[]")
    flat = np.array(joined.split(","), dtype=np.int64) if joined else np.empty(0, np.int64)
    return flat, lengths


def answered_screens(
    session: Session, project_id: int, judgement_ids: np.ndarray, formats: Sequence[str]
) -> list[AnsweredScreens]:
    """The judgements of `judgement_ids` (ascending) in `formats`, as arrays per format and
    shape: what a learner of whole screens reads beside the triplets. Read by their range
    of ids, a batch at a time, as the text the database holds: a million judgements
    decoded as JSON into Python lists took most of a minute and a gigabyte."""
    if not len(judgement_ids) or not formats:
        return []
    parts: dict[tuple, list[tuple]] = {}
    after, last = int(judgement_ids[0]) - 1, int(judgement_ids[-1])
    while after < last:
        batch = _SCREENS.run_all(
            session, {"project": project_id, "after": after, "last": last, "most": _READ_CHUNK}
        )
        if not batch:
            break
        after = batch[-1][0]
        ids, names, contexts, shown, chosen = zip(*batch, strict=True)
        ids_array = np.array(ids, np.int64)
        keep = np.isin(ids_array, judgement_ids) & np.isin(np.array(names), list(formats))
        if not keep.any():
            continue
        rows = np.flatnonzero(keep)
        context_flat, context_length = _numbers([contexts[row] for row in rows])
        shown_flat, shown_length = _numbers([shown[row] for row in rows])
        chosen_flat, chosen_length = _numbers([chosen[row] for row in rows])
        starts = [
            np.concatenate([[0], np.cumsum(length)[:-1]])
            for length in (context_length, shown_length, chosen_length)
        ]
        name_of = np.array(names)[rows]
        shape = np.stack([context_length, shown_length, chosen_length], axis=1)
        for key in {(name, *map(int, row)) for name, row in zip(name_of, shape, strict=True)}:
            name, width_context, width_shown, width_chosen = key
            which = np.flatnonzero(
                (name_of == name)
                & (context_length == width_context)
                & (shown_length == width_shown)
                & (chosen_length == width_chosen)
            )

            def columns(flat, begin, width, which=which):
                return flat[begin[which][:, None] + np.arange(width)]

            parts.setdefault(key, []).append(
                (
                    ids_array[rows[which]],
                    columns(context_flat, starts[0], width_context),
                    columns(shown_flat, starts[1], width_shown),
                    columns(chosen_flat, starts[2], width_chosen),
                )
            )
    found = []
    for (name, width_context, _, _), pieces in parts.items():
        joined = [np.concatenate(part) for part in zip(*pieces, strict=True)]
        references = joined[1][:, 0] if width_context else None
        found.append(AnsweredScreens(name, joined[0], references, joined[2], joined[3]))
    return found
