"""Item records from CSV, JSON or a ZIP manifest, each field checked and located."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from app.core.errors import InvalidUpload, Problem, ProblemCollector, echo
from app.models import LabelType, Split
from app.uploads.files import UploadedFile, csv_rows, json_array_entries, read_header

REQUIRED_COLUMNS = ("key",)
OPTIONAL_COLUMNS = ("label", "text", "split", "features", "alt")
IMAGE_COLUMN = "image"
FEATURE_PREFIX = "feature_"
JSON_FIELDS = frozenset(REQUIRED_COLUMNS + OPTIONAL_COLUMNS + (IMAGE_COLUMN,))

MAX_KEY_LENGTH = 200
MAX_LABEL_LENGTH = 200
MAX_TEXT_LENGTH = 100_000
MAX_ALT_LENGTH = 1_000
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_FEATURE_SEPARATORS = re.compile(r"[\s;,]+")


@dataclass
class ItemRecord:
    row: int
    key: str
    label: str | None
    text: str | None
    split: Split
    features: list[float] | None
    image: str | None
    # What a screen reader says for its image or clip (falls back to the text).
    alt: str | None = None


def label_problem(label_type: LabelType, label: str) -> str | None:
    """What is wrong with `label` for a project whose labels are of `label_type`, or None:
    the one check of an uploaded row's label and of a label fixed on the items page."""
    if len(label) > MAX_LABEL_LENGTH:
        return f"longer than {MAX_LABEL_LENGTH} characters"
    if label_type is LabelType.regression:
        try:
            value = float(label)
        except ValueError:
            value = math.nan
        if not math.isfinite(value):
            return f"'{echo(label)}' is not a number (this project's labels are numbers)"
    return None


def unknown_split(raw: Any) -> str:
    return f"'{echo(raw)}' is not one of {', '.join(choice.value for choice in Split)}"


def split_problem(split: Split, label: str | None) -> str | None:
    """A test or training item is one with a label."""
    if split is not Split.unlabelled and label is None:
        return f"split '{split.value}' needs a label"
    return None


class ItemValidator:
    """Checks one field at a time, records every problem, and tracks the feature length."""

    def __init__(
        self,
        file: str,
        label_type: LabelType,
        feature_dim: int | None,
        problems: ProblemCollector,
        existing_items: int = 0,
    ) -> None:
        self.file = file
        self.label_type = label_type
        self.problems = problems
        # A project's items have features of one length, or all have none: what the items
        # it holds already settled (nothing, while it has none).
        self.existing_items = existing_items
        self.project_dim = feature_dim if existing_items else None
        self.project_featureless = bool(existing_items) and feature_dim is None
        self.feature_dim = self.project_dim
        self._dim_source: str = "the project's existing items"
        self._rows_without_features: int | None = None
        # Rows whose features do not match the project's items: one problem for the whole
        # file when no row matches, else one per row (see finish).
        self._off_project: dict[int, str] = {}
        self._seen_keys: dict[str, int] = {}
        self.records: list[ItemRecord] = []

    def _bad(self, row: int, column: str, message: str) -> None:
        self.problems.add(self.file, message, row=row, column=column)

    def add(self, row: int, values: dict[str, Any]) -> None:
        errors_before = self.problems.count
        key = self._key(row, values.get("key"))
        label = self._label(row, values.get("label"))
        text = self._text(row, values.get("text"))
        split = self._split(row, values.get("split"), label)
        features = self._features(row, values.get("features"))
        image = values.get(IMAGE_COLUMN)
        if image is not None and not isinstance(image, str):
            self._bad(row, IMAGE_COLUMN, "must be a path inside the archive")
        alt = self._alt(row, values.get("alt"))
        if self.problems.count == errors_before and key is not None:
            self.records.append(
                ItemRecord(row, key, label, text, split, features, image or None, alt)
            )

    def _alt(self, row: int, raw: Any) -> str | None:
        if raw is None or raw == "":
            return None
        if not isinstance(raw, str):
            self._bad(row, "alt", "must be a string (what a screen reader says for its file)")
        elif len(raw) > MAX_ALT_LENGTH:
            self._bad(row, "alt", f"longer than {MAX_ALT_LENGTH} characters")
        elif _CONTROL.search(raw):
            self._bad(row, "alt", "must not contain control characters")
        else:
            return raw
        return None

    def _key(self, row: int, raw: Any) -> str | None:
        if isinstance(raw, int) and not isinstance(raw, bool):
            raw = str(raw)
        if not isinstance(raw, str) or raw == "":
            self._bad(row, "key", "key is required")
            return None
        if len(raw) > MAX_KEY_LENGTH:
            self._bad(row, "key", f"longer than {MAX_KEY_LENGTH} characters")
        elif "/" in raw or _CONTROL.search(raw):
            self._bad(row, "key", "must not contain '/' or control characters")
        elif raw != raw.strip():
            self._bad(row, "key", "has leading or trailing spaces")
        elif raw in self._seen_keys:
            self._bad(row, "key", f"duplicate key '{raw}' (first on row {self._seen_keys[raw]})")
        else:
            self._seen_keys[raw] = row
            return raw
        return None

    def _label(self, row: int, raw: Any) -> str | None:
        if raw is None or raw == "":
            return None
        if isinstance(raw, bool) or not isinstance(raw, str | int | float):
            self._bad(row, "label", "must be a class name or a number")
            return None
        label = raw if isinstance(raw, str) else repr(raw)
        problem = label_problem(self.label_type, label)
        if problem is not None:
            self._bad(row, "label", problem)
            return None
        return label

    def _text(self, row: int, raw: Any) -> str | None:
        if raw is None or raw == "":
            return None
        if not isinstance(raw, str):
            self._bad(row, "text", "must be a string")
        elif len(raw) > MAX_TEXT_LENGTH:
            self._bad(row, "text", f"longer than {MAX_TEXT_LENGTH} characters")
        else:
            return raw
        return None

    def _split(self, row: int, raw: Any, label: str | None) -> Split:
        if raw is None or raw == "":
            return Split.train if label is not None else Split.unlabelled
        try:
            split = Split(raw)
        except ValueError:
            self._bad(row, "split", unknown_split(raw))
            return Split.unlabelled
        problem = split_problem(split, label)
        if problem is not None:
            self._bad(row, "split", problem)
        return split

    def _features(self, row: int, raw: Any) -> list[float] | None:
        if raw is None or raw == "" or raw == []:
            vector = None
        elif isinstance(raw, str | list):
            values = _FEATURE_SEPARATORS.split(raw.strip()) if isinstance(raw, str) else raw
            vector = self._parse_numbers(row, values)
            if vector is None:  # said why; "missing" would be said twice
                return None
        else:
            self._bad(row, "features", "must be a list of numbers")
            return None
        return self._check_length(row, vector)

    def _parse_numbers(self, row: int, values: list[Any]) -> list[float] | None:
        numbers = []
        for position, value in enumerate(values):
            if isinstance(value, bool):
                number = math.nan
            else:
                try:
                    number = float(value)
                except (TypeError, ValueError):
                    number = math.nan
            if not math.isfinite(number):
                self._bad(
                    row,
                    "features",
                    f"value {position + 1} ('{echo(value)}') is not a finite number",
                )
                return None
            numbers.append(number)
        return numbers

    def _check_length(self, row: int, vector: list[float] | None) -> list[float] | None:
        if vector is None:
            if self.project_dim is not None:
                self._off_project[row] = (
                    f"missing; {self._dim_source} have {self.project_dim} features"
                )
            elif self.feature_dim is not None:
                self._bad(
                    row, "features", f"missing; {self._dim_source} have {self.feature_dim} features"
                )
            elif self._rows_without_features is None:
                self._rows_without_features = row
            return None
        if self.project_featureless:
            self._off_project[row] = (
                f"given, but {self._dim_source} have none; a project's items all have "
                "features or none do"
            )
            return vector
        if self._rows_without_features is not None:
            self._bad(
                row,
                "features",
                f"has features but row {self._rows_without_features} "
                "has none; give every item features or none",
            )
            return None
        if self.feature_dim is None:
            self.feature_dim = len(vector)
            self._dim_source = f"earlier rows (from row {row})"
        elif len(vector) != self.feature_dim:
            if self.project_dim is not None:
                self._off_project[row] = (
                    f"{len(vector)} features; {self._dim_source} have {self.feature_dim}"
                )
                return vector
            self._bad(
                row,
                "features",
                f"{len(vector)} features; {self._dim_source} have {self.feature_dim}",
            )
            return None
        return vector

    def finish(self) -> None:
        """Settle the rows whose features do not match the project's items: a file none of
        whose rows match is one problem of the whole file (it is refused even when bad
        rows are skipped); otherwise each such row is a problem of its own."""
        if not self._off_project:
            return
        kept = [record for record in self.records if record.row not in self._off_project]
        if not kept:
            self.problems.add(self.file, self._whole_file_mismatch(), column="features")
            return
        for row, message in self._off_project.items():
            self._bad(row, "features", message)
        self.records = kept

    def _whole_file_mismatch(self) -> str:
        items = f"the items the project holds ({self.existing_items:,})"
        if self.project_featureless:
            return (
                f"the file gives features, but {items} have none: a project's items all have "
                "features or none do (upload these without features, or into a new project)"
            )
        if all(record.features is None for record in self.records):
            return (
                f"the file gives no features, but {items} have {self.project_dim} each: "
                f"give every item {self.project_dim} features"
            )
        row, message = next(iter(self._off_project.items()))
        found = "none" if message.startswith("missing") else message.split(";")[0]
        return (
            f"no row has the {self.project_dim} features that {items} have; row {row} has {found}"
        )


def read_csv_items(upload: UploadedFile, validator: ItemValidator, allow_image: bool) -> None:
    rows = csv_rows(upload, validator.problems)
    # An export's empty image column is taken anywhere, so a CSV download uploads again.
    optional = OPTIONAL_COLUMNS + (IMAGE_COLUMN,)
    columns = read_header(upload, rows, REQUIRED_COLUMNS, optional, (FEATURE_PREFIX,))
    feature_columns = [i for i, name in enumerate(columns) if name.startswith(FEATURE_PREFIX)]
    if feature_columns and "features" in columns:
        raise InvalidUpload(
            [
                Problem(
                    upload.name,
                    f"use either a 'features' column or '{FEATURE_PREFIX}*' columns, not both",
                    row=1,
                )
            ]
        )
    plain = [(i, name) for i, name in enumerate(columns) if not name.startswith(FEATURE_PREFIX)]
    for line, fields in rows:
        if fields == []:
            continue
        if len(fields) != len(columns):
            validator.problems.add(
                upload.name, f"expected {len(columns)} fields, found {len(fields)}", row=line
            )
            continue
        values: dict[str, Any] = {name: fields[i].strip() for i, name in plain}
        if feature_columns:
            cells = [fields[i].strip() for i in feature_columns]
            values["features"] = cells if any(cells) else None
        if _image_outside_archive(upload, validator, line, values, allow_image):
            continue
        validator.add(line, values)
    validator.finish()


def _image_outside_archive(upload, validator, row: int, values: dict, allow_image: bool) -> bool:
    if allow_image or not values.get(IMAGE_COLUMN):
        return False
    validator.problems.add(
        upload.name,
        "images come in a ZIP upload (manifest.csv and the image files); leave this empty here",
        row=row,
        column=IMAGE_COLUMN,
    )
    return True


def read_json_items(upload: UploadedFile, validator: ItemValidator, allow_image: bool) -> None:
    """A JSON array of objects, or an object with an "items" array; rows are 1-based indices."""
    allowed = JSON_FIELDS
    for index, entry in json_array_entries(upload, "items", "item objects"):
        if not isinstance(entry, dict):
            validator.problems.add(upload.name, "expected an object", row=index)
            continue
        unknown = sorted(set(entry) - allowed)
        for name in unknown:
            validator.problems.add(
                upload.name,
                f"unknown field (expected {', '.join(sorted(allowed))})",
                row=index,
                column=name,
            )
        if not unknown and not _image_outside_archive(upload, validator, index, entry, allow_image):
            validator.add(index, entry)
    validator.finish()
