"""Issue 32, hole 3: a project import killed half way (SIGKILL of the web process after
its first committed chunk of answers) leaves no project anyone sees; a retry with the
same Idempotency-Key makes exactly one, and without a retry the worker removes the
half-made project once it finds its importer gone. On both databases, with `closer
serve` and `closer worker` as processes of their own (the claim crosses processes)."""

from __future__ import annotations

import threading

import httpx
import numpy as np
import pytest
from sqlalchemy import func, select

from app.core.db import make_engine, make_session_factory, unit_of_work
from app.models import Project, Triplet
from tests.support.service import ServiceProcesses
from tests.support.uploads import zip_bytes
from tests.support.waiting import wait_for

pytestmark = pytest.mark.slow

API = "/api/v1"
ANSWERS = 250_000


def _big_archive() -> bytes:
    """60 items and ANSWERS uploaded answers: an import of several seconds."""
    keys = [f"k{n}" for n in range(60)]
    manifest = "key,label\n" + "\n".join(f"{key},c{n % 4}" for n, key in enumerate(keys)) + "\n"
    rng = np.random.default_rng(0)
    triplets = rng.integers(0, 60, (ANSWERS * 2, 3))
    distinct = triplets[
        (triplets[:, 0] != triplets[:, 1])
        & (triplets[:, 0] != triplets[:, 2])
        & (triplets[:, 1] != triplets[:, 2])
    ][:ANSWERS]
    lines = "\n".join(f"k{a},k{b},k{c}" for a, b, c in distinct.tolist())
    description = (
        '{"format": "closer-project", "format_version": 2, '
        '"project": {"name": "moved"}, "rating": {"completion_code": "DONE-1"}}'
    )
    return zip_bytes(
        {
            "project.json": description,
            "items.zip": zip_bytes({"manifest.csv": manifest}),
            "triplets.csv": "anchor,closer,farther\n" + lines + "\n",
        }
    )


def _rows(sessions) -> tuple[int, int, int]:
    """(projects, of them importing, triplets) as the database holds them."""
    with unit_of_work(sessions) as session:
        return (
            session.scalar(select(func.count()).select_from(Project)),
            session.scalar(select(func.count()).where(Project.importing)),
            session.scalar(select(func.count()).select_from(Triplet)),
        )


def _import_killed_half_way(service, sessions, token: str, body: bytes, key: str) -> None:
    def post() -> None:
        try:
            httpx.post(
                f"{service.url}{API}/project-archives",
                headers={"Authorization": token, "Idempotency-Key": key},
                files={"file": ("moved.zip", body)},
                timeout=120,
            )
        except httpx.TransportError:
            pass  # the server died under it

    before = _rows(sessions)[2]
    sender = threading.Thread(target=post)
    sender.start()
    wait_for(lambda: _rows(sessions)[2] != before, 120, "the import to commit a chunk", every=0.02)
    service.kill_web()
    sender.join(30)


def test_an_import_killed_half_way_leaves_nothing_and_its_retry_makes_one_project(
    database_url, new_token, tmp_path
):
    token = new_token()["Authorization"]
    body = _big_archive()
    service = ServiceProcesses(database_url, tmp_path / "data", web_processes=1, workers=0)
    engine = make_engine(database_url)
    sessions = make_session_factory(engine)
    service.start()
    try:
        http = httpx.Client(base_url=service.url, headers={"Authorization": token}, timeout=120)
        _import_killed_half_way(service, sessions, token, body, "move-1")
        projects, importing, triplets = _rows(sessions)
        assert (projects, importing) == (1, 1) and 0 < triplets < ANSWERS, _rows(sessions)
        service.start_web()
        assert http.get(f"{API}/projects").json() == []  # half-made: nobody sees it

        retried = http.post(
            f"{API}/project-archives",
            headers={"Idempotency-Key": "move-1"},
            files={"file": ("moved.zip", body)},
        )
        assert retried.status_code == 201, retried.text
        assert retried.json()["triplet_count"] == ANSWERS
        assert _rows(sessions) == (1, 0, ANSWERS)
        again = http.post(
            f"{API}/project-archives",
            headers={"Idempotency-Key": "move-1"},
            files={"file": ("moved.zip", body)},
        )
        assert again.status_code == 200 and again.json()["id"] == retried.json()["id"]
        assert [p["id"] for p in http.get(f"{API}/projects").json()] == [retried.json()["id"]]

        # No retry this time: the worker finds the importer gone and removes its project.
        _import_killed_half_way(service, sessions, token, body, "move-2")
        assert _rows(sessions)[:2] == (2, 1)
        service.start_web()
        service.worker_args = [[]]
        service.start_workers()
        wait_for(lambda: _rows(sessions) == (1, 0, ANSWERS), 60, "the worker to remove it")
        media = tmp_path / "data" / "media"
        assert sorted(p.name for p in media.glob("*")) in ([], [str(retried.json()["id"])])
    finally:
        service.stop()
        engine.dispose()
