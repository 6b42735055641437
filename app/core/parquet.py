"""Exports as Parquet, streamed: each batch of rows becomes a row group written as soon as
it is read, so a download of millions of answers holds one batch in memory, never the
file. Every export names its schema (column names and types) once, beside its rows; the
README lists them.

pyarrow is imported by the first export, not with the routes: every process (each web
process, a worker, every CLI command) imports the routes, and pyarrow costs ~0.3 s of a
core to import. The schemas live beside the exports that use them, imported likewise."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from app.core.streams import ChunkSink

if TYPE_CHECKING:
    import pyarrow as pa

MEDIA_TYPE = "application/vnd.apache.parquet"


def timestamp_type() -> pa.DataType:
    """Timestamps in microseconds, UTC: what both databases store."""
    import pyarrow as pa

    return pa.timestamp("us", tz="UTC")


def stream(
    schema: pa.Schema, batches: Iterable[Mapping[str, Sequence[Any]] | pa.RecordBatch]
) -> Iterator[bytes]:
    """The Parquet file of `batches` (columns by name, or record batches of `schema`), a
    row group a batch, handed out as it is written. An export with no rows is a valid
    file of the schema with no row group."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    sink = ChunkSink()
    writer = pq.ParquetWriter(pa.PythonFile(sink, mode="w"), schema, compression="zstd")
    try:
        for batch in batches:
            if not isinstance(batch, pa.RecordBatch):
                batch = pa.record_batch(
                    [pa.array(batch[field.name], type=field.type) for field in schema],
                    schema=schema,
                )
            if batch.num_rows:
                writer.write_batch(batch)
                yield sink.drain()
    finally:
        writer.close()
    yield sink.drain()


def timestamps(values: Sequence[str | None]) -> pa.Array:
    """ISO 8601 texts with their UTC offset (as the exports format them) as timestamps."""
    import pyarrow as pa

    return pa.array(values, type=pa.string()).cast(timestamp_type())


def file_bytes(table: pa.Table, metadata: Mapping[str, str] | None = None) -> bytes:
    """A whole small table (an embedding, a model's labels) as one Parquet file, with
    `metadata` (the model and version it came from) in the file's key-value metadata."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if metadata:
        table = table.replace_schema_metadata({**(table.schema.metadata or {}), **metadata})
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="zstd")
    return sink.getvalue().to_pybytes()
