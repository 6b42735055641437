"""The items as Parquet, with a fixed schema (the README's table). Imported by the export
when one is asked for (see app.core.parquet)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

import numpy as np
import pyarrow as pa
from sqlalchemy import Row

from app.core import parquet

ITEMS_SCHEMA = pa.schema(
    [
        ("key", pa.string()),
        ("label", pa.string()),
        ("text", pa.string()),
        ("split", pa.string()),  # train, test or unlabelled
        ("image", pa.string()),  # the image's file name in the project (zip: images/…)
        ("features", pa.list_(pa.float64())),
        ("alt", pa.string()),  # what a screen reader says for its file (null: its text)
    ]
)


def items_parquet(partitions: Iterable[Sequence[Row]]) -> Iterator[bytes]:
    """The Parquet file of the items' rows, a row group a partition, streamed."""

    def batches() -> Iterator[dict[str, list]]:
        for partition in partitions:
            yield {
                "key": [row.key for row in partition],
                "label": [row.label for row in partition],
                "text": [row.text for row in partition],
                "split": [row.split.value for row in partition],
                "image": [row.image_file for row in partition],
                "features": [
                    None if row.features is None else np.frombuffer(row.features, dtype="<f8")
                    for row in partition
                ],
                "alt": [row.alt for row in partition],
            }

    return parquet.stream(ITEMS_SCHEMA, batches())
