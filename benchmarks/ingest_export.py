"""Upload 1,000,000 triplets over HTTP and export them again, on PostgreSQL and SQLite.

For each database the service runs as a real uvicorn process. The peer is the database's
own bulk path on the same rows in the same run: PostgreSQL COPY FROM/TO STDIN and SQLite
executemany/SELECT into a bare table with no indexes, i.e. the ceiling for that database.
Server memory (RSS) is sampled during each phase at two sizes to show it does not grow
with the row count.

    .venv/bin/python benchmarks/ingest_export.py [--rows 1000000] [--items 1000]
"""

from __future__ import annotations

import argparse
import os
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np
import psycopg

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.support.memory import PeakMemory  # noqa: E402
from tests.support.postgres import start_postgres  # noqa: E402


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Service:
    def __init__(self, database_url: str, data_dir: Path) -> None:
        self.port = free_port()
        env = {
            **os.environ,
            "DATABASE_URL": database_url,
            "CLOSER_DATA_DIR": str(data_dir),
            "CLOSER_MAX_UPLOAD_BYTES": str(4 << 30),
            "PYTHONPATH": str(REPO),
        }
        subprocess.run(
            [sys.executable, "-m", "app.cli", "migrate"], env=env, check=True, capture_output=True
        )
        token = subprocess.run(
            [sys.executable, "-m", "app.cli", "create-token", "--name", "bench"],
            env=env,
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "uvicorn",
                "app.main:create_app",
                "--factory",
                "--port",
                str(self.port),
                "--log-level",
                "warning",
            ],
            env=env,
        )
        self.http = httpx.Client(
            base_url=f"http://127.0.0.1:{self.port}/api/v1",
            timeout=600,
            headers={"Authorization": f"Bearer {token}"},
        )
        deadline = time.monotonic() + 60
        while True:
            try:
                self.http.get("/health")
                return
            except httpx.ConnectError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)


def make_files(folder: Path, rows: int, items: int) -> tuple[Path, Path, np.ndarray]:
    rng = np.random.default_rng(0)
    triplets = rng.integers(0, items, size=(rows * 2, 3))
    distinct = (
        (triplets[:, 0] != triplets[:, 1])
        & (triplets[:, 0] != triplets[:, 2])
        & (triplets[:, 1] != triplets[:, 2])
    )
    triplets = triplets[distinct][:rows]
    items_file = folder / "items.csv"
    items_file.write_text("key\n" + "".join(f"item-{i}\n" for i in range(items)))
    triplets_file = folder / f"triplets-{rows}.csv"
    with triplets_file.open("w") as handle:
        handle.write("anchor,closer,farther\n")
        for start in range(0, rows, 100_000):
            block = triplets[start : start + 100_000]
            handle.write("".join(f"item-{a},item-{b},item-{c}\n" for a, b, c in block.tolist()))
    return items_file, triplets_file, triplets


def measure_service(service: Service, items_file: Path, triplets_file: Path, rows: int) -> dict:
    project = service.http.post("/projects", json={"name": f"bench {rows}"}).json()["id"]
    with items_file.open("rb") as handle:
        service.http.post(f"/projects/{project}/items", files={"file": ("items.csv", handle)})
    with (
        PeakMemory(service.process.pid, every=0.02) as ingest_memory,
        triplets_file.open("rb") as handle,
    ):
        start = time.perf_counter()
        response = service.http.post(
            f"/projects/{project}/triplets", files={"file": (triplets_file.name, handle)}
        )
        ingest_seconds = time.perf_counter() - start
    assert response.status_code == 201, response.text
    assert response.json()["rows"] == rows
    with PeakMemory(service.process.pid, every=0.02) as export_memory:
        start = time.perf_counter()
        newlines = 0
        with service.http.stream("GET", f"/projects/{project}/triplets/export") as stream:
            for chunk in stream.iter_raw():
                newlines += chunk.count(b"\n")
        export_seconds = time.perf_counter() - start
    assert newlines == rows + 1, newlines
    return {
        "ingest": rows / ingest_seconds,
        "export": rows / export_seconds,
        "ingest_mib": ingest_memory.growth_mib,
        "export_mib": export_memory.growth_mib,
    }


def peer_postgres(port: int, triplets: np.ndarray) -> dict:
    text = "".join(f"1\t{a}\t{b}\t{c}\tupload\n" for a, b, c in triplets.tolist())
    with psycopg.connect(f"host=127.0.0.1 port={port} user=closer dbname=postgres") as conn:
        conn.execute("DROP TABLE IF EXISTS peer")
        conn.execute(
            "CREATE TABLE peer (id bigserial primary key, project_id int, anchor_id bigint,"
            " closer_id bigint, farther_id bigint, source varchar(6),"
            " created_at timestamptz default now())"
        )
        conn.commit()
        start = time.perf_counter()
        with conn.cursor() as cursor:
            with cursor.copy(
                "COPY peer (project_id, anchor_id, closer_id, farther_id, source) FROM STDIN"
            ) as copy:
                for offset in range(0, len(text), 1 << 20):
                    copy.write(text[offset : offset + (1 << 20)])
        conn.commit()
        ingest_seconds = time.perf_counter() - start
        start = time.perf_counter()
        size = 0
        with conn.cursor() as cursor:
            with cursor.copy(
                "COPY (SELECT anchor_id, closer_id, farther_id, source, created_at "
                "FROM peer ORDER BY id) TO STDOUT WITH CSV"
            ) as copy:
                for block in copy:
                    size += len(block)
        export_seconds = time.perf_counter() - start
    rows = len(triplets)
    return {"ingest": rows / ingest_seconds, "export": rows / export_seconds}


def peer_sqlite(folder: Path, triplets: np.ndarray) -> dict:
    path = folder / "peer.db"
    connection = sqlite3.connect(path)
    connection.execute("PRAGMA journal_mode=WAL")
    connection.execute("PRAGMA synchronous=NORMAL")
    connection.execute(
        "CREATE TABLE peer (id INTEGER PRIMARY KEY, project_id int, anchor_id int,"
        " closer_id int, farther_id int, source text,"
        " created_at text default CURRENT_TIMESTAMP)"
    )
    rows = [(1, a, b, c, "upload") for a, b, c in triplets.tolist()]
    start = time.perf_counter()
    connection.executemany(
        "INSERT INTO peer (project_id, anchor_id, closer_id, farther_id, source)"
        " VALUES (?, ?, ?, ?, ?)",
        rows,
    )
    connection.commit()
    ingest_seconds = time.perf_counter() - start
    start = time.perf_counter()
    count = sum(
        1
        for _ in connection.execute(
            "SELECT anchor_id, closer_id, farther_id, source, created_at FROM peer ORDER BY id"
        )
    )
    export_seconds = time.perf_counter() - start
    connection.close()
    return {"ingest": len(rows) / ingest_seconds, "export": count / export_seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--items", type=int, default=1_000)
    parser.add_argument(
        "--small",
        type=int,
        default=100_000,
        help="a second, smaller size to show memory is flat in the row count",
    )
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        items_file, big_file, big = make_files(folder, args.rows, args.items)
        _, small_file, _ = make_files(folder, args.small, args.items)
        server = start_postgres()
        try:
            for backend in ("postgresql", "sqlite"):
                if backend == "postgresql":
                    url = server.create_database("bench")
                    peer = peer_postgres(server.port, big)
                else:
                    url = f"sqlite:///{folder / 'bench.db'}"
                    peer = peer_sqlite(folder, big)
                service = Service(url, folder / f"data-{backend}")
                try:
                    small = measure_service(service, items_file, small_file, args.small)
                    large = measure_service(service, items_file, big_file, args.rows)
                finally:
                    service.stop()
                results.append((backend, small, large, peer))
        finally:
            server.stop()

    print(
        f"\nTriplets through the HTTP service, {args.rows:,} rows ({args.items:,} items); "
        "peer = the database's own bulk path on the same rows, same run"
    )
    header = (
        f"{'database':<11}{'phase':<8}{'Closer rows/s':>15}{'peer rows/s':>14}{'ratio':>8}"
        f"{f'RSS +MiB @{args.small // 1000}k':>16}{f'RSS +MiB @{args.rows // 1000}k':>16}"
    )
    print(header)
    print("-" * len(header))
    for backend, small, large, peer in results:
        for phase in ("ingest", "export"):
            print(
                f"{backend:<11}{phase:<8}{large[phase]:>15,.0f}{peer[phase]:>14,.0f}"
                f"{large[phase] / peer[phase]:>8.2f}{small[phase + '_mib']:>16.1f}"
                f"{large[phase + '_mib']:>16.1f}"
            )
    print(
        "\nTargets: PostgreSQL ingest >= 100,000 rows/s, export >= 200,000 rows/s; "
        "memory flat in the row count."
    )


if __name__ == "__main__":
    main()
