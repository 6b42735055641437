"""50,000 images through the service (issue 33): a ZIP of small images with a manifest
uploaded to `closer serve` on its embedded default, the web process's memory watched
(its growth over its size before the upload, from the kernel's VmHWM), against unpacking
the same archive to disk with Python's zipfile in the same run (the floor of any
upload); then the items page, the items API and the item cards the embedding page loads,
timed over HTTP at the first, middle and last pages and for a search.

    .venv/bin/python benchmarks/image_items.py [--items 50000] [--size 64] [--rounds 40]
"""

from __future__ import annotations

import argparse
import io
import statistics
import sys
import tempfile
import time
import zipfile
from pathlib import Path

import httpx
import numpy as np
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.auth.service import create_token
from app.core import migrations
from app.core.db import make_engine, make_session_factory, unit_of_work
from tests.support.service import ServiceProcesses

API = "/api/v1"


def archive(path: Path, items: int, size: int, seed: int = 0) -> None:
    """`items` JPEG images of `size` pixels (noisy colour fields, as small photos
    compress), labelled in 50 classes, and manifest.csv."""
    rng = np.random.default_rng(seed)
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as out:
        rows = ["key,image,label,text"]
        base = rng.integers(0, 256, size=(50, 3))
        for i in range(items):
            label = i % 50
            pixels = base[label] + rng.normal(scale=40, size=(size, size, 3))
            buffer = io.BytesIO()
            Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8)).save(
                buffer, "JPEG", quality=80
            )
            out.writestr(f"images/{i}.jpg", buffer.getvalue())
            rows.append(f"n{i:06d},images/{i}.jpg,class {label},photo {i} of class {label}")
        out.writestr("manifest.csv", "\n".join(rows) + "\n")


def memory_mib(pid: int, field: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def timed(client: httpx.Client, url: str, rounds: int, **params) -> dict:
    seconds = []
    for _ in range(rounds):
        began = time.perf_counter()
        response = client.get(url, params=params)
        seconds.append(time.perf_counter() - began)
        assert response.status_code == 200, (url, response.status_code, response.text[:200])
    seconds.sort()
    return {
        "p50_ms": 1000 * statistics.median(seconds),
        "p99_ms": 1000 * seconds[min(len(seconds) - 1, int(0.99 * len(seconds)))],
        "bytes": len(response.content),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=50_000)
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=40)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        folder = Path(folder)
        zipped = folder / "items.zip"
        began = time.perf_counter()
        archive(zipped, args.items, args.size)
        print(
            f"{args.items:,} {args.size}x{args.size} JPEGs: {zipped.stat().st_size / 2**20:.0f} "
            f"MiB archive (made in {time.perf_counter() - began:.0f} s)",
            flush=True,
        )
        began = time.perf_counter()
        with zipfile.ZipFile(zipped) as unpacked:
            unpacked.extractall(folder / "unpacked")
        floor = time.perf_counter() - began

        url = f"sqlite:///{folder}/closer.db"
        migrations.upgrade(url)
        sessions = make_session_factory(make_engine(url))
        with unit_of_work(sessions) as session:
            token = create_token(session=session, researcher_name="bench")
        service = ServiceProcesses(url, folder / "data", web_processes=1, workers=0)
        (folder / "data").mkdir(exist_ok=True)
        service.env.update({"CLOSER_RATE_LIMITS": "false", "CLOSER_WORKER_IN_PROCESS": "false"})
        try:
            service.start_web()
            pid = service.web.pid
            client = httpx.Client(
                base_url=service.url, headers={"Authorization": f"Bearer {token}"}, timeout=600
            )
            project = client.post(f"{API}/projects", json={"name": "images"}).json()["id"]
            client.get(f"{API}/projects/{project}/items")  # warm the routes and the imports
            before = memory_mib(pid, "VmRSS")
            Path(f"/proc/{pid}/clear_refs").write_text("5")  # VmHWM from here
            began = time.perf_counter()
            with zipped.open("rb") as body:
                stored = client.post(
                    f"{API}/projects/{project}/items",
                    files={"file": ("items.zip", body, "application/zip")},
                )
            upload = time.perf_counter() - began
            assert stored.status_code == 201, stored.text[:500]
            growth = memory_mib(pid, "VmHWM") - before
            print(
                f"upload: {upload:.1f} s ({args.items / upload:,.0f} images/s); unpacking the "
                f"same archive with zipfile: {floor:.1f} s (ratio {upload / floor:.1f}x); web "
                f"process {before:.0f} MiB before, peak growth {growth:.0f} MiB during it",
                flush=True,
            )
            pages = -(-args.items // 50)
            page_url = f"/projects/{project}/items"
            rows = {
                "items page, first": timed(client, page_url, args.rounds, page=1),
                "items page, middle": timed(client, page_url, args.rounds, page=pages // 2),
                "items page, last": timed(client, page_url, args.rounds, page=pages),
                "items page, search": timed(client, page_url, args.rounds, q="class 7"),
                "items API, last page (peer)": timed(
                    client,
                    f"{API}/projects/{project}/items",
                    args.rounds,
                    limit=50,
                    offset=args.items - 50,
                ),
                "item cards (embedding page)": timed(
                    client, f"/projects/{project}/item-cards.json", max(args.rounds // 4, 5)
                ),
            }
            thumbnail = client.get(page_url, params={"page": pages}).text
            assert 'loading="lazy"' in thumbnail or "<img" in thumbnail
        finally:
            service.stop()
    print(f"\n| {'request':<30} | p50 ms | p99 ms | bytes |")
    print(f"|{'-' * 32}|--------|--------|-------|")
    for name, found in rows.items():
        print(
            f"| {name:<30} | {found['p50_ms']:6.1f} | {found['p99_ms']:6.1f} | {found['bytes']:,} |"
        )


if __name__ == "__main__":
    main()
