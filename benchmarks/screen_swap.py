"""Screens that arrive whole: the blank time after each swap (from the moment the next
comparison replaces the current one until every image of it is drawn) and click → next
screen, in Chromium, locally and on a throttled link, in the same run, for three pages:

- "ahead": the page as it is. The comparison likely next (drawn as the one on screen
  was served: app/scheduling/upcoming.py) is loaded while the rater looks at the current
  one, and the next screen's images are waited for before the swap where they are not
  in memory;
- "at the swap": the same page without the hints of the next comparison (as it was
  before they came: the wait at the swap only);
- "without (peer)": the swap as htmx does it by itself, no preloading at all.

The service runs as `closer serve` does by default (SQLite, the worker in-process) in a
thread; the study is 300 photographs-like noisy JPEGs of 320 px (~30 KB each) asked
as triplets (`--items`; with 30, every image is soon in the browser's cache). "Without preloading" stops the page's beforeSwap listener from seeing the
swap (a capturing listener on the window) and removes the page's hints of the next
comparison (`.upcoming`) before the page sees them; "at the swap" only removes the
hints.

With `--clips` the items are sounds (Ogg Opus, 1.5 s, ~24 KB each) and "blank" is
the time from the swap until every clip of the screen can play through (0: ready at the
swap): the page loads the next screen's clips before it shows them.

    .venv/bin/python benchmarks/screen_swap.py [--screens 30] [--items 300] [--clips]
        [--look-ms 1000]
"""

from __future__ import annotations

import argparse
import io
import statistics
import sys
import tempfile
import zipfile
from pathlib import Path

import httpx
import numpy as np
from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.auth.service import create_token
from app.core import migrations
from app.core.config import Settings
from app.core.db import make_engine, make_session_factory, unit_of_work
from tests.support.browser import CHROMIUM_ARGS, chromium_path, serve_in_thread, until

API = "/api/v1"
# The page's own clock: the final click, each swap, and when each swapped-in screen had
# every image drawn (0 when it came whole).
LISTEN = """() => {
    window.clickedAt = []; window.swappedAt = []; window.blankMs = [];
    document.addEventListener("click", (event) => {
        if (event.target.closest("#comparison button[type=submit]")) clickedAt.push(performance.now());
    }, true);
    document.addEventListener("htmx:afterSwap", () => {
        const at = performance.now();
        swappedAt.push(at);
        const images = [...document.querySelectorAll("#comparison img")];
        const drawn = (image) => image.complete && image.naturalWidth > 0;
        const clips = [...document.querySelectorAll("#comparison .media")];
        const ready = (clip) => clip.readyState >= 4;
        if (images.every(drawn) && clips.every(ready)) { blankMs.push(0); return; }
        Promise.all([
            ...images.filter((image) => !drawn(image)).map((image) => new Promise((done) => {
                image.addEventListener("load", done, { once: true });
                image.addEventListener("error", done, { once: true });
            })),
            ...clips.filter((clip) => !ready(clip)).map((clip) => new Promise((done) => {
                clip.addEventListener("canplaythrough", done, { once: true });
                clip.addEventListener("error", done, { once: true });
            })),
        ]).then(() => blankMs.push(performance.now() - at));
    });
}"""
WITHOUT_PRELOADING = """() => window.addEventListener("htmx:beforeSwap",
    (event) => event.stopPropagation(), true)"""
AT_THE_SWAP_ONLY = """() => {
    const drop = () => document.querySelectorAll("#comparison .upcoming")
        .forEach((hint) => hint.remove());
    window.addEventListener("DOMContentLoaded", drop, true);
    window.addEventListener("htmx:afterSwap", drop, true);
}"""
PAGES = {
    "without (peer)": f"() => {{ ({WITHOUT_PRELOADING})(); ({AT_THE_SWAP_ONLY})(); }}",
    "at the swap": AT_THE_SWAP_ONLY,
    "ahead": None,
}
SLOW_LINK = {
    "offline": False,
    "latency": 150,
    "downloadThroughput": 1_500_000 / 8,
    "uploadThroughput": 750_000 / 8,
}


def photographs(count: int) -> bytes:
    rng = np.random.default_rng(0)
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        rows = ["key,image"]
        for at in range(count):
            base = rng.integers(0, 255, size=3)
            noise = rng.normal(0, 40, size=(320, 320, 3))
            pixels = np.clip(base + noise, 0, 255).astype(np.uint8)
            image = io.BytesIO()
            Image.fromarray(pixels).save(image, "JPEG", quality=80)
            archive.writestr(f"img/{at}.jpg", image.getvalue())
            rows.append(f"photo-{at},img/{at}.jpg")
        archive.writestr("manifest.csv", "\n".join(rows))
    return buffer.getvalue()


def sounds(count: int) -> bytes:
    from tests.support.media import clip

    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        rows = ["key,text,image"]
        for at in range(count):
            archive.writestr(f"snd/{at}.ogg", clip("opus", pitch=200.0 + 20 * at))
            rows.append(f"sound-{at},sound {at},snd/{at}.ogg")
        archive.writestr("manifest.csv", "\n".join(rows))
    return buffer.getvalue()


def study(http: httpx.Client, clips: bool, count: int) -> str:
    project = http.post(f"{API}/projects", json={"name": "swap"}).json()["id"]
    items = sounds(count) if clips else photographs(count)
    http.post(
        f"{API}/projects/{project}/items", files={"file": ("p.zip", items)}
    ).raise_for_status()
    # (sounds: answered without listening, as the benchmark clicks at once)
    settings = {"attention_rate": 0, "answers_per_rater": 0, "play_to_end": False}
    http.patch(f"{API}/projects/{project}/rating", json=settings).raise_for_status()
    http.put(f"{API}/projects/{project}/link", json={"state": "open"}).raise_for_status()
    return http.get(f"{API}/projects/{project}/rating").json()["public_slug"]


def rate(
    browser, base: str, slug: str, screens: int, look_ms: int, *, changed: str | None, slow: bool
):
    from playwright.sync_api import expect

    page = browser.new_page(viewport={"width": 1280, "height": 800})
    if changed is not None:
        page.add_init_script(f"({changed})()")
    page.goto(f"{base}/r/{slug}")
    page.get_by_role("button", name="Start").click()
    page.wait_for_url("**/rate")
    until(page, "window.htmx !== undefined")
    page.evaluate(LISTEN)
    if slow:
        link = page.context.new_cdp_session(page)
        link.send("Network.enable")
        link.send("Network.setCacheDisabled", {"cacheDisabled": False})
        link.send("Network.emulateNetworkConditions", SLOW_LINK)
    for _ in range(screens):
        before = page.locator("#comparison input[name=query_id]").get_attribute("value")
        page.wait_for_timeout(look_ms)  # a rater's look at the screen
        page.locator('#comparison button[value="left"]').click()
        expect(page.locator("#comparison input[name=query_id]")).not_to_have_value(
            before, timeout=20_000
        )
    until(page, f"blankMs.length >= {screens}", seconds=30)
    clicked, swapped, blank = page.evaluate("[clickedAt, swappedAt, blankMs]")
    page.close()
    spans = [swap - click for click, swap in zip(clicked, swapped, strict=False)]
    return blank, spans


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--screens", type=int, default=30)
    parser.add_argument("--clips", action="store_true", help="sounds, not images")
    parser.add_argument(
        "--items",
        type=int,
        default=300,
        help="the study's items (with few, every image is soon in the browser's cache)",
    )
    parser.add_argument(
        "--look-ms",
        type=int,
        default=1000,
        help="how long the rater looks at each screen before answering (people take 1-3 s)",
    )
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="closer-swap-"))
    url = f"sqlite:///{folder / 'closer.db'}"
    migrations.upgrade(url)
    engine = make_engine(url)
    with unit_of_work(make_session_factory(engine)) as session:
        token = create_token(session=session, researcher_name="bench")
    engine.dispose()
    settings = Settings(data_dir=folder / "data", database_url=url, rate_limits=False)

    from playwright.sync_api import sync_playwright

    rows = []
    with serve_in_thread(settings) as base:
        auth = {"Authorization": f"Bearer {token}"}
        with httpx.Client(base_url=base, headers=auth, timeout=60) as http:
            slug = study(http, args.clips, args.items)
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path=chromium_path(), args=CHROMIUM_ARGS
            )
            for slow in (False, True):
                for name, changed in PAGES.items():
                    blank, spans = rate(
                        browser, base, slug, args.screens, args.look_ms, changed=changed, slow=slow
                    )
                    rows.append((slow, name, blank, spans))
            browser.close()

    kind = "sounds (ready to play through)" if args.clips else "images (drawn)"
    print(
        f"\nscreens arriving whole, {kind}, Chromium, SQLite, this machine "
        f"({args.screens} screens each, {args.look_ms} ms on each before the answer)"
    )
    print(
        f"{'link':<10}{'page':<18}{'blank median':>13}{'blank p90':>10}{'screens blank':>14}"
        f"{'click→swap median':>19}"
    )
    for slow, name, blank, spans in rows:
        p90 = statistics.quantiles(blank, n=10)[-1] if len(blank) > 1 else blank[0]
        print(
            f"{'throttled' if slow else 'local':<10}"
            f"{name:<18}"
            f"{statistics.median(blank):>11.1f}ms{p90:>8.1f}ms"
            f"{sum(ms > 0 for ms in blank):>9} of {len(blank):<3}"
            f"{statistics.median(spans):>17.1f}ms"
        )


if __name__ == "__main__":
    main()
