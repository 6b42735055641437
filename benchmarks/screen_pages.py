"""Click → next screen on the rating page in Chromium, per judgement format, against a
triplet in the same run.

The service runs as `closer serve` runs it by default (SQLite, the worker in-process) in
a thread; headless Chromium rates four studies of 24 coloured squares: triplets (the
peer), odd-one-out, rank "2 of 8", and a triplet study whose CompRF build asks on sorting
screens of 8. For each screen the rater answers as a person would (a rank screen's picks
and a sorting screen's sides are placed first, by clicks), then the final click (a
candidate, the odd one, Submit) is timed by the page's own clock to the moment the next
screen has been swapped in (htmx:afterSwap): the server's answer, the next query and the
swap, without the rater's own time.

    .venv/bin/python benchmarks/screen_pages.py [--screens 40]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.auth.service import create_token
from app.core import migrations
from app.core.config import Settings
from app.core.db import make_engine, make_session_factory, unit_of_work
from tests.support.browser import (
    CHROMIUM_ARGS,
    chromium_path,
    serve_in_thread,
    until,
)
from tests.support.uploads import coloured_squares

API = "/api/v1"
STUDIES = {
    "triplet": ({"judgement": "triplet"}, None),
    "odd_one_out": ({"judgement": "odd_one_out"}, None),
    "rank 2 of 8": ({"judgement": "rank", "shown": 8, "picks": 2}, None),
    "sort 8": ({"judgement": "triplet", "random_share": 0}, 8),
}
# Timing of the final click to the next swap, by the page's own clock.
LISTEN = """() => {
    window.clickedAt = []; window.swappedAt = [];
    document.addEventListener("click", (event) => {
        const final = event.target.closest("#comparison button[type=submit]");
        if (final) clickedAt.push(performance.now());
    }, true);
    document.addEventListener("htmx:afterSwap", () => swappedAt.push(performance.now()));
}"""


def study(http: httpx.Client, name: str, rating: dict, sort_size: int | None) -> str:
    archive = coloured_squares(24, size=64, labels=["warm"] * 12 + ["cool"] * 12)
    project = http.post(f"{API}/projects", json={"name": name}).json()["id"]
    http.post(
        f"{API}/projects/{project}/items", files={"file": ("c.zip", archive)}
    ).raise_for_status()
    http.patch(
        f"{API}/projects/{project}/rating",
        json={"attention_rate": 0, "answers_per_rater": 0, **rating},
    ).raise_for_status()
    if sort_size:
        http.post(
            f"{API}/projects/{project}/builds",
            json={"n_trees": 20, "random_state": 0, "sort_size": sort_size},
        ).raise_for_status()
    http.put(f"{API}/projects/{project}/link", json={"state": "open"}).raise_for_status()
    return http.get(f"{API}/projects/{project}/rating").json()["public_slug"]


def answer_one(page) -> None:
    """Answer the screen on the page as a rater would; the last click is the timed one."""
    comparison = page.locator("#comparison")
    if comparison.locator(".sortee").count():
        sortees = comparison.locator(".sortee")
        for at in range(sortees.count()):
            sortees.nth(at).locator(".side-left" if at % 2 else ".side-right").click()
        comparison.locator(".send-sides").click()
    elif comparison.locator(".send-picks").count():
        picks = comparison.locator(".pick")
        picks.nth(0).click()
        picks.nth(3).click()
        comparison.locator(".send-picks").click()
    elif comparison.locator(".pick").count():
        comparison.locator(".pick").nth(1).click()
    else:
        comparison.locator('button[value="left"]').click()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--screens", type=int, default=40)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="closer-screens-"))
    url = f"sqlite:///{folder / 'closer.db'}"
    migrations.upgrade(url)
    engine = make_engine(url)
    with unit_of_work(make_session_factory(engine)) as session:
        token = create_token(session=session, researcher_name="bench")
    engine.dispose()
    settings = Settings(data_dir=folder / "data", database_url=url, rate_limits=False)

    from playwright.sync_api import expect, sync_playwright

    results = {}
    with serve_in_thread(settings) as base:
        auth = {"Authorization": f"Bearer {token}"}
        with httpx.Client(base_url=base, headers=auth, timeout=60) as http:
            slugs = {name: study(http, name, *shape) for name, shape in STUDIES.items()}
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path=chromium_path(), args=CHROMIUM_ARGS
            )
            for name, slug in slugs.items():
                page = browser.new_page(viewport={"width": 1280, "height": 800})
                page.goto(f"{base}/r/{slug}")
                page.get_by_role("button", name="Start").click()
                page.wait_for_url("**/rate")
                until(page, "window.htmx !== undefined")
                page.evaluate(LISTEN)
                for _ in range(args.screens + 1):  # the first: a random triplet in "sort 8"
                    before = page.locator("#comparison input[name=query_id]").get_attribute("value")
                    answer_one(page)
                    expect(page.locator("#comparison input[name=query_id]")).not_to_have_value(
                        before
                    )
                clicked, swapped = page.evaluate("[clickedAt, swappedAt]")
                spans = [swap - click for click, swap in zip(clicked, swapped, strict=False)][1:]
                results[name] = spans
                page.close()
            browser.close()

    peer = statistics.median(results["triplet"])
    print(
        f"\nclick → next screen swapped in, Chromium, SQLite, this machine ({args.screens} screens)"
    )
    print(f"{'format':<14}{'median ms':>10}{'p90 ms':>9}{'vs triplet':>12}")
    for name, spans in results.items():
        median = statistics.median(spans)
        p90 = statistics.quantiles(spans, n=10)[-1]
        print(f"{name:<14}{median:>10.1f}{p90:>9.1f}{median / peer:>11.2f}x")


if __name__ == "__main__":
    main()
