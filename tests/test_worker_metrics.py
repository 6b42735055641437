"""Workers of other containers, as docker-compose runs them (`worker`, `trainer`): each
serves its own counts on a port of its own (`closer worker --metrics-port`), Prometheus
scrapes it beside the web, and nothing is counted twice or by a worker that died. A worker
on the web's own machine without a port is added up in the web's scrape
(tests/test_training_e2e.py)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys

import httpx
import pytest

from app.auth.service import create_token
from app.core import migrations
from app.core.db import make_engine, make_session_factory, unit_of_work
from app.models import Job, JobStatus
from tests.support.metrics import parsed, total
from tests.support.service import ROOT, ServiceProcesses, free_port
from tests.support.waiting import wait_for

# Subprocesses and servers: the full run only (scripts/test --fast leaves it out).
pytestmark = pytest.mark.slow

API = "/api/v1"
METRICS_TOKEN = "prometheus-scrapes-this"


def scrape(url: str) -> dict[tuple, float]:
    scraped = httpx.get(f"{url}/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"})
    assert scraped.status_code == 200, scraped.text
    return parsed(scraped.text)


def fits(found: dict[tuple, float]) -> tuple[float, float]:
    """(fits ended, fits running) in a scrape."""
    return total(found, "closer_fit_seconds_count"), total(found, "closer_fits_running")


def test_a_worker_of_its_own_serves_its_counts_and_takes_them_along_when_it_dies(
    make_database_url, tmp_path
):
    url = make_database_url("postgresql", "worker_metrics")
    migrations.upgrade(url)
    engine = make_engine(url)
    sessions = make_session_factory(engine)
    with unit_of_work(sessions) as session:
        token = create_token(session=session, researcher_name="lab")
    worker_port = free_port()
    # The worker shares the web's machine and data directory here, as a container sharing
    # the media volume would: with a port of its own it still counts apart.
    service = ServiceProcesses(
        url,
        tmp_path / "data",
        web_processes=1,
        worker_args=[["--metrics-port", str(worker_port)]],
    )
    service.env["CLOSER_METRICS_TOKEN"] = METRICS_TOKEN
    service.env["CLOSER_WORKER_HEARTBEAT_SECONDS"] = "1"
    service.start()
    worker_url = f"http://127.0.0.1:{worker_port}"
    try:
        http = httpx.Client(
            base_url=service.url, headers={"Authorization": f"Bearer {token}"}, timeout=60
        )
        project = http.post(f"{API}/projects", json={"name": "shapes"}).json()["id"]
        keys = [f"k{i}" for i in range(30)]
        rows = "key,features\n" + "".join(f"{key},{i} {i % 7}\n" for i, key in enumerate(keys))
        http.post(
            f"{API}/projects/{project}/items", files={"file": ("i.csv", rows)}
        ).raise_for_status()
        triplets = ["anchor,closer,farther"] + [
            f"{keys[i % 30]},{keys[(i + 1) % 30]},{keys[(i + 2 + (i // 30) % 27) % 30]}"
            for i in range(3000)
        ]
        http.post(
            f"{API}/projects/{project}/triplets",
            files={"file": ("t.csv", "\n".join(triplets))},
        ).raise_for_status()

        wait_for(lambda: _answers(worker_url), 60, "the worker's metrics port to answer")
        quick = http.post(
            f"{API}/projects/{project}/models",
            json={"name": "quick", "kind": "tete", "params": {"max_iter": 50}},
        ).json()
        wait_for(
            lambda: http.get(f"{API}/projects/{project}/models/{quick['id']}").json()["serving"],
            120,
            "the quick fit",
        )
        assert fits(scrape(worker_url)) == (1, 0)
        web = scrape(service.url)
        assert fits(web) == (0, 0), "the worker with a port of its own is not counted twice"
        assert ("closer_queue_depth", ()) not in web

        long = http.post(
            f"{API}/projects/{project}/models",
            json={
                "name": "long",
                "kind": "tete",
                "params": {
                    "n_components": 5,
                    "max_iter": 100_000,
                    "tol": 0,
                    "n_iter_no_change": None,
                },
                "auto_refit": False,
            },
        ).json()
        wait_for(lambda: fits(scrape(worker_url)) == (1, 1), 120, "the long fit to count")
        worker = service.workers[0]
        os.killpg(worker.pid, signal.SIGKILL)
        worker.wait()
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"{worker_url}/metrics")
        with sessions() as session:
            job = session.get(Job, long["latest"]["job_id"])
            assert job.status is JobStatus.running, "killed mid-fit"
        assert fits(scrape(service.url))[1] == 0, "a dead worker's fit counts nowhere"
    finally:
        service.stop()
        engine.dispose()


def _answers(url: str) -> bool:
    try:
        return httpx.get(f"{url}/metrics").status_code == 401
    except httpx.TransportError:
        return False


def _lone_worker(tmp_path, *args: str, **env: str) -> subprocess.CompletedProcess:
    """`closer worker` with these options on an embedded database of its own."""
    return subprocess.run(
        [sys.executable, "-m", "app.cli", "worker", *args],
        cwd=ROOT,
        env={
            **{k: v for k, v in os.environ.items() if not k.startswith("CLOSER_")},
            "DATABASE_URL": f"sqlite:///{tmp_path / 'closer.db'}",
            "CLOSER_DATA_DIR": str(tmp_path),
            "CLOSER_WORKER_COMPILE_KERNELS": "false",
            "PYTHONPATH": str(ROOT),
            **env,
        },
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_metrics_port_without_the_token_stays_closed_and_says_so(tmp_path):
    port = free_port()
    ran = _lone_worker(tmp_path, "--until-idle", "--metrics-port", str(port))
    assert ran.returncode == 0, ran.stderr
    assert f"metrics off: port {port} stays closed until CLOSER_METRICS_TOKEN is set" in ran.stderr


def test_a_metrics_port_already_taken_stops_the_worker_with_one_line(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        ran = _lone_worker(
            tmp_path, "--metrics-port", str(port), CLOSER_METRICS_TOKEN=METRICS_TOKEN
        )
    assert ran.returncode != 0
    assert f"cannot serve metrics on 127.0.0.1:{port}" in ran.stderr
    assert "Traceback" not in ran.stderr
