"""A study's video served to a crowd in ranges (issue 56): a ~50 MB MP4 uploaded to
`closer serve` on its embedded default, then 50 anonymous clients fetch random 1 MiB
ranges of it through the public link for a while, as browsers seek and buffer. The web
process's memory (its growth over its size before, from the kernel's VmHWM) shows
whether a range reads the whole file; aiohttp's static file handler serves the same file to
the same clients in the same run (the peer: aiohttp's static files, which stream a range
without reading the file whole), and its growth and throughput are printed beside.

    .venv/bin/python benchmarks/media_ranges.py [--megabytes 50] [--clients 50] [--seconds 20]
"""

from __future__ import annotations

import argparse
import asyncio
import io
import random
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

import av
import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.auth.service import create_token
from app.core import migrations
from app.core.db import make_engine, make_session_factory, unit_of_work
from benchmarks.image_items import memory_mib
from tests.support.service import ServiceProcesses, free_port

API = "/api/v1"
MIB = 1 << 20


# The peer: aiohttp serving a folder's files (Range requests included), one process.
PEER = """
import sys
from aiohttp import web
app = web.Application()
app.router.add_static("/", sys.argv[1])
web.run_app(app, host="127.0.0.1", port=int(sys.argv[2]), print=None, access_log=None)
"""


def video(megabytes: int) -> bytes:
    """An MP4 (MPEG-4 Part 2, at the best quality) of noise frames: noise does not
    compress, so its size follows its length."""
    buffer = io.BytesIO()
    out = av.open(buffer, "w", format="mp4")
    stream = out.add_stream("mpeg4", rate=25)
    stream.width, stream.height, stream.pix_fmt = 320, 240, "yuv420p"
    stream.bit_rate = 40_000_000  # as much as noise takes: its size follows its length
    rng = np.random.default_rng(0)
    frame_number = 0
    while buffer.tell() < megabytes * MIB:
        noise = rng.integers(0, 256, size=(240, 320, 3), dtype=np.uint8)
        for packet in stream.encode(av.VideoFrame.from_ndarray(noise, format="rgb24")):
            out.mux(packet)
        frame_number += 1
    for packet in stream.encode():
        out.mux(packet)
    out.close()
    return buffer.getvalue()


async def crowd(url: str, size: int, clients: int, seconds: float) -> tuple[int, int]:
    """(requests, bytes) that `clients` fetching random 1 MiB ranges got in `seconds`."""
    done = [0, 0]
    stop = time.monotonic() + seconds

    async def one(number: int) -> None:
        rng = random.Random(number)
        async with httpx.AsyncClient(timeout=60) as client:
            while time.monotonic() < stop:
                start = rng.randrange(0, size - MIB)
                response = await client.get(
                    url, headers={"Range": f"bytes={start}-{start + MIB - 1}"}
                )
                assert response.status_code == 206, response.status_code
                done[0] += 1
                done[1] += len(response.content)

    await asyncio.gather(*(one(number) for number in range(clients)))
    return done[0], done[1]


def measured(pid: int, url: str, size: int, args) -> dict:
    before = memory_mib(pid, "VmRSS")
    Path(f"/proc/{pid}/clear_refs").write_text("5")  # VmHWM from here
    began = time.perf_counter()
    requests, served = asyncio.run(crowd(url, size, args.clients, args.seconds))
    took = time.perf_counter() - began
    return {
        "rss_before": before,
        "growth": memory_mib(pid, "VmHWM") - before,
        "requests": requests,
        "mib_per_s": served / MIB / took,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megabytes", type=int, default=50)
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        folder = Path(folder)
        began = time.perf_counter()
        clip = video(args.megabytes)
        (folder / "peer").mkdir()
        (folder / "peer" / "clip.mp4").write_bytes(clip)
        print(
            f"a {len(clip) / MIB:.1f} MiB MP4 (made in {time.perf_counter() - began:.0f} s)",
            flush=True,
        )
        zipped = io.BytesIO()
        with zipfile.ZipFile(zipped, "w", compression=zipfile.ZIP_STORED) as archive:
            archive.writestr("manifest.csv", "key,text,image\nscene,a scene,scene.mp4\na,,\nb,,\n")
            archive.writestr("scene.mp4", clip)

        url = f"sqlite:///{folder}/closer.db"
        migrations.upgrade(url)
        with unit_of_work(make_session_factory(make_engine(url))) as session:
            token = create_token(session=session, researcher_name="bench")
        (folder / "data").mkdir()
        service = ServiceProcesses(url, folder / "data", web_processes=1, workers=0)
        service.env["CLOSER_RATE_LIMITS"] = "false"
        service.env["CLOSER_MAX_CLIP_BYTES"] = str(2 * args.megabytes * MIB)  # --megabytes 200
        try:
            service.start_web()
            client = httpx.Client(
                base_url=service.url, headers={"Authorization": f"Bearer {token}"}, timeout=600
            )
            project = client.post(f"{API}/projects", json={"name": "scenes"}).json()["id"]
            stored = client.post(
                f"{API}/projects/{project}/items",
                files={"file": ("scenes.zip", zipped.getvalue(), "application/zip")},
            )
            assert stored.status_code == 201, stored.text[:500]
            slug = client.put(f"{API}/projects/{project}/link", json={"state": "open"}).json()[
                "public_slug"
            ]
            rater = httpx.post(f"{service.url}{API}/rate/{slug}/raters", json={}).json()
            shown = httpx.get(
                f"{service.url}{API}/rate/{slug}/next",
                headers={"X-Rater-Token": rater["rater_token"]},
            ).json()["comparison"]
            cards = [shown["anchor"], shown["left"], shown["right"]]
            clip_url = next(card["clip_url"] for card in cards if card["clip_url"])
            closer = measured(service.web.pid, f"{service.url}{clip_url}", len(clip), args)
        finally:
            service.stop()

        port = free_port()
        peer = subprocess.Popen(
            [sys.executable, "-c", PEER, str(folder / "peer"), str(port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                try:
                    httpx.head(f"http://127.0.0.1:{port}/clip.mp4", timeout=1)
                    break
                except httpx.TransportError:
                    time.sleep(0.1)
            python = measured(peer.pid, f"http://127.0.0.1:{port}/clip.mp4", len(clip), args)
        finally:
            peer.terminate()
            peer.wait()

    print(
        f"{args.clients} clients, random 1 MiB ranges of a {len(clip) / MIB:.0f} MiB video, "
        f"{args.seconds:.0f} s each:"
    )
    print(f"{'server':<34}{'RSS before':>12}{'peak growth':>13}{'ranges':>9}{'MiB/s':>9}")
    print(
        f"{'closer serve (the public link)':<34}{closer['rss_before']:>9.0f} MiB"
        f"{closer['growth']:>9.0f} MiB{closer['requests']:>9}{closer['mib_per_s']:>9.0f}"
    )
    print(
        f"{'aiohttp static files (peer)':<34}{python['rss_before']:>9.0f} MiB"
        f"{python['growth']:>9.0f} MiB{python['requests']:>9}{python['mib_per_s']:>9.0f}"
    )
    print(
        f"closer's peak growth / the file's size: {closer['growth'] / (len(clip) / MIB):.2f}; "
        f"closer / peer throughput: {closer['mib_per_s'] / python['mib_per_s']:.2f}"
    )


if __name__ == "__main__":
    main()
