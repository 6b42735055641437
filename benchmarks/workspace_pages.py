"""The researcher's workspace at scale (issue 18): every dashboard page of a project with
10,000 items, 1,000,000 answers and 1,000 raters on PostgreSQL, timed over HTTP against
the JSON API for the same data in the same run; and the embedding page drawing 10,000
points in Chromium (the browser's own timing), against fetching the same embedding as
JSON.

    .venv/bin/python benchmarks/workspace_pages.py [--answers 1000000] [--rounds 60]
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.auth.service import create_token, set_researcher_password
from app.core import migrations
from app.core.config import Settings
from app.core.db import libpq_conninfo, make_engine, make_session_factory, unit_of_work
from app.models import ModelKind, Project
from app.training import service as training
from app.triplets.jobs import tally_answers
from app.worker.loop import Worker
from tests.support.browser import CHROMIUM_ARGS, chromium_path, serve_in_thread
from tests.support.postgres import start_postgres

PASSWORD = "benchmark password"
OWNER = "bench@lab.example"


def seed(url: str, items: int, raters: int, answers: int, seed: int = 0, owner: str = OWNER) -> int:
    """A project of `items` items with 2-D features and labels, `raters` raters and
    `answers` rater answers spread over the last week, written with COPY, for the
    researcher `owner`."""
    import psycopg

    plain = libpq_conninfo(url)
    rng = np.random.default_rng(seed)
    with psycopg.connect(plain) as connection:
        researcher = connection.execute(
            "SELECT id FROM researchers WHERE name = %s", (owner,)
        ).fetchone()[0]
        project = connection.execute(
            "INSERT INTO projects (owner_id, name, description, label_type, created_at, "
            "public_slug, instructions, question, allow_cant_tell, answers_per_rater, "
            "completion_code, random_share, attention_rate, lease_seconds, "
            "quality_min_answers, settings_version) VALUES (%s, 'Big study', '', 'class', "
            "now(), 'bench-slug', '', 'Which is closer?', false, 0, 'DONE', 0.1, 0, 120, 5, 0) "
            "RETURNING id",
            (researcher,),
        ).fetchone()[0]
        points = rng.normal(0, 1, (items, 2)).astype(np.float64)
        with connection.cursor().copy(
            "COPY items (project_id, key, label, text, features, split, created_at) FROM STDIN"
        ) as copy:
            for i in range(items):
                copy.write_row(
                    (
                        project,
                        f"item-{i}",
                        f"c{i % 10}",
                        f"item number {i}",
                        points[i].tobytes(),
                        "train",
                        datetime.now(UTC),
                    )
                )
        connection.execute("UPDATE projects SET feature_dim = 2 WHERE id = %s", (project,))
        first_item = connection.execute(
            "SELECT min(id) FROM items WHERE project_id = %s", (project,)
        ).fetchone()[0]
        with connection.cursor().copy(
            "COPY raters (project_id, external_id, platform, created_at, platform_ids, answers, "
            "attention_passed, attention_failed, majority_compared, excluded, exclusion_reason, "
            "last_seen_at) FROM STDIN"
        ) as copy:
            for r in range(raters):
                copy.write_row(
                    (
                        project,
                        f"rater-{r}",
                        "prolific",
                        datetime.now(UTC),
                        "{}",
                        answers // raters,
                        0,
                        0,
                        0,
                        False,
                        "",
                        datetime.now(UTC),
                    )
                )
        first_rater = connection.execute(
            "SELECT min(id) FROM raters WHERE project_id = %s", (project,)
        ).fetchone()[0]
        anchor = rng.integers(0, items, answers)
        closer = (anchor + rng.integers(1, items // 2, answers)) % items
        farther = (anchor + items // 2 + rng.integers(1, items // 2 - 1, answers)) % items
        triplets = np.stack([anchor, closer, farther], axis=1) + first_item
        who = rng.integers(0, raters, answers) + first_rater
        elapsed = rng.lognormal(np.log(2500), 0.5, answers).round().astype(np.int64)
        start = datetime.now(UTC) - timedelta(days=7)
        offsets = np.sort(rng.uniform(0, 7 * 86_400, answers))
        with connection.cursor().copy(
            "COPY triplets (project_id, anchor_id, closer_id, farther_id, source, rater_id, "
            "response_time_ms, created_at) FROM STDIN"
        ) as copy:
            for i in range(answers):
                a, c, f = triplets[i]
                copy.write_row(
                    (
                        project,
                        int(a),
                        int(c),
                        int(f),
                        "rater",
                        int(who[i]),
                        int(elapsed[i]),
                        start + timedelta(seconds=float(offsets[i])),
                    )
                )
    with psycopg.connect(plain, autocommit=True) as connection:
        # What autovacuum does to a table after a bulk load: index-only scans need it.
        connection.execute("VACUUM ANALYZE")
    return project


def timed(client: httpx.Client, path: str, rounds: int, headers: dict | None = None) -> dict:
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        response = client.get(path, headers=headers or {})
        times.append((time.perf_counter() - started) * 1000)
        assert response.status_code == 200, (path, response.status_code, response.text[:200])
    times.sort()
    return {
        "p50": statistics.median(times),
        "p99": times[min(len(times) - 1, round(0.99 * (len(times) - 1)))],
    }


# In the page: when each input event reached it, and when the card or chart answered.
_WATCH = """() => {
  const chart = echarts.getInstanceByDom(document.getElementById("scatter"));
  const seen = (window.__seen = { input: [], card: [], frame: [] });
  const scatter = document.getElementById("scatter");
  for (const kind of ["mousemove", "wheel"])
    scatter.addEventListener(kind, (e) => seen.input.push(e.timeStamp), { capture: true });
  new MutationObserver(() => seen.card.push(performance.now())).observe(
    document.getElementById("item-card"), { childList: true, subtree: true });
  chart.on("finished", () => seen.frame.push(performance.now()));
}"""

# Where the chart draws the point of series `series`, number `index`, on the screen.
_POINT = """([series, index]) => {
  const node = document.getElementById("scatter");
  const chart = echarts.getInstanceByDom(node);
  const data = chart.getOption().series[series].data[index];
  if (!data) return null;
  const [x, y] = chart.convertToPixel({ seriesIndex: series }, [data[0], data[1]]);
  const box = node.getBoundingClientRect();
  return [box.left + x, box.top + y];
}"""


def interactions(page, hovers: int = 10, zooms: int = 5) -> tuple[list, list, int]:
    """Milliseconds from the input event to the answer the user sees: the item card
    after hovering over a point (points of different series, kept clear of the card),
    and the redrawn chart after one wheel step over it; and how many hovers the card
    did not answer within 300 ms."""
    page.locator("#scatter").scroll_into_view_if_needed()
    page.wait_for_timeout(300)
    page.evaluate(_WATCH)
    series = page.evaluate(
        "echarts.getInstanceByDom(document.getElementById('scatter')).getOption().series.length"
    )
    card = page.locator("#item-card").bounding_box()
    hovered: list[float] = []
    index = unanswered = 0
    while len(hovered) + unanswered < hovers and index < 200:
        point = page.evaluate(_POINT, [index % series, index])
        index += 1
        if point is None:
            continue
        x, y = point
        inside_card = (
            card
            and card["x"] <= x <= card["x"] + card["width"]
            and (card["y"] <= y <= card["y"] + card["height"])
        )
        if inside_card or not (0 < x < 1280 and 0 < y < 800):
            continue
        page.mouse.move(x, y)
        page.wait_for_timeout(300)
        moved, answered = page.evaluate("[window.__seen.input.at(-1), window.__seen.card.at(-1)]")
        if answered is not None and moved is not None and answered >= moved:
            hovered.append(answered - moved)
        else:
            unanswered += 1
        page.evaluate("window.__seen.card = []")
    box = page.locator("#scatter").bounding_box()
    zoomed: list[float] = []
    for _ in range(zooms):
        page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
        page.evaluate("window.__seen.input = []; window.__seen.frame = []")
        page.mouse.wheel(0, -240)
        page.wait_for_timeout(600)
        wheel, frame = page.evaluate("[window.__seen.input.at(-1), window.__seen.frame.at(-1)]")
        if wheel is not None and frame is not None:
            zoomed.append(frame - wheel)
    return hovered or [float("nan")], zoomed or [float("nan")], unanswered


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=10_000)
    parser.add_argument("--raters", type=int, default=1_000)
    parser.add_argument("--answers", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=60)
    args = parser.parse_args()
    server = start_postgres()
    folder = Path(tempfile.mkdtemp(prefix="closer-workspace-"))
    try:
        url = server.create_database("workspace_bench")
        migrations.upgrade(url)
        settings = Settings(
            data_dir=folder, database_url=url, worker_in_process=False, rate_limits=False
        )
        engine = make_engine(url)
        sessions = make_session_factory(engine)
        with unit_of_work(sessions) as session:
            set_researcher_password(session=session, email=OWNER, password=PASSWORD)
            token = create_token(session=session, researcher_name=OWNER)
        started = time.perf_counter()
        project = seed(url, args.items, args.raters, args.answers)
        print(
            f"seeded {args.items:,} items, {args.raters:,} raters, {args.answers:,} answers "
            f"in {time.perf_counter() - started:.0f} s"
        )
        with unit_of_work(sessions) as session:
            model = training.create_model(
                session=session,
                project=session.get(Project, project),
                name="map",
                kind=ModelKind.tete,
                params={**training.checked_params(ModelKind.tete, {"max_iter": 30})},
                auto_refit=False,
                refit_growth=0.2,
                min_answers=1,
            )
            model_id = model.id
        started = time.perf_counter()
        Worker(sessions).run(until_idle=True)
        print(f"fitted a t-ETE model on them in {time.perf_counter() - started:.0f} s")
        started = time.perf_counter()
        tally_answers(sessions)  # the worker's periodic upkeep, once
        print(f"tallied the answers per hour in {time.perf_counter() - started:.1f} s")
        with unit_of_work(sessions) as session:
            if training.newest_ready(session, model_id) is None:
                latest = training.latest_version(session, model_id)
                raise SystemExit(f"the fit did not finish: {latest.status} {latest.message}")
        engine.dispose()

        bearer = {"Authorization": f"Bearer {token}"}
        with serve_in_thread(settings) as base, httpx.Client(base_url=base, timeout=60) as client:
            login = client.get("/login")
            csrf = re.search(r'name="csrf_token" value="([0-9a-f]+)"', login.text).group(1)
            client.post(
                "/login",
                data={"email": OWNER, "password": PASSWORD, "csrf_token": csrf},
            )
            pairs = [
                ("projects list", "/", "/api/v1/projects"),
                ("overview", f"/projects/{project}", f"/api/v1/projects/{project}"),
                ("overview (htmx refresh)", f"/projects/{project}", f"/api/v1/projects/{project}"),
                (
                    "raters (page of 50)",
                    f"/projects/{project}/raters?sort=answers&order=desc",
                    f"/api/v1/projects/{project}/raters?limit=50",
                ),
                ("settings", f"/projects/{project}/settings", f"/api/v1/projects/{project}/rating"),
                ("uploads", f"/projects/{project}/uploads", f"/api/v1/projects/{project}"),
                ("builds", f"/projects/{project}/builds", f"/api/v1/projects/{project}/builds"),
                ("models", f"/projects/{project}/models", f"/api/v1/projects/{project}/models"),
                (
                    "downloads",
                    f"/projects/{project}/downloads",
                    f"/api/v1/projects/{project}/models",
                ),
                ("tokens", "/tokens", "/api/v1/projects"),
            ]
            print(
                f"\n{'page':<26}{'page p50':>10}{'page p99':>10}{'API p50':>10}{'API p99':>10}"
                f"{'ratio p99':>11}"
            )
            for name, page_path, api_path in pairs:
                headers = {"HX-Request": "true"} if "htmx" in name else None
                page = timed(client, page_path, args.rounds, headers)
                with httpx.Client(base_url=base, timeout=60) as api_client:
                    api = timed(api_client, api_path, args.rounds, bearer)
                print(
                    f"{name:<26}{page['p50']:>9.1f} {page['p99']:>9.1f} {api['p50']:>9.1f} "
                    f"{api['p99']:>9.1f} {page['p99'] / api['p99']:>10.2f}"
                )

            embedding_api = f"/api/v1/projects/{project}/models/{model_id}/embedding"
            fetch = timed(client, embedding_api, 10)
            from playwright.sync_api import sync_playwright

            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(
                    executable_path=chromium_path(), args=CHROMIUM_ARGS
                )
                context = browser.new_context(viewport={"width": 1280, "height": 800})
                context.add_cookies(
                    [{"name": c.name, "value": c.value, "url": base} for c in client.cookies.jar]
                )
                page = context.new_page()
                drawn = []
                for _ in range(5):
                    page.goto(f"{base}/projects/{project}/models/{model_id}/embedding")
                    deadline = time.monotonic() + 30
                    while (
                        page.evaluate("document.getElementById('embedding').dataset.drawnMs")
                        is None
                    ):
                        assert time.monotonic() < deadline
                        time.sleep(0.02)
                    drawn.append(
                        float(page.evaluate("document.getElementById('embedding').dataset.drawnMs"))
                    )
                    shown = page.evaluate("document.getElementById('embedding-status').textContent")
                hovers, zooms, unanswered = interactions(page)
                browser.close()
            print(
                f"\nembedding page, {shown}: drawn {statistics.median(drawn):.0f} ms median, "
                f"{max(drawn):.0f} ms worst of 5 (from script start to the chart's first "
                f"frame, data fetched included); the same embedding as JSON over the API: "
                f"{fetch['p50']:.0f} ms"
            )
            print(
                f"  hover over a point until its card shows: {statistics.median(hovers):.0f} ms "
                f"median, {max(hovers):.0f} ms worst of {len(hovers)}; {unanswered} hovers "
                f"not answered within 300 ms"
            )
            print(
                f"  zoom (a wheel step) until the chart's next frame: "
                f"{statistics.median(zooms):.0f} ms median, {max(zooms):.0f} ms worst of "
                f"{len(zooms)} (from the browser's input event; 200 ms is 'good' responsiveness)"
            )
    finally:
        server.stop()


if __name__ == "__main__":
    main()
