"""What every upload shares: format detection, UTF-8 text, CSV headers, safe ZIP reading."""

from __future__ import annotations

import csv
import hashlib
import io
import tempfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from enum import StrEnum
from pathlib import PurePosixPath
from typing import Any, BinaryIO

import ijson

from app.core.errors import InvalidUpload, Problem, ProblemCollector, UnsupportedMedia, echo
from app.core.spreadsheets import COMMENT, from_spreadsheet


class FileFormat(StrEnum):
    csv = "csv"
    json = "json"
    zip = "zip"


_BY_EXTENSION = {
    ".csv": FileFormat.csv,
    ".tsv": FileFormat.csv,
    ".json": FileFormat.json,
    ".zip": FileFormat.zip,
}
_BY_CONTENT_TYPE = {
    "text/csv": FileFormat.csv,
    "application/json": FileFormat.json,
    "application/zip": FileFormat.zip,
    "application/x-zip-compressed": FileFormat.zip,
}


@dataclass
class UploadedFile:
    """An uploaded file as the services see it: a name for messages and a binary stream."""

    name: str
    stream: BinaryIO
    content_type: str | None = None


def request_digest(upload: UploadedFile, *options: object) -> str:
    """The SHA-256 of an upload's bytes and of the options that change what it does: a
    retry with the same Idempotency-Key must send the same request. Leaves the stream
    where it found it (at its start)."""
    digest = hashlib.sha256()
    for option in options:
        digest.update(repr(option).encode() + b"\0")
    start = upload.stream.tell()
    while chunk := upload.stream.read(1 << 20):
        digest.update(chunk)
    upload.stream.seek(start)
    return digest.hexdigest()


# Spreadsheet workbooks are not read: what the person holding one does instead.
_WORKBOOKS = (".xlsx", ".xlsm", ".xls", ".ods", ".numbers")
SAVE_AS_CSV = (
    "in Excel choose File → Save As → “CSV UTF-8 (Comma delimited) (*.csv)” (LibreOffice: "
    "Save As → Text CSV, character set Unicode (UTF-8), field delimiter ,) and upload that file"
)
# How a workbook's file begins (ZIP for .xlsx and .ods, OLE for the old .xls).
_WORKBOOK_STARTS = (b"PK\x03\x04", b"\xd0\xcf\x11\xe0")


def detect_format(
    upload: UploadedFile, requested: FileFormat | None, allowed: tuple[FileFormat, ...]
) -> FileFormat:
    fmt = requested
    suffix = PurePosixPath(upload.name.lower()).suffix
    if fmt is None and suffix in _WORKBOOKS and FileFormat.csv in allowed:
        raise UnsupportedMedia(
            f"'{upload.name}' is a spreadsheet workbook, which uploads do not read: {SAVE_AS_CSV}"
        )
    if fmt is None:
        fmt = _BY_EXTENSION.get(suffix)
    if fmt is None and upload.content_type:
        fmt = _BY_CONTENT_TYPE.get(upload.content_type.split(";")[0].strip().lower())
    if fmt is None:
        raise UnsupportedMedia(
            f"cannot tell the format of '{upload.name}': name it .{' / .'.join(allowed)} "
            "or pass ?format="
        )
    if fmt not in allowed:
        raise UnsupportedMedia(
            f"'{upload.name}' is {fmt.value}; this upload takes {', '.join(allowed)}"
        )
    return fmt


class _Lines:
    """The text's lines for csv.reader, keeping the first line of the record it reads:
    whether a record is a comment depends on its raw text (a quoted "#" is data)."""

    def __init__(self, text: io.TextIOWrapper) -> None:
        self.text = iter(text)
        self.first = ""
        self.record_begins = True

    def __iter__(self) -> _Lines:
        return self

    def __next__(self) -> str:
        line = next(self.text)
        if self.record_begins:
            self.first, self.record_begins = line, False
        return line


COMMENT_LINE = "comment line (starts with an unquoted #): left out"


def csv_rows(upload: UploadedFile, problems: ProblemCollector) -> Iterator[tuple[int, list[str]]]:
    """(line number, fields) for each record, as a spreadsheet numbers lines; the first
    record is the header. A line that starts with an unquoted `#` is a comment: left out,
    and listed and counted in `problems` with the skipped rows. A quoted `"#…"` is a value
    (a download writes a cell that starts with `#` as `'#…`, so it stays one too)."""
    delimiter = "\t" if upload.name.lower().endswith(".tsv") else ","
    _refuse_a_renamed_workbook(upload)
    text = io.TextIOWrapper(upload.stream, encoding="utf-8-sig", newline="")
    lines = _Lines(text)
    reader = csv.reader(lines, delimiter=delimiter, strict=True)
    record_start = 1  # a quoted field can span lines: report where its record began
    width: int | None = None  # the header's, its trailing empty cells left out
    blank: list[tuple[int, list[str]]] = []  # empty rows, held until a row follows them
    try:
        for fields in reader:
            if any("\x00" in field for field in fields):
                raise _nul_in(upload, record_start)
            if lines.first.startswith(COMMENT):
                problems.leave_out(upload.name, COMMENT_LINE, record_start)
            elif width is None:
                width = _header_width(upload, fields, delimiter)
                yield record_start, [from_spreadsheet(field) for field in fields[:width]]
            else:
                # Excel writes a cell for every column it ever formatted: the empty cells
                # past the header's, and the empty rows at the end, are no data.
                if len(fields) > width and not any(fields[width:]):
                    fields = fields[:width]
                if not any(fields):
                    blank.append((record_start, fields))
                else:
                    yield from blank
                    blank.clear()
                    yield record_start, [from_spreadsheet(field) for field in fields]
            lines.record_begins = True
            record_start = reader.line_num + 1
    except csv.Error as exc:
        raise InvalidUpload(
            [Problem(upload.name, f"malformed CSV: {exc}", row=record_start)]
        ) from None
    except UnicodeDecodeError:
        row = _first_undecodable_line(upload.stream)
        raise InvalidUpload([Problem(upload.name, NOT_UTF8, row=row)]) from None
    finally:
        text.detach()


NOT_UTF8 = (
    "not UTF-8 text (Excel's plain “CSV” and “CSV (Macintosh)” write your computer's "
    f"code page, such as Windows-1252): {SAVE_AS_CSV}"
)


def _refuse_a_renamed_workbook(upload: UploadedFile) -> None:
    start = upload.stream.read(4)
    upload.stream.seek(0)
    if start.startswith(_WORKBOOK_STARTS):
        raise InvalidUpload(
            [Problem(upload.name, f"this is a spreadsheet workbook, not CSV text: {SAVE_AS_CSV}")]
        )


def _header_width(upload: UploadedFile, header: list[str], delimiter: str) -> int:
    """How many columns the header names (Excel's trailing empty cells left out). A
    header of one cell holding semicolons is Excel's CSV where the decimal mark is a
    comma: said so, with what to do (reading it as `;`-separated would misread every
    number with a decimal comma)."""
    width = len(header)
    while width > 1 and not header[width - 1].strip():
        width -= 1
    if delimiter == "," and width == 1 and ";" in header[0]:
        raise InvalidUpload(
            [
                Problem(
                    upload.name,
                    "the columns are separated by semicolons (Excel's CSV where the decimal "
                    "mark is a comma), and uploads read commas: in Excel set File → Options "
                    "→ Advanced → “Use system separators” off with the decimal separator “.”, "
                    f"then {SAVE_AS_CSV.removeprefix('in Excel ')}",
                    row=1,
                )
            ]
        )
    return width


def _nul_in(upload: UploadedFile, row: int) -> InvalidUpload:
    # SQLite would store it silently and PostgreSQL refuse it: refused on both, up front.
    return InvalidUpload([Problem(upload.name, "text may not contain the NUL character", row=row)])


def _first_undecodable_line(stream: BinaryIO) -> int | None:
    """Text decoding runs ahead in blocks; rescan the bytes to say which line is at fault."""
    stream.seek(0)
    for number, line in enumerate(stream, start=1):
        try:
            line.decode("utf-8")
        except UnicodeDecodeError:
            return number
    return None


def json_array_entries(upload: UploadedFile, wrapper: str, what: str) -> Iterator[tuple[int, Any]]:
    """(1-based index, entry) for each entry of a JSON array, bare or the only field
    `wrapper` of an object, parsed as it streams: memory stays flat however long it is, and
    an entry nested deeper than any entry needs is refused before it is built."""
    events = ijson.basic_parse(upload.stream, use_float=True)
    index = 0
    try:
        _open_array(upload, events, wrapper, what)
        for index, entry in enumerate(_entries(upload, events), start=1):
            if _holds_nul(entry):
                raise _nul_in(upload, index)
            yield index, entry
        for event, value in events:  # only the wrapper's end may follow
            if event == "map_key":
                raise _not_only_field(upload, wrapper, what, value)
    except ijson.JSONError as exc:
        raise InvalidUpload(
            [Problem(upload.name, f"not valid JSON in entry {index + 1}: {echo(str(exc))}")]
        ) from None
    except UnicodeDecodeError:
        raise InvalidUpload([Problem(upload.name, NOT_UTF8)]) from None
    except ValueError as exc:  # a number Python will not convert (thousands of digits)
        raise InvalidUpload(
            [Problem(upload.name, f"entry {index + 1}: {echo(str(exc))}")]
        ) from None


# Entries are flat (a triplet) or hold one list (an item's features); far deeper is an attack.
_MAX_ENTRY_DEPTH = 16


def _open_array(upload: UploadedFile, events: Iterator, wrapper: str, what: str) -> None:
    """Consume the events up to the opening of the array of entries."""
    event, _ = next(events, ("end", None))
    if event == "start_map":
        event, key = next(events, ("end", None))
        if event == "map_key" and key != wrapper:
            raise _not_only_field(upload, wrapper, what, key)
        if event == "map_key":
            event, _ = next(events, ("end", None))
            if event != "start_array":
                raise InvalidUpload(
                    [Problem(upload.name, f"'{wrapper}' must be a JSON array of {what}")]
                )
    if event != "start_array":
        raise InvalidUpload([Problem(upload.name, f"expected a JSON array of {what}")])


def _not_only_field(upload: UploadedFile, wrapper: str, what: str, key: Any) -> InvalidUpload:
    return InvalidUpload(
        [
            Problem(
                upload.name,
                f"expected a JSON array of {what}, or an object whose only field is "
                f"'{wrapper}'; found the field '{echo(key)}'",
            )
        ]
    )


def _entries(upload: UploadedFile, events: Iterator) -> Iterator[Any]:
    """Build each entry of the open array from the parser's events, up to its end."""
    building: list[Any] = []  # the containers of the entry being built, innermost last
    keys: list[Any] = []  # for each, the key its next value goes under (objects only)
    entries = 0
    for event, value in events:
        if event == "start_array" or event == "start_map":
            if len(building) >= _MAX_ENTRY_DEPTH:
                raise InvalidUpload(
                    [
                        Problem(
                            upload.name,
                            f"nested deeper than {_MAX_ENTRY_DEPTH} levels",
                            row=entries + 1,
                        )
                    ]
                )
            building.append([] if event == "start_array" else {})
            keys.append(None)
            continue
        if event == "map_key":
            keys[-1] = value
            continue
        if event == "end_array" or event == "end_map":
            if not building:
                return  # the array of entries is closed
            value = building.pop()
            keys.pop()
        if building:
            container = building[-1]
            if type(container) is list:
                container.append(value)
            else:
                container[keys[-1]] = value
        else:
            entries += 1
            yield value


def _holds_nul(entry: Any) -> bool:
    if isinstance(entry, str):
        return "\x00" in entry
    if isinstance(entry, list):
        return any(isinstance(v, str) and "\x00" in v for v in entry)
    if isinstance(entry, dict):
        return any("\x00" in k or isinstance(v, str) and "\x00" in v for k, v in entry.items())
    return False


def read_header(
    upload: UploadedFile,
    rows: Iterator[tuple[int, list[str]]],
    required: tuple[str, ...],
    optional: tuple[str, ...],
    optional_prefixes: tuple[str, ...] = (),
) -> list[str]:
    """The header's column names, checked: required present, none unknown or repeated."""
    first = next(rows, None)
    if first is None:
        raise InvalidUpload([Problem(file=upload.name, message="file is empty (no header row)")])
    columns = [name.strip() for name in first[1]]
    problems = []
    seen: set[str] = set()
    for name in columns:
        known = name in required or name in optional or name.startswith(optional_prefixes)
        if not known:
            expected = ", ".join(required + optional + tuple(p + "*" for p in optional_prefixes))
            problems.append(
                Problem(
                    file=upload.name,
                    row=1,
                    column=name,
                    message=f"unknown column (expected {expected})",
                )
            )
        elif name in seen:
            problems.append(
                Problem(file=upload.name, row=1, column=name, message="column appears twice")
            )
        seen.add(name)
    for name in required:
        if name not in seen:
            problems.append(
                Problem(file=upload.name, row=1, column=name, message="required column is missing")
            )
    if problems:
        raise InvalidUpload(problems)
    return columns


@dataclass(frozen=True)
class ZipLimits:
    max_entries: int
    max_total_bytes: int
    max_ratio: int


class SafeZip:
    """A ZIP archive checked for path tricks and bombs before any entry is read.

    Declared sizes are checked up front, and every read is capped again, because a
    crafted archive can lie about its sizes in the central directory.
    """

    def __init__(self, upload: UploadedFile, limits: ZipLimits) -> None:
        self.name = upload.name
        self.limits = limits
        try:
            self._zip = zipfile.ZipFile(upload.stream)
        except (zipfile.BadZipFile, OSError) as exc:
            raise InvalidUpload(
                [Problem(file=upload.name, message=f"not a ZIP archive: {exc}")]
            ) from None
        self.entries: dict[str, zipfile.ZipInfo] = {}
        self._check()

    def _problem(self, message: str, entry: str | None = None) -> InvalidUpload:
        where = self.name if entry is None else f"{self.name}:{entry}"
        return InvalidUpload([Problem(file=where, message=message)])

    def _check(self) -> None:
        infos = self._zip.infolist()
        if len(infos) > self.limits.max_entries:
            raise self._problem(f"{len(infos)} entries; the limit is {self.limits.max_entries}")
        total = 0
        for info in infos:
            name = info.filename
            path = PurePosixPath(name.replace("\\", "/"))
            if (
                path.is_absolute()
                or name.startswith(("/", "\\"))
                or (len(name) > 1 and name[1] == ":")
            ):
                raise self._problem("absolute path in archive", name)
            if ".." in path.parts:
                raise self._problem("'..' in archive path", name)
            if info.flag_bits & 0x1:
                raise self._problem("encrypted entries are not supported", name)
            total += info.file_size
            if total > self.limits.max_total_bytes:
                raise self._problem(
                    f"archive unpacks to more than {self.limits.max_total_bytes} bytes "
                    "(possible ZIP bomb)"
                )
            if (
                info.compress_size
                and info.file_size / info.compress_size > self.limits.max_ratio
                and info.file_size > 1 << 20
            ):
                raise self._problem(
                    f"compression ratio {info.file_size // info.compress_size}:1 exceeds "
                    f"{self.limits.max_ratio}:1 (possible ZIP bomb)",
                    name,
                )
            if not info.is_dir():
                self.entries[str(path)] = info
        self._budget = self.limits.max_total_bytes

    def find(self, suffix: str) -> list[str]:
        return sorted(
            n
            for n in self.entries
            if n.lower().endswith(suffix) and not PurePosixPath(n).name.startswith(".")
        )

    def size(self, entry: str) -> int:
        """The entry's size as its header declares it (reads are capped to it)."""
        return self.entries[entry].file_size

    def _chunks(self, entry: str) -> Iterator[bytes]:
        info = self.entries[entry]
        read = 0
        try:
            with self._zip.open(info) as handle:
                while chunk := handle.read(_CHUNK):
                    read += len(chunk)
                    if read > info.file_size:
                        raise self._problem(
                            "entry is larger than its header says (possible ZIP bomb)", entry
                        )
                    self._budget -= len(chunk)
                    if self._budget < 0:
                        raise self._problem(
                            "archive unpacks to more than the limit (possible ZIP bomb)"
                        )
                    yield chunk
        except (zipfile.BadZipFile, OSError, EOFError, NotImplementedError) as exc:
            raise self._problem(f"cannot read entry: {exc}", entry) from None

    def read(self, entry: str) -> bytes:
        return b"".join(self._chunks(entry))

    def head(self, entry: str, size: int = 4096) -> bytes:
        """The entry's first bytes (what its type is told by), without reading the rest."""
        try:
            with self._zip.open(self.entries[entry]) as handle:
                return handle.read(min(size, self.entries[entry].file_size))
        except (zipfile.BadZipFile, OSError, EOFError, NotImplementedError) as exc:
            raise self._problem(f"cannot read entry: {exc}", entry) from None

    def open_upload(self, entry: str) -> UploadedFile:
        """The entry as a file to parse, spilled to disk past a few MiB rather than held."""
        spool = tempfile.SpooledTemporaryFile(max_size=_SPOOL_IN_MEMORY)
        for chunk in self._chunks(entry):
            spool.write(chunk)
        spool.seek(0)
        return UploadedFile(name=f"{self.name}:{entry}", stream=spool)  # type: ignore[arg-type]


_CHUNK = 1 << 20
_SPOOL_IN_MEMORY = 8 << 20
