"""The jsPsych plugin (clients/jspsych) in Chromium, as a lab runs it: jsPsych from the
npm registry, the lab's page served from another origin than Closer's, the participant
answering each screen with clicks until the session is over; its answers are stored as
any rater's, and the page ends with the completion code. A triplet, an odd-one-out and a
"2 of 4" rank study, on both databases' answer paths."""

from __future__ import annotations

import functools
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from playwright.sync_api import expect

from app.main import create_app
from app.models import Judgement, Rater
from tests.support.browser import DESKTOP, serve_in_thread
from tests.support.links import open_link
from tests.support.screens import rows_of, set_rating
from tests.support.uploads import upload

REPO = Path(__file__).resolve().parents[2]
API = "/api/v1"


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture
def lab_site():
    """The lab's own web server: the repository's files (the plugin, its demo page and
    node_modules' jsPsych) on an origin of their own."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(REPO)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


WORDS = "key,text\n" + "".join(f"w{i},word {i}\n" for i in range(8))


def _study(app, auth, items: str, build: dict | None = None, **rating) -> tuple[int, str]:
    """A project of `items` (a CSV), rated as `rating` says, its build started where one
    is given, and its link open: (its id, the link's slug)."""
    with TestClient(app) as client:
        pid = client.post(f"{API}/projects", json={"name": "lab"}, headers=auth).json()["id"]
        assert upload(client, auth, pid, "items", "items.csv", items).status_code == 201
        rated = set_rating(client, auth, pid, attention_rate=0, **rating)
        assert rated.status_code == 200, rated.text
        if build is not None:
            built = client.post(f"{API}/projects/{pid}/builds", headers=auth, json=build)
            assert built.status_code == 201, built.text
        return pid, open_link(client, auth, pid)["public_slug"]


@pytest.mark.parametrize(
    ("judgement", "shape"),
    [("triplet", {}), ("odd_one_out", {}), ("rank", {"shown": 4, "picks": 2})],
)
def test_a_jspsych_timeline_runs_a_closer_study_to_its_code(
    settings, auth, lab_site, browser, judgement, shape
):
    served = settings.model_copy(update={"rater_origins": lab_site})
    app = create_app(served)
    pid, slug = _study(
        app,
        auth,
        WORDS,
        judgement=judgement,
        answers_per_rater=3,
        completion_code="JSPSYCH-OK",
        **shape,
    )
    with serve_in_thread(served) as closer:
        page = browser.new_page(viewport=DESKTOP)
        failed = []
        page.on(
            "response",
            lambda response: (
                response.status >= 400
                and not response.url.endswith("/favicon.ico")
                and failed.append(f"{response.status} {response.url}")
            ),
        )
        page.on("pageerror", lambda error: failed.append(str(error)))
        page.goto(
            f"{lab_site}/clients/jspsych/demo.html?server={closer}&study={slug}&participant=P-7"
        )
        picks = shape.get("picks", 1)
        for _ in range(3):
            first = page.locator(".closer-trial")
            expect(first.locator(".closer-item").first).to_be_visible()
            progress = first.locator(".closer-progress").text_content()
            for index in range(1 if judgement == "triplet" else picks):
                first.locator(".closer-item").nth(index).click()
            expect(page.locator(".closer-progress, #closer-done").first).not_to_have_text(progress)
        expect(page.locator("#closer-done")).to_have_text(
            "Thank you! Your completion code: JSPSYCH-OK"
        )
        result = page.evaluate("window.closerResult")
    assert failed == []
    assert result["complete"] is True and result["answered"] == 3
    assert [screen["format"] for screen in result["screens"]] == [judgement] * 3
    (rater,) = rows_of(app, Rater, pid)
    assert rater.external_id == "P-7" and rater.answers == 3 and rater.completed_at
    if judgement != "triplet":
        judgements = rows_of(app, Judgement, pid)
        assert len(judgements) == 3 and all(len(row.chosen) == picks for row in judgements)
    app.state.engine.dispose()


def test_only_the_raters_api_answers_the_labs_origin(settings):
    """Browsers let the lab's page call the raters' API, and nothing else of Closer's;
    another origin gets no permission at all."""
    lab = "https://jatos.lab.example"
    app = create_app(settings.model_copy(update={"rater_origins": f"{lab}, https://other.example"}))
    preflight = {
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "content-type,x-rater-token",
    }
    with TestClient(app) as client:
        allowed = client.options(
            f"{API}/rate/some-study/answers", headers={"Origin": lab, **preflight}
        )
        assert allowed.status_code == 200
        assert allowed.headers["access-control-allow-origin"] == lab
        assert "x-rater-token" in allowed.headers["access-control-allow-headers"].lower()
        stranger = client.options(
            f"{API}/rate/some-study/answers",
            headers={"Origin": "https://evil.example", **preflight},
        )
        assert "access-control-allow-origin" not in stranger.headers
        researchers = client.get(f"{API}/projects", headers={"Origin": lab})
        assert "access-control-allow-origin" not in researchers.headers
    app.state.engine.dispose()


def test_practice_feedback_and_a_break_between_blocks_show_in_the_trial(
    settings, auth, lab_site, browser
):
    served = settings.model_copy(update={"rater_origins": lab_site})
    app = create_app(served)
    pid, slug = _study(
        app,
        auth,
        WORDS,
        answers_per_rater=2,
        blocks=2,
        break_seconds=1,
        practice={"trials": [{"items": ["w0", "w1", "w7"], "answer": ["w1"]}]},
    )
    with serve_in_thread(served) as closer:
        page = browser.new_page(viewport=DESKTOP)
        page.goto(f"{lab_site}/clients/jspsych/demo.html?server={closer}&study={slug}")
        seen = []
        for _ in range(12):
            page.wait_for_selector(".closer-item, .closer-feedback, .closer-break, #closer-done")
            if page.locator("#closer-done").count():
                break
            if page.locator(".closer-feedback").count():
                seen.append(page.locator(".closer-feedback").text_content())
                next_button = page.get_by_role("button", name="Next")
                next_button.click()
                expect(next_button).to_have_count(0)
            elif page.locator(".closer-break").count():
                seen.append(page.locator(".closer-break").text_content())
                continue_button = page.get_by_role("button", name="Continue")
                expect(continue_button).to_be_disabled()  # a second at least
                expect(continue_button).to_be_enabled(timeout=3000)
                continue_button.click()
                expect(continue_button).to_have_count(0)
            else:
                item = page.locator(".closer-item").first.element_handle()
                item.click()
                item.wait_for_element_state("hidden")  # the next screen came
        expect(page.locator("#closer-done")).to_contain_text("Thank you!")
        result = page.evaluate("window.closerResult")
    assert seen[0] in ("Correct!",) or seen[0].startswith("Not quite")
    assert seen[1] == "Block 1 of 2 is done: take a break."
    assert result["complete"] is True and result["answered"] == 2 and len(result["screens"]) == 3
    (rater,) = rows_of(app, Rater, pid)
    assert rater.answers == 2 and rater.practice_answered == 1
    app.state.engine.dispose()


def test_a_sorting_build_is_answered_in_the_trial(settings, auth, lab_site, browser):
    """A CompRF build that asks on sorting screens: each item goes with a pivot, then
    Done; the answer is one judgement with a triplet per item."""
    served = settings.model_copy(update={"rater_origins": lab_site})
    app = create_app(served)
    line = "key,label,features\n" + "".join(
        f"p{n},{'low' if n < 10 else 'high'},{n}\n" for n in range(20)
    )
    build = {"n_trees": 1, "random_state": 0, "sort_size": 4}
    pid, slug = _study(app, auth, line, build, answers_per_rater=3, random_share=0)
    with serve_in_thread(served) as closer:
        page = browser.new_page(viewport=DESKTOP)
        page.goto(f"{lab_site}/clients/jspsych/demo.html?server={closer}&study={slug}")
        sorted_screens = 0
        for _ in range(3):
            page.wait_for_selector(".closer-item")
            rows = page.locator(".closer-sort-row")
            if rows.count():
                sorted_screens += 1
                expect(page.locator(".closer-pivots .closer-reference")).to_have_count(2)
                done = page.get_by_role("button", name="Done")
                expect(done).to_be_disabled()
                for index in range(rows.count()):
                    rows.nth(index).get_by_role("button", name="with the left one").click()
                expect(done).to_be_enabled()
                first = rows.first.element_handle()
                done.click()
            else:
                first = page.locator(".closer-item").first.element_handle()
                first.click()
            first.wait_for_element_state("hidden")
        expect(page.locator("#closer-done")).to_contain_text("Thank you!")
        result = page.evaluate("window.closerResult")
    assert sorted_screens == 2  # after the random triplet a new rater is served first
    assert [screen["format"] for screen in result["screens"]].count("sort") == sorted_screens
    judgements = [row for row in rows_of(app, Judgement, pid) if row.format.name == "sort"]
    assert len(judgements) == sorted_screens
    app.state.engine.dispose()
