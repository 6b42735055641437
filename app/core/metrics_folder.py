"""Where the processes of one service put their metrics' counts (app/core/metrics.py):
set before anything imports prometheus-client, so this module imports nothing of it."""

from __future__ import annotations

import os
import shutil
import socket
from pathlib import Path

FOLDER_VARIABLE = "PROMETHEUS_MULTIPROC_DIR"


def _folder(data_dir: Path) -> Path:
    # One folder a machine: processes are known by their pid, which another machine (or
    # container) sharing the data directory could reuse.
    return data_dir / "metrics" / socket.gethostname()


def prepare(data_dir: Path) -> None:
    """Point this process and every one it starts at a fresh folder for their counts (the
    last run's processes are gone: their files would be added in forever)."""
    folder = _folder(data_dir)
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True, exist_ok=True)
    os.environ[FOLDER_VARIABLE] = str(folder)


def join(data_dir: Path) -> None:
    """A worker started beside `closer serve` on the same machine and data directory
    counts into its folder too."""
    folder = _folder(data_dir)
    if folder.is_dir() and FOLDER_VARIABLE not in os.environ:
        os.environ[FOLDER_VARIABLE] = str(folder)
