"""Closer as its users run it: `closer serve` and `closer worker` as processes of their
own, for tests and benchmarks that go over HTTP (and kill the server on purpose)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class ServiceProcesses:
    """Web processes (`closer serve --workers N`) and worker processes on one database."""

    def __init__(
        self,
        database_url: str,
        data_dir: Path,
        *,
        web_processes: int = 2,
        workers: int = 1,
        port: int | None = None,
        log_dir: Path | None = None,
        worker_args: list[list[str]] | None = None,
        compile_kernels: bool = False,
        root: Path = ROOT,
    ) -> None:
        """`worker_args`: extra `closer worker` options, one list per worker (it then
        sets the number of workers). `compile_kernels`: workers make the learners'
        kernels ready as they start, as deployed ones do (off for tests: each would spend
        a core on it beside the tests). `root`: the checkout whose code runs (a benchmark
        compares another commit's, checked out beside this one)."""
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.web_processes = web_processes
        self.log_dir = log_dir or data_dir
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.env = {
            **os.environ,
            "DATABASE_URL": database_url,
            "CLOSER_DATA_DIR": str(data_dir),
            "CLOSER_WORKER_IN_PROCESS": "false",
            "CLOSER_WORKER_POLL_SECONDS": "0.2",
            "CLOSER_WORKER_COMPILE_KERNELS": str(compile_kernels).lower(),
            "CLOSER_LOG_LEVEL": "warning",
            "PYTHONPATH": str(root),
        }
        self.root = root
        self.web: subprocess.Popen | None = None
        self.workers: list[subprocess.Popen] = []
        self.worker_args = worker_args or [[] for _ in range(workers)]
        self.restarts = 0

    def _spawn(self, args: list[str], log: str) -> subprocess.Popen:
        handle = open(self.log_dir / log, "ab")
        return subprocess.Popen(
            [sys.executable, "-m", "app.cli", *args],
            env=self.env,
            cwd=self.root,
            stdout=handle,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: a kill takes its children too
        )

    def start_web(self, timeout: float = 60.0) -> None:
        self.web = self._spawn(
            ["serve", "--port", str(self.port), "--workers", str(self.web_processes)],
            f"web-{self.restarts}.log",
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.url}/api/v1/health", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if self.web.poll() is not None:
                raise RuntimeError(f"closer serve exited with {self.web.returncode}")
            time.sleep(0.2)
        raise RuntimeError("closer serve did not answer in time")

    def start_workers(self) -> None:
        for number, extra in enumerate(self.worker_args):
            self.workers.append(self._spawn(["worker", *extra], f"worker-{number}.log"))

    def start(self) -> ServiceProcesses:
        self.start_web()
        self.start_workers()
        return self

    def kill_web(self) -> None:
        """SIGKILL every web process at once, as a crash or an OOM kill would."""
        os.killpg(self.web.pid, signal.SIGKILL)
        self.web.wait()
        self.restarts += 1

    def stop(self) -> None:
        for process in [self.web, *self.workers]:
            if process is not None and process.poll() is None:
                try:
                    os.killpg(process.pid, signal.SIGTERM)
                    process.wait(timeout=15)
                except (ProcessLookupError, subprocess.TimeoutExpired):
                    os.killpg(process.pid, signal.SIGKILL)


def database_with_token(server, name: str, researcher: str = "bench") -> tuple[str, str]:
    """A new migrated database on `server`, and an API token for a researcher in it."""
    from app.auth.service import create_token
    from app.core import migrations
    from app.core.db import make_engine, make_session_factory, unit_of_work

    url = server.create_database(name)
    migrations.upgrade(url)
    engine = make_engine(url)
    try:
        with unit_of_work(make_session_factory(engine)) as session:
            token = create_token(session=session, researcher_name=researcher)
    finally:
        engine.dispose()
    return url, token


def digits_study(
    url: str,
    token: str,
    items: int,
    trees: int = 20,
    held_out: int | None = None,
    sort_size: int = 1,
) -> tuple[int, str]:
    """A digits project on the service at `url` with a CompRF build waiting for answers
    (3 per query; asked on sorting screens of `sort_size` items; none with `trees` 0)
    and raters kept on for ever: (project id, public slug)."""
    from app.demo.service import digits_archive

    auth = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=url, headers=auth, timeout=120) as http:
        project = http.post("/api/v1/projects", json={"name": "digits"}).json()["id"]
        archive = digits_archive(items, held_out or items // 6, random_state=0)
        http.post(
            f"/api/v1/projects/{project}/items", files={"file": ("d.zip", archive)}
        ).raise_for_status()
        rating = http.patch(
            f"/api/v1/projects/{project}/rating",
            json={"answers_per_rater": 0, "random_share": 0.1, "attention_rate": 0.05},
        )
        rating.raise_for_status()
        http.put(f"/api/v1/projects/{project}/link", json={"state": "open"}).raise_for_status()
        if trees:
            http.post(
                f"/api/v1/projects/{project}/builds",
                json={
                    "n_trees": trees,
                    "answers_per_query": 3,
                    "random_state": 0,
                    "sort_size": sort_size,
                },
            ).raise_for_status()
    return project, rating.json()["public_slug"]
