"""The answers and the judgements as Parquet, with fixed schemas (the README's table):
the columns of the CSV exports, typed, with nothing quoted for a spreadsheet."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.csv as pa_csv
from sqlalchemy import Engine

from app.core import parquet
from app.triplets.judged import judgement_out, published_batches
from app.triplets.service import (
    EVERY_ANSWER,
    ExportFilter,
    copied_csv,
    export_rows,
    export_select,
)

TRIPLETS_SCHEMA = pa.schema(
    [
        ("anchor", pa.string()),
        ("closer", pa.string()),  # the anchor is closer to this item than to `farther`
        ("farther", pa.string()),
        ("source", pa.string()),  # rater, upload or oracle
        ("rater", pa.string()),  # their platform id; null for answers of nobody known
        ("response_time_ms", pa.int32()),
        ("created_at", parquet.TIMESTAMP),
        ("split", pa.string()),  # train or test
        ("adaptive", pa.bool_()),  # asked for what it would teach, not at random
        ("arm", pa.string()),
        ("version", pa.int32()),  # the design version that asked it
        ("judgement", pa.int64()),  # the screen it was derived from (judgements export)
    ]
)

JUDGEMENTS_SCHEMA = pa.schema(
    [
        ("judgement", pa.int64()),
        ("format", pa.string()),  # odd_one_out, rank, sort, triplet
        ("reference", pa.string()),  # rank: the item the picks are most like
        ("pivot_left", pa.string()),  # sort: the two items sorted against
        ("pivot_right", pa.string()),
        ("items", pa.list_(pa.string())),  # shown, in display order
        ("picks", pa.list_(pa.string())),  # chosen, first first (sort: a side per item)
        ("rater", pa.string()),
        ("response_time_ms", pa.int32()),
        ("created_at", parquet.TIMESTAMP),
        ("arm", pa.string()),
        ("version", pa.int32()),
    ]
)


# PostgreSQL's rows as CSV, parsed by pyarrow this much at a time (~130,000 answers):
# a row group each, and what the server holds at once.
_COPIED_BYTES = 8 << 20


def _copied(engine: Engine, project_id: int, only: ExportFilter) -> Iterator[pa.RecordBatch]:
    """The answers through COPY, each block a whole row, parsed in C++ by pyarrow: a
    tenth of the time of Python tuples per row. Unquoted empty cells are nulls, quoted
    ones empty texts (as COPY writes them)."""
    sql = export_select("postgresql", project_id, only=only)
    options = (
        pa_csv.ReadOptions(column_names=TRIPLETS_SCHEMA.names),
        pa_csv.ParseOptions(newlines_in_values=True),
        pa_csv.ConvertOptions(
            column_types=dict(zip(TRIPLETS_SCHEMA.names, TRIPLETS_SCHEMA.types, strict=True)),
            strings_can_be_null=True,
            quoted_strings_can_be_null=False,
        ),
    )
    for text in copied_csv(engine, sql, _COPIED_BYTES):
        yield from _parsed(text, options)


def _parsed(text: bytes, options: tuple) -> Iterator[pa.RecordBatch]:
    read, parse, convert = options
    table = pa_csv.read_csv(
        pa.py_buffer(text), read_options=read, parse_options=parse, convert_options=convert
    )
    yield from table.cast(TRIPLETS_SCHEMA).combine_chunks().to_batches()


def export_triplets_parquet(
    engine: Engine, project_id: int, only: ExportFilter = EVERY_ANSWER
) -> Iterator[bytes]:
    if engine.dialect.name == "postgresql":
        return parquet.stream(TRIPLETS_SCHEMA, _copied(engine, project_id, only))

    def batches() -> Iterator[pa.RecordBatch]:
        for batch in export_rows(engine, project_id, only=only):
            columns: list[Any] = list(zip(*batch, strict=True))
            columns[6] = parquet.timestamps(columns[6])
            columns[8] = [flag == "true" for flag in columns[8]]
            yield pa.record_batch(
                [
                    value if isinstance(value, pa.Array) else pa.array(value, type=field.type)
                    for value, field in zip(columns, TRIPLETS_SCHEMA, strict=True)
                ],
                schema=TRIPLETS_SCHEMA,
            )

    return parquet.stream(TRIPLETS_SCHEMA, batches())


def export_judgements_parquet(engine: Engine, project_id: int) -> Iterator[bytes]:
    def batches() -> Iterator[dict[str, list]]:
        for batch, keys, raters in published_batches(engine, project_id):
            rows = [judgement_out(row, keys, raters) for row in batch]
            yield {
                **{name: [row[name] for row in rows] for name in JUDGEMENTS_SCHEMA.names[:9]},
                "created_at": [row.created_at for row in batch],
                "arm": [row.arm for row in batch],
                "version": [row.design_version for row in batch],
            }

    return parquet.stream(JUDGEMENTS_SCHEMA, batches())
