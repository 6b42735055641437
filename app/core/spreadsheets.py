"""CSV downloads are opened in spreadsheets, where a cell that starts with `=`, `+`, `-`,
`@`, a tab or a carriage return is read as a formula. Keys, labels, texts and
participant ids come from uploads and strangers, so every such cell is written with a
leading `'`, which spreadsheets show as text. A cell that starts with `#` is written so
too: CSV uploads read a line that starts with `#` as a comment, and an exported key
`#3` must not become one. Uploads take the `'` off again, so an export uploads as it
is; JSON downloads keep the values as they are.

The rule exists twice, here for Python writers and as SQL for the exports the database
writes itself; tests/test_spreadsheets.py runs the same values through both.
"""

from __future__ import annotations

from sqlalchemy import String, case, func, literal

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
COMMENT = "#"
GUARDED_STARTS = (*FORMULA_STARTS, COMMENT)
QUOTE = "'"


def spreadsheet_safe(value: str | None) -> str | None:
    """The cell as a CSV download writes it."""
    if value and value[0] in GUARDED_STARTS:
        return QUOTE + value
    return value


def from_spreadsheet(cell: str) -> str:
    """An uploaded CSV cell, with the quote a download added taken off again."""
    if len(cell) > 1 and cell[0] == QUOTE and cell[1] in GUARDED_STARTS:
        return cell[1:]
    return cell


def spreadsheet_safe_sql(column):
    """`spreadsheet_safe` in SQL, the same on PostgreSQL and SQLite."""
    first = func.substr(column, 1, 1)
    return case((first.in_(GUARDED_STARTS), literal(QUOTE, String).concat(column)), else_=column)
