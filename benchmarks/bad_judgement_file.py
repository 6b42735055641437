"""A long judgement file with a bad key near its end is refused in the time it takes to
read it (issue 55; the probe of 2026-12-01 waited 464 s for a 10^6-row file).

A real `closer serve` on a throwaway PostgreSQL server and on SQLite, a project of 1,854
items (THINGS' size), and a THINGS-layout odd-one-out file of `--rows` judgements
(`item1,item2,item3,pick1`). The file is uploaded with an unknown key in its last row but
ten; the peer, in the same run, is the same file without it (accepted: every judgement
and its two triplets written). Reported: the refusal's time, the accepted upload's, their
ratio, and what was left behind by the refusal (nothing, checked).

    .venv/bin/python benchmarks/bad_judgement_file.py [--rows 1000000]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.support.postgres import start_postgres  # noqa: E402
from tests.support.service import ServiceProcesses, database_with_token  # noqa: E402

API = "/api/v1"
ITEMS = 1_854


def _file(rows: int, bad_at: int | None) -> bytes:
    rng = np.random.default_rng(0)
    triples = np.array([rng.choice(ITEMS, 3, replace=False) for _ in range(min(rows, 50_000))])
    lines = ["item1,item2,item3,pick1"]
    for row in range(rows):
        a, b, c = triples[row % len(triples)]
        third = "no-such-item" if row == bad_at else f"t{c}"
        lines.append(f"t{a},t{b},{third},t{a}")
    return ("\n".join(lines) + "\n").encode()


def _run(name: str, url: str, token: str, data_dir: Path, rows: int) -> None:
    service = ServiceProcesses(url, data_dir, web_processes=1, workers=0)
    service.start_web()
    try:
        auth = {"Authorization": f"Bearer {token}"}
        with httpx.Client(base_url=service.url, headers=auth, timeout=3_600) as http:
            pid = http.post(f"{API}/projects", json={"name": "things"}).json()["id"]
            items = "key\n" + "".join(f"t{n}\n" for n in range(ITEMS))
            assert http.post(
                f"{API}/projects/{pid}/items", files={"file": ("i.csv", items)}
            ).is_success
            bad = _file(rows, bad_at=rows - 10)
            good = _file(rows, bad_at=None)
            started = time.perf_counter()
            refused = http.post(f"{API}/projects/{pid}/judgements", files={"file": ("j.csv", bad)})
            refusal = time.perf_counter() - started
            assert refused.status_code == 422, refused.text[:300]
            left = http.get(f"{API}/projects/{pid}").json()["triplet_count"]
            started = time.perf_counter()
            taken = http.post(f"{API}/projects/{pid}/judgements", files={"file": ("j.csv", good)})
            accepted = time.perf_counter() - started
            assert taken.status_code == 201, taken.text[:300]
        print(
            f"{name:<11} {rows:>9,} rows ({len(bad) / 2**20:.0f} MiB)  refused in {refusal:6.1f} s"
            f"  (left {left} triplets; {refused.json()['detail'][0]['row']:,}th row named)"
            f"  accepted in {accepted:6.1f} s  ratio {refusal / accepted:.2f}",
            flush=True,
        )
    finally:
        service.stop()


def main(rows: int) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        server = start_postgres()
        try:
            url, token = database_with_token(server, "bad_file")
            _run("PostgreSQL", url, token, root / "pg", rows)
        finally:
            server.stop()
        sqlite_url = f"sqlite:///{root}/closer.db"
        from app.auth.service import create_token
        from app.core import migrations
        from app.core.db import make_engine, make_session_factory, unit_of_work

        migrations.upgrade(sqlite_url)
        engine = make_engine(sqlite_url)
        with unit_of_work(make_session_factory(engine)) as session:
            token = create_token(session=session, researcher_name="bench")
        engine.dispose()
        _run("SQLite", sqlite_url, token, root / "sqlite", rows)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    main(parser.parse_args().rows)
