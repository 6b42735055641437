"""What Prometheus scrapes from GET /metrics: answers taken and how long the answer path
took, fits running and how long fits took, and the jobs waiting in the queue.

Every process of one service counts for itself and the scrape adds them up: `closer
serve` points PROMETHEUS_MULTIPROC_DIR at a folder of its data directory before any
process starts, and each web process and worker writes its counts there (prometheus-
client's multi-process mode). Without it (a single process, the tests) the counts live
in the process's own registry. A `closer worker` of another machine or container (its own
pids, its own folder) serves its own counts on a port of its own (app/monitoring/
worker_endpoint.py), one more target for Prometheus to scrape and add up."""

from __future__ import annotations

import hmac
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from app.core.metrics_folder import FOLDER_VARIABLE

# prometheus-client chooses where counts go when it is first imported (here): to the
# folder if the variable is set then, else to this process's memory.
SHARED = FOLDER_VARIABLE in os.environ

import prometheus_client as prometheus  # noqa: E402
from prometheus_client import CollectorRegistry, multiprocess  # noqa: E402
from prometheus_client.core import GaugeMetricFamily  # noqa: E402, F401 (for collectors)

CONTENT_TYPE = prometheus.CONTENT_TYPE_LATEST

ANSWERS = prometheus.Counter(
    "closer_answers",
    "Answers taken from raters (a screen counts once), by the path that stored them",
    ["path"],
)
ANSWER_SECONDS = prometheus.Histogram(
    "closer_answer_seconds",
    "Time from an answer's arrival to the next screen's reply",
    ["path"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0),
)
FITS_RUNNING = prometheus.Gauge(
    "closer_fits_running", "Model fits running now", multiprocess_mode="livesum"
)
FIT_SECONDS = prometheus.Histogram(
    "closer_fit_seconds",
    "How long model fits took, however they ended",
    buckets=(1, 5, 15, 30, 60, 120, 300, 900, 1800, 3600),
)


def answered(path: str, started: float) -> None:
    """An answer taken by `path` ("sql": PostgreSQL's answer function, "python")."""
    ANSWERS.labels(path).inc()
    ANSWER_SECONDS.labels(path).observe(time.perf_counter() - started)


@contextmanager
def fitting() -> Iterator[None]:
    FITS_RUNNING.inc()
    started = time.perf_counter()
    try:
        yield
    finally:
        FITS_RUNNING.dec()
        FIT_SECONDS.observe(time.perf_counter() - started)


def process_ended() -> None:
    """A process's running fits stop counting when it ends (its other counts stay)."""
    if SHARED:
        multiprocess.mark_process_dead(os.getpid())


class _ThisProcess:
    """The counts of a process without the multi-process folder."""

    def collect(self):
        for name in ("ANSWERS", "ANSWER_SECONDS", "FITS_RUNNING", "FIT_SECONDS"):
            yield from globals()[name].collect()


def _forget_the_dead(folder: Path) -> None:
    """A process killed mid-fit (SIGKILL, out of memory) never said it ended: its running
    fits would count for ever. Its files name it; on this machine, one that is gone is
    marked ended (its counters stay). Where there is no /proc to ask, nothing is."""
    if not Path("/proc/self").exists():
        return
    for path in folder.glob("gauge_live*_*.db"):
        pid = path.stem.rpartition("_")[2]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            multiprocess.mark_process_dead(int(pid), str(folder))


def bearer_matches(authorization: str | None, expected: str) -> bool:
    """Whether an Authorization header carries the metrics token as its bearer, compared
    in constant time: the one rule for the web's GET /metrics and a worker's own port."""
    scheme, _, given = (authorization or "").partition(" ")
    if scheme.lower() != "bearer":
        given = ""
    return hmac.compare_digest(given.strip().encode(), expected.encode())


def exposition(*collectors) -> bytes:
    """Every process's counts, and what `collectors` read at the scrape."""
    registry = CollectorRegistry()
    if SHARED:
        _forget_the_dead(Path(os.environ[FOLDER_VARIABLE]))
        multiprocess.MultiProcessCollector(registry)
    else:
        registry.register(_ThisProcess())
    for collector in collectors:
        registry.register(collector)
    return prometheus.generate_latest(registry)
