"""A process's peak resident memory over a phase of a test or a benchmark."""

from __future__ import annotations

import os
import threading
from pathlib import Path


class PeakMemory:
    """The most the resident memory of process `pid` (this one by default) grew while
    the block ran, sampled every `every` seconds: a request that briefly holds a large
    buffer shows, where the process's lifetime peak (ru_maxrss) would hide it behind
    an earlier one."""

    def __init__(self, pid: int | None = None, every: float = 0.002) -> None:
        self._statm = Path(f"/proc/{pid or os.getpid()}/statm")
        self._every = every

    def _resident(self) -> int:
        return int(self._statm.read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    def __enter__(self) -> PeakMemory:
        self.base = self._resident()
        self.peak = self.base
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._done.wait(self._every):
            self.peak = max(self.peak, self._resident())

    def __exit__(self, *_exc) -> None:
        self._done.set()
        self._thread.join()
        self.growth = self.peak - self.base

    @property
    def growth_mib(self) -> float:
        return self.growth / 2**20
