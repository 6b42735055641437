"""The answers and the judgements as Parquet, with fixed schemas (the README's table):
the columns of the CSV exports, typed, with nothing quoted for a spreadsheet. Imported
by the export routes when one is asked for (see app.core.parquet)."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv
from sqlalchemy import Engine, String, select, type_coerce
from sqlalchemy.dialects import sqlite

from app.core import parquet
from app.core.db import driver_connection
from app.models import Item, Rater, Triplet
from app.models.rater import rater_label
from app.triplets.judged import judgement_out, published_batches
from app.triplets.log import published
from app.triplets.service import (
    EVERY_ANSWER,
    ExportFilter,
    copied_csv,
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
        ("created_at", parquet.timestamp_type()),
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
        ("created_at", parquet.timestamp_type()),
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

    return parquet.stream(TRIPLETS_SCHEMA, _by_ids(engine, project_id, only))


def _by_ids(engine: Engine, project_id: int, only: ExportFilter) -> Iterator[pa.RecordBatch]:
    """SQLite's answers as ids and stored texts, without a join per row: items and raters
    are named by pyarrow from one read of their keys (twice as fast as the rows by key)."""
    query = (
        select(
            Triplet.anchor_id,
            Triplet.closer_id,
            Triplet.farther_id,
            type_coerce(Triplet.source, String),
            Triplet.rater_id,
            Triplet.response_time_ms,
            type_coerce(Triplet.created_at, String),  # "YYYY-MM-DD HH:MM:SS.ffffff", UTC
            Triplet.is_test,
            Triplet.adaptive,
            Triplet.arm,
            Triplet.design_version,
            Triplet.judgement_id,
        )
        .outerjoin(Rater, Rater.id == Triplet.rater_id)
        .where(Triplet.project_id == project_id, published(project_id), *only.clauses())
        .order_by(Triplet.id)
    )
    sql = str(query.compile(dialect=sqlite.dialect(), compile_kwargs={"literal_binds": True}))
    with engine.connect() as connection:
        items = _names(connection, select(Item.id, Item.key).where(Item.project_id == project_id))
        raters = _names(
            connection,
            select(Rater.id, rater_label(only.identified)).where(Rater.project_id == project_id),
        )
        cursor = driver_connection(connection).cursor()
        try:
            cursor.execute(sql)
            while batch := cursor.fetchmany(_BATCH):
                columns = list(zip(*batch, strict=True))
                split = pa.array(columns[7], pa.int8()).cast(pa.bool_())
                yield pa.record_batch(
                    [
                        *(items.of(column) for column in columns[:3]),
                        pa.array(columns[3], pa.string()),
                        raters.of(columns[4]),
                        pa.array(columns[5], pa.int32()),
                        pa.array(columns[6], pa.string())
                        .cast(pa.timestamp("us"))
                        .cast(parquet.timestamp_type()),
                        pc.if_else(split, "test", "train"),
                        pa.array(columns[8], pa.int8()).cast(pa.bool_()),
                        pa.array(columns[9], pa.string()),
                        pa.array(columns[10], pa.int32()),
                        pa.array(columns[11], pa.int64()),
                    ],
                    schema=TRIPLETS_SCHEMA,
                )
        finally:
            cursor.close()


_BATCH = 50_000


class _Names:
    """Row ids to their names (item keys, raters' ids), by pyarrow's take."""

    def __init__(self, ids: np.ndarray, names: pa.Array) -> None:
        order = np.argsort(ids)
        self._ids = ids[order]
        self._names = names.take(pa.array(order))

    def of(self, ids: tuple) -> pa.Array:
        wanted = pa.array(ids, pa.int64())
        missing = wanted.is_null().to_numpy(zero_copy_only=False)
        values = wanted.fill_null(0).to_numpy()
        positions = np.searchsorted(self._ids, values).clip(0, max(len(self._ids) - 1, 0))
        if not len(self._ids):
            return pa.nulls(len(ids), pa.string())
        return self._names.take(pa.array(positions, mask=missing))


def _names(connection, query) -> _Names:
    rows = connection.execute(query).all()
    ids = np.array([row[0] for row in rows], dtype=np.int64)
    return _Names(ids, pa.array([row[1] for row in rows], pa.string()))


def export_judgements_parquet(
    engine: Engine, project_id: int, identified: bool = True
) -> Iterator[bytes]:
    def batches() -> Iterator[dict[str, list]]:
        for batch, keys, raters in published_batches(engine, project_id, identified=identified):
            rows = [judgement_out(row, keys, raters) for row in batch]
            yield {
                **{name: [row[name] for row in rows] for name in JUDGEMENTS_SCHEMA.names[:9]},
                "created_at": [row.created_at for row in batch],
                "arm": [row.arm for row in batch],
                "version": [row.design_version for row in batch],
            }

    return parquet.stream(JUDGEMENTS_SCHEMA, batches())
