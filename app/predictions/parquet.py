"""A model's labels and embedding as Parquet, with fixed schemas (the README's table).
Imported by the export when one is asked for (see app.core.parquet)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from app.core import parquet

PREDICTIONS_SCHEMA = pa.schema(
    [
        ("key", pa.string()),
        ("label", pa.string()),  # null where the top classes tie (then `tied`)
        ("probability", pa.float64()),  # the label's
        ("support", pa.int64()),  # what spoke for it: reference pairs, trees, neighbours
        ("tied", pa.list_(pa.string())),
    ]
)


def predictions_file(rows: Sequence[Mapping[str, Any]]) -> bytes:
    """The labels export's rows (key, label, probabilities, support, tied) as one file."""
    columns: dict[str, list] = {name: [] for name in PREDICTIONS_SCHEMA.names}
    for row in rows:
        label = row["label"]
        columns["key"].append(row["key"])
        columns["label"].append(label or None)
        columns["probability"].append((row["probabilities"] or {}).get(label) if label else None)
        columns["support"].append(row["support"])
        columns["tied"].append(row["tied"] or [])
    return parquet.file_bytes(pa.table(columns, schema=PREDICTIONS_SCHEMA))


def embedding_file(
    keys: Sequence[str],
    dimensions: Sequence[str],
    coordinates: np.ndarray,
    answered: np.ndarray | None,
    metadata: Mapping[str, str],
) -> bytes:
    """An embedding's coordinates by item key, a column a dimension, and whether each item
    has answers; `metadata` names the model and version it came from."""
    columns: dict[str, Any] = {"key": pa.array(keys, pa.string())}
    for number, name in enumerate(dimensions):
        columns[name] = pa.array(coordinates[:, number], pa.float64())
    # Null throughout where the model covers only items with features (DisDF).
    columns["answered"] = (
        pa.nulls(len(keys), pa.bool_())
        if answered is None
        else pa.array(answered.tolist(), pa.bool_())
    )
    return parquet.file_bytes(pa.table(columns), metadata)
