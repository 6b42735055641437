"""Writing a file into a streamed response: what a writer (zipfile, Parquet) writes is
collected and handed out as chunks between its writes."""

from __future__ import annotations

import io


class ChunkSink(io.RawIOBase):
    """A write-only stream whose bytes are collected and handed out as chunks."""

    def __init__(self) -> None:
        self.chunks: list[bytes] = []

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        self.chunks.append(bytes(data))
        return len(data)

    def drain(self) -> bytes:
        data = b"".join(self.chunks)
        self.chunks.clear()
        return data
