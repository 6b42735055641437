"""Export 5,000,000 answers as Parquet over HTTP, on PostgreSQL and SQLite (issue 55:
under 30 s, memory bounded).

For each database the service runs as a real uvicorn process; the answers go in through
the upload API first (not timed here: benchmarks/ingest_export.py measures that). The
peer, in the same run on the same rows, is pyarrow fed by the database's own fastest
read, all at once in memory (PostgreSQL COPY TO CSV read by pyarrow.csv; SQLite's cursor
into a table), then pyarrow.parquet.write_table: the ceiling, with its memory unbounded.
Server memory (RSS) is sampled during each export at two sizes to show it does not grow
with the row count.

    .venv/bin/python benchmarks/parquet_export.py [--rows 5000000] [--small 500000]
"""

from __future__ import annotations

import argparse
import io
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

import psycopg
import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.ingest_export import Service, make_files  # noqa: E402
from tests.support.memory import PeakMemory  # noqa: E402
from tests.support.postgres import start_postgres  # noqa: E402


def fill(service: Service, items_file: Path, triplets_file: Path, rows: int) -> int:
    project = service.http.post("/projects", json={"name": f"bench {rows}"}).json()["id"]
    with items_file.open("rb") as handle:
        service.http.post(f"/projects/{project}/items", files={"file": ("items.csv", handle)})
    with triplets_file.open("rb") as handle:
        response = service.http.post(
            f"/projects/{project}/triplets", files={"file": (triplets_file.name, handle)}
        )
    assert response.status_code == 201, response.text
    return project


def export(service: Service, project: int, rows: int, folder: Path) -> dict:
    target = folder / f"export-{project}.parquet"
    with PeakMemory(service.process.pid, every=0.02) as memory, target.open("wb") as out:
        start = time.perf_counter()
        with service.http.stream(
            "GET", f"/projects/{project}/triplets/export?format=parquet"
        ) as stream:
            assert stream.status_code == 200
            for chunk in stream.iter_raw():
                out.write(chunk)
        seconds = time.perf_counter() - start
    table = pq.read_table(target)
    assert table.num_rows == rows, table.num_rows
    return {"seconds": seconds, "mib": memory.growth_mib, "bytes": target.stat().st_size}


def peer_postgres(port: int, dbname: str, project: int, folder: Path) -> float:
    sql = (
        "SELECT a.key, c.key, f.key, t.source, t.response_time_ms, t.created_at"
        " FROM triplets t JOIN items a ON a.id = t.anchor_id"
        " JOIN items c ON c.id = t.closer_id JOIN items f ON f.id = t.farther_id"
        f" WHERE t.project_id = {project} ORDER BY t.id"
    )
    start = time.perf_counter()
    buffer = io.BytesIO()
    with psycopg.connect(f"host=127.0.0.1 port={port} user=closer dbname={dbname}") as conn:
        with conn.cursor() as cursor:
            with cursor.copy(f"COPY ({sql}) TO STDOUT WITH (FORMAT csv)") as copy:
                for block in copy:
                    buffer.write(block)
    buffer.seek(0)
    names = ["anchor", "closer", "farther", "source", "response_time_ms", "created_at"]
    table = pa_csv.read_csv(buffer, read_options=pa_csv.ReadOptions(column_names=names))
    pq.write_table(table, folder / "peer-postgres.parquet", compression="zstd")
    return time.perf_counter() - start


def peer_sqlite(path: Path, project: int, folder: Path) -> float:
    start = time.perf_counter()
    connection = sqlite3.connect(path)
    rows = connection.execute(
        "SELECT a.key, c.key, f.key, t.source, t.response_time_ms, t.created_at"
        " FROM triplets t JOIN items a ON a.id = t.anchor_id"
        " JOIN items c ON c.id = t.closer_id JOIN items f ON f.id = t.farther_id"
        " WHERE t.project_id = ? ORDER BY t.id",
        (project,),
    ).fetchall()
    connection.close()
    names = ["anchor", "closer", "farther", "source", "response_time_ms", "created_at"]
    table = pa.table(
        {name: list(column) for name, column in zip(names, zip(*rows, strict=True), strict=True)}
    )
    pq.write_table(table, folder / "peer-sqlite.parquet", compression="zstd")
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=5_000_000)
    parser.add_argument("--small", type=int, default=500_000)
    parser.add_argument("--items", type=int, default=1_000)
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        items_file, big_file, _ = make_files(folder, args.rows, args.items)
        _, small_file, _ = make_files(folder, args.small, args.items)
        server = start_postgres()
        try:
            for backend in ("postgresql", "sqlite"):
                if backend == "postgresql":
                    url = server.create_database("bench")
                else:
                    url = f"sqlite:///{folder / 'bench.db'}"
                service = Service(url, folder / f"data-{backend}")
                try:
                    small_project = fill(service, items_file, small_file, args.small)
                    big_project = fill(service, items_file, big_file, args.rows)
                    small = export(service, small_project, args.small, folder)
                    large = export(service, big_project, args.rows, folder)
                finally:
                    service.stop()
                if backend == "postgresql":
                    peer = peer_postgres(server.port, "bench", big_project, folder)
                else:
                    peer = peer_sqlite(folder / "bench.db", big_project, folder)
                results.append((backend, small, large, peer))
        finally:
            server.stop()

    print(
        f"\nAnswers as Parquet through the HTTP service, {args.rows:,} rows; peer = the "
        "database's fastest read into pyarrow, all in memory, then write_table (same run)"
    )
    header = (
        f"{'database':<11}{'Closer s':>9}{'peer s':>8}{'ratio':>7}{'MB':>7}"
        f"{f'RSS +MiB @{args.small // 1000}k':>17}{f'RSS +MiB @{args.rows // 1000}k':>17}"
    )
    print(header)
    print("-" * len(header))
    for backend, small, large, peer in results:
        print(
            f"{backend:<11}{large['seconds']:>9.1f}{peer:>8.1f}{large['seconds'] / peer:>7.2f}"
            f"{large['bytes'] / 1e6:>7.0f}{small['mib']:>17.1f}{large['mib']:>17.1f}"
        )
    print("\nTarget: 5 M answers in under 30 s on this machine, memory flat in the row count.")


if __name__ == "__main__":
    main()
