"""The rating pages in a real browser (Debian's Chromium through Playwright), against a
real server on both databases: a rater answers by mouse, by keyboard and by touch, sees
the completion code and is sent back to the recruiting platform."""

from __future__ import annotations

import os
import time

import pytest
from playwright.sync_api import expect
from sqlalchemy import create_engine, text

from app.models import Assignment, Rater, Triplet
from tests.support.browser import (
    hold_images,
    screenshots_dir,
    shoot,
    stays_put_while_images_arrive,
    until,
    until_htmx,
)
from tests.support.links import open_link
from tests.support.postgres import start_postgres
from tests.support.service import ServiceProcesses, database_with_token, digits_study
from tests.support.uploads import png, zip_bytes

API = "/api/v1"


@pytest.fixture
def study(client, auth, project, server):
    """30 items with images, a build started, 40 answers to a session; the completion
    page sends the rater back to a page of this server (standing in for the platform)."""
    return _shades(client, auth, project["id"], server, build=True)


def _shades(client, auth, project_id: int, server: str, build: bool) -> tuple[int, str]:
    colours = [(40 + 7 * i, 200 - 5 * i, (90 * i) % 256) for i in range(30)]
    manifest = "key,label,image\n" + "\n".join(f"shade-{i},{i % 3},img/{i}.png" for i in range(30))
    archive = zip_bytes(
        {
            "manifest.csv": manifest,
            **{f"img/{i}.png": png(c, (48, 48)) for i, c in enumerate(colours)},
        }
    )
    uploaded = client.post(
        f"{API}/projects/{project_id}/items", headers=auth, files={"file": ("shades.zip", archive)}
    )
    assert uploaded.status_code == 201, uploaded.text
    if build:
        started = client.post(
            f"{API}/projects/{project_id}/builds",
            headers=auth,
            json={"n_trees": 2, "random_state": 0},
        )
        assert started.status_code == 201, started.text
    settings = client.patch(
        f"{API}/projects/{project_id}/rating",
        headers=auth,
        json={
            "answers_per_rater": 40,
            "completion_code": "THANKS-40",
            "completion_url": f"{server}/api/v1/health?back=1",
            "instructions": "Pick the colour closer to the one on top.",
        },
    ).json()
    assert settings["answers_per_rater"] == 40
    return project_id, open_link(client, auth, project_id)["public_slug"]


def current_query(page) -> str:
    return page.locator("#comparison input[name=query_id]").get_attribute("value")


def answer_and_wait(page, act) -> None:
    before = current_query(page)
    act()
    expect(page.locator("#comparison input[name=query_id]")).not_to_have_value(before)


def test_a_rater_answers_by_mouse_and_keyboard_and_gets_the_completion_code(
    app, server, study, browser, tmp_path
):
    project_id, slug = study
    shots = screenshots_dir(tmp_path)
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    page.goto(f"{server}/r/{slug}?PROLIFIC_PID=pw-rater&STUDY_ID=s1&SESSION_ID=x1")
    expect(page.get_by_text("Pick the colour closer to the one on top.")).to_be_visible()
    page.get_by_role("button", name="Start").click()
    expect(page.locator(".progress .count")).to_have_text("0 / 40")
    until_htmx(page)  # scripts load after the page
    shoot(page, shots / "rate-desktop.png")
    # The rating page's own load event comes after its images: on a busy machine, after
    # htmx is there. Counted from here, any load is a comparison that came as a new page.
    page.wait_for_load_state("load")
    page_loads = []
    page.on("load", lambda _: page_loads.append(page.url))

    for number in range(20):  # by mouse, alternating sides
        side = page.locator("#comparison button.candidate").nth(number % 2)
        answer_and_wait(page, side.click)
    expect(page.locator(".progress .count")).to_have_text("20 / 40")
    for number in range(19):  # by keyboard
        answer_and_wait(
            page, lambda n=number: page.keyboard.press(["ArrowLeft", "ArrowRight"][n % 2])
        )
    page.keyboard.press("ArrowRight")  # the 40th answer

    expect(page.locator("#completion-code")).to_have_text("THANKS-40")
    shoot(page, shots / "rate-done-desktop.png")
    assert page_loads == []  # every comparison swapped in without a page load
    page.wait_for_url("**/api/v1/health?back=1", timeout=15_000)  # back to the platform

    with app.state.session_factory() as session:
        rater = session.query(Rater).filter(Rater.project_id == project_id).one()
        assert rater.external_id == "pw-rater" and rater.platform == "prolific"
        assert rater.platform_ids == {
            "PROLIFIC_PID": "pw-rater",
            "STUDY_ID": "s1",
            "SESSION_ID": "x1",
        }
        assert rater.answers == 40 and rater.completed_at is not None
        answered = session.query(Assignment).filter(Assignment.answered_at.is_not(None)).all()
        assert len(answered) == 40
        assert all(a.response_time_ms is not None and a.response_time_ms > 0 for a in answered)
        stored = session.query(Triplet).filter(Triplet.project_id == project_id).count()
        checks = sum(a.purpose == 4 for a in answered)
        assert stored + checks == 40  # one triplet per answer; checks are not triplets


@pytest.mark.one_database  # the page itself: nothing the database changes
def test_the_rating_page_works_on_a_phone(server, study, browser, tmp_path):
    _, slug = study
    shots = screenshots_dir(tmp_path)
    context = browser.new_context(
        viewport={"width": 390, "height": 844},
        device_scale_factor=2,
        is_mobile=True,
        has_touch=True,
    )
    page = context.new_page()
    page.goto(f"{server}/r/{slug}?participant=phone-1")
    page.get_by_role("button", name="Start").tap()
    expect(page.locator(".progress .count")).to_have_text("0 / 40")
    until_htmx(page)
    candidates = page.locator("#comparison button.candidate")
    boxes = [candidates.nth(i).bounding_box() for i in range(2)]
    assert all(
        box["x"] >= 0 and box["x"] + box["width"] <= 390 for box in boxes
    )  # no sideways scroll
    assert abs(boxes[0]["y"] - boxes[1]["y"]) < 1  # side by side, even on a phone
    assert page.locator(".anchor img").bounding_box()["y"] + 10 < boxes[0]["y"]  # anchor on top
    shoot(page, shots / "rate-phone.png")
    image = page.locator(".anchor img").get_attribute("src")
    assert page.request.get(f"{server}{image}").headers["content-type"] == "image/png"
    joined = page.request.post(f"{server}/api/v1/rate/{slug}/raters", data={"participant": "api"})
    token = {"X-Rater-Token": joined.json()["rater_token"]}
    state = page.request.get(f"{server}/api/v1/rate/{slug}/next", headers=token)
    shown = state.json()["comparison"]["anchor"]["image_url"]  # the JSON routes agree
    assert page.request.get(f"{server}{shown}").headers["content-type"] == "image/png"
    for number in range(5):
        answer_and_wait(page, candidates.nth(number % 2).tap)
    expect(page.locator(".progress .count")).to_have_text("5 / 40")
    context.close()


@pytest.mark.one_database  # the page itself; the API's test runs on both databases
def test_a_rater_who_fails_the_checks_gets_their_code_and_is_sent_back(
    client, auth, server, study, browser, tmp_path
):
    project_id, slug = study
    shots = screenshots_dir(tmp_path)
    changed = client.patch(
        f"{API}/projects/{project_id}/rating",
        headers=auth,
        json={
            "attention_rate": 1.0,
            "random_share": 0,
            "min_attention_accuracy": 1.0,
            "quality_min_answers": 1,
            "screened_out_code": "FAILED-CHECK-7",
            "screened_out_url": f"{server}/api/v1/health?screened=1",
        },
    )
    assert changed.status_code == 200, changed.text
    context = browser.new_context(
        viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True, color_scheme="dark"
    )
    page = context.new_page()
    problems = []
    page.on("console", lambda message: message.type == "error" and problems.append(message.text))
    page.goto(f"{server}/r/{slug}?PROLIFIC_PID=careless-1")
    page.get_by_role("button", name="Start").tap()
    expect(page.locator(".progress .count")).to_have_text("0 / 40")
    until_htmx(page)
    anchor = page.locator(".anchor img").get_attribute("src")
    candidates = page.locator("#comparison button.candidate")
    sides = [candidates.nth(i).locator("img").get_attribute("src") for i in range(2)]
    candidates.nth(0 if sides[1] == anchor else 1).tap()  # the side that is not the anchor
    expect(page.locator("#completion-code")).to_have_text("FAILED-CHECK-7")
    expect(page.get_by_role("heading")).to_have_text("Thank you for your time")
    expect(page.get_by_text("Too few of your answers to the check questions")).to_be_visible()
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    shoot(page, shots / "rate-screened-out-phone-dark.png")
    page.wait_for_url("**/api/v1/health?screened=1", timeout=15_000)
    assert problems == []
    context.close()


@pytest.mark.one_database  # the page itself: nothing the database changes
def test_an_unknown_study_link_is_a_page_that_says_so(server, browser):
    page = browser.new_page()
    response = page.goto(f"{server}/r/no-such-study")
    assert response.status == 404
    expect(page.get_by_text("no study at this link")).to_be_visible()


def _new_comparison(page, before: str) -> None:
    """Wait, frame by frame, until a comparison other than `before` is on the page."""
    page.wait_for_function(
        "before => document.querySelector('#comparison input[name=query_id]').value !== before",
        arg=before,
        polling="raf",
    )


@pytest.mark.one_database  # the page itself: nothing the database changes
def test_the_time_to_answer_runs_from_when_the_comparison_appears(app, server, study, browser):
    """A rater who answers a comparison the moment it appears is timed from its appearance
    (htmx settles it later: a clock started then had timed such answers from the previous
    comparison, and gave 0 ms to some); one who looks at it first is timed from when its
    images were drawn."""
    _, slug = study
    # Frame-by-frame waiting runs a script of Playwright's own in the page: allowed here.
    page = browser.new_page(viewport={"width": 1280, "height": 800}, bypass_csp=True)
    page.goto(f"{server}/r/{slug}?participant=timer")
    page.get_by_role("button", name="Start").click()
    until_htmx(page)
    page.evaluate("htmx.config.defaultSettleDelay = 400")  # a slow settle, to make it plain
    # When each comparison entered the page, when each of its images was drawn and when
    # each key reached it, by the page's own clock: on a busy machine a key can reach the
    # page hundreds of milliseconds after Playwright sent it, and that wait is the
    # rater's time too.
    page.evaluate(
        """() => {
            window.swappedAt = []; window.keyedAt = []; window.drawnAt = [];
            // Whether its images were all drawn as it came in (the page preloads them):
            // a load event after such a swap is the cache's, not a drawing.
            document.addEventListener("htmx:afterSwap", () => swappedAt.push([
                performance.now(),
                [...document.querySelectorAll("#comparison img")].every(
                    (image) => image.complete && image.naturalWidth > 0),
            ]));
            document.addEventListener("keydown", () => keyedAt.push(performance.now()), true);
            document.addEventListener("load", (event) => {
                if (event.target.tagName === "IMG") drawnAt.push(performance.now());
            }, true);
        }"""
    )

    def clock_start(key: float) -> float:
        """When the page's clock started for the answer keyed at `key`: the comparison's
        appearance, or its images' drawing if that came later (and before the key)."""
        swaps, drawn = page.evaluate("[swappedAt, drawnAt]")
        appeared, whole = max([(t, w) for t, w in swaps if t < key], default=(0.0, False))
        loaded = [] if whole else [t for t in drawn if appeared <= t < key]
        return max([appeared, *loaded])

    # The page's first comparison came before the recording: answered, not measured.
    warm_up = current_query(page)
    page.keyboard.press("ArrowLeft")
    _new_comparison(page, warm_up)
    thought, at_once, expected = [], [], {}
    for _ in range(3):
        first = current_query(page)
        page.wait_for_timeout(700)  # thinks about this one
        page.keyboard.press("ArrowLeft")
        _new_comparison(page, first)
        key = page.evaluate("keyedAt.at(-1)")
        start = clock_start(key)
        second = current_query(page)
        page.keyboard.press("ArrowRight")  # and answers the next at once
        _new_comparison(page, second)
        at_key = page.evaluate("keyedAt.at(-1)")
        expected[int(second)] = at_key - clock_start(at_key)
        expected[int(first)] = key - start
        thought.append(int(first))
        at_once.append(int(second))
    with app.state.session_factory() as session:
        times = dict(
            session.query(Assignment.id, Assignment.response_time_ms).filter(
                Assignment.id.in_(thought + at_once)
            )
        )
    # Looked at for 700 ms, less what its images took to arrive.
    assert all(500 <= expected[query] < 3000 for query in thought), expected
    # Timed from the moment the comparison appeared (or its images were drawn) to the
    # key: not from the one before (700 ms more), not from htmx settling it (up to 400 ms
    # less), never 0.
    for query, wanted in expected.items():
        assert times[query] > 0 and abs(times[query] - wanted) < 50, (times, expected)


SCREENS = {
    "laptop": {"viewport": {"width": 1366, "height": 657}},
    "phone-landscape": {
        "viewport": {"width": 844, "height": 390},
        "device_scale_factor": 2,
        "is_mobile": True,
        "has_touch": True,
    },
    "phone": {
        "viewport": {"width": 390, "height": 844},
        "device_scale_factor": 2,
        "is_mobile": True,
        "has_touch": True,
    },
}


@pytest.mark.one_database  # the page itself: nothing the database changes
@pytest.mark.parametrize("screen", SCREENS)
def test_the_whole_comparison_is_above_the_fold(server, study, browser, tmp_path, screen):
    _, slug = study
    context = browser.new_context(**SCREENS[screen])
    page = context.new_page()
    failed = []
    page.on("response", lambda response: response.status >= 400 and failed.append(response.url))
    page.goto(f"{server}/r/{slug}?participant=screen-{screen}")
    keys_hint = page.locator(".how .keys-only").first
    if SCREENS[screen].get("has_touch"):
        expect(keys_hint).to_be_hidden()  # no arrow keys on a touch screen
        page.get_by_role("button", name="Start").tap()
    else:
        expect(keys_hint).to_be_visible()
        page.get_by_role("button", name="Start").click()
    expect(page.locator(".progress .count")).to_have_text("0 / 40")
    until_htmx(page)
    until(page, "[...document.images].every(image => image.complete)")
    width, height = SCREENS[screen]["viewport"].values()
    for part in (
        page.locator(".anchor"),
        page.locator("#comparison button.candidate").nth(0),
        page.locator("#comparison button.candidate").nth(1),
    ):
        box = part.bounding_box()
        assert box["x"] >= 0 and box["x"] + box["width"] <= width, (screen, box)
        assert box["y"] >= 0 and box["y"] + box["height"] <= height, (screen, box)
    image = page.locator(".anchor img").bounding_box()
    assert image["height"] >= 60  # still big enough to see
    shoot(page, screenshots_dir(tmp_path) / f"rate-{screen}.png")
    assert failed == []  # the favicon included
    context.close()


@pytest.mark.one_database  # the page itself: nothing the database changes
def test_the_candidate_under_a_resting_pointer_does_not_look_chosen(server, study, browser):
    _, slug = study
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    page.goto(f"{server}/r/{slug}?participant=hover")
    page.get_by_role("button", name="Start").click()
    until_htmx(page)
    candidate = page.locator("#comparison button.candidate").nth(0)
    border = "getComputedStyle(document.querySelectorAll('#comparison .candidate')[0]).borderColor"
    idle = page.evaluate(border)
    box = candidate.bounding_box()
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    page.mouse.move(box["x"] + box["width"] / 2 + 5, box["y"] + box["height"] / 2)
    expect(candidate).to_have_css("border-color", "rgb(61, 154, 87)")  # hover: the choice
    x, y = box["x"] + box["width"] / 2 + 5, box["y"] + box["height"] / 2
    answer_and_wait(page, lambda: page.mouse.click(x, y))
    expect(candidate).to_have_css("border-color", idle)  # the next one: nothing chosen yet
    page.mouse.move(box["x"] + box["width"] / 2 + 20, box["y"] + box["height"] / 2 + 5)
    expect(candidate).to_have_css("border-color", "rgb(61, 154, 87)")


@pytest.mark.one_database  # the page itself: nothing the database changes
@pytest.mark.parametrize("screen", ["laptop", "phone"])
def test_the_comparison_stays_put_while_its_images_arrive(server, study, browser, screen):
    _, slug = study
    context = browser.new_context(**SCREENS[screen])
    page = context.new_page()
    held = hold_images(page)
    page.goto(f"{server}/r/{slug}?participant=slow-images-{screen}")
    page.get_by_role("button", name="Start").click(no_wait_after=True)
    expect(page.locator(".progress .count")).to_have_text("0 / 40")
    expect(page.locator("#comparison button.candidate")).to_have_count(2)
    stays_put_while_images_arrive(page, held, "#comparison :is(.anchor, .candidate, .cant-tell)")
    context.close()


@pytest.mark.one_database  # the page itself: nothing the database changes
def test_every_page_has_a_favicon(server):
    import httpx

    response = httpx.get(f"{server}/favicon.ico")
    assert response.status_code == 200
    assert response.headers["content-type"] == "image/vnd.microsoft.icon"


@pytest.mark.one_database  # the page itself: nothing the database changes
def test_the_pages_run_under_a_strict_content_security_policy(server, study, browser):
    """No inline script or style: the rating pages work, and the browser reports no
    violation of the policy every page is sent with."""
    _, slug = study
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    complaints = []
    page.on("console", lambda message: complaints.append(message.text))
    response = page.goto(f"{server}/r/{slug}?participant=csp")
    policy = response.headers["content-security-policy"]
    assert "script-src 'self';" in policy and "frame-ancestors 'none'" in policy
    assert response.headers["x-content-type-options"] == "nosniff"
    page.get_by_role("button", name="Start").click()
    until_htmx(page)
    for number in range(3):
        answer_and_wait(page, page.locator("#comparison button.candidate").nth(number % 2).click)
    expect(page.locator(".progress .count")).to_have_text("3 / 40")
    assert page.locator(".progress progress").get_attribute("value") == "3"
    assert [text for text in complaints if "Content Security Policy" in text] == []


def test_an_answer_given_offline_arrives_once_and_a_reload_resumes(
    app, server, study, browser, tmp_path
):
    """Issue 15: the browser goes offline for 5 s in the middle of rating, then reloads
    mid-comparison. Every answer arrives exactly once, with the time the rater took
    (not the outage), and the page goes on."""
    project_id, slug = study
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    page = context.new_page()
    page.goto(f"{server}/r/{slug}?participant=offline-1")
    page.get_by_role("button", name="Start").click()
    until_htmx(page)
    for number in range(5):
        answer_and_wait(page, page.locator("#comparison button.candidate").nth(number % 2).click)

    held = current_query(page)
    context.set_offline(True)
    page.locator("#comparison button.candidate").first.click()
    expect(page.locator("#connection")).to_be_visible()
    expect(page.locator("#connection")).to_contain_text("Reconnecting")
    shoot(page, screenshots_dir(tmp_path) / "rate-offline.png")
    page.keyboard.press("ArrowRight")  # a key meanwhile changes nothing: the answer waits
    time.sleep(5)
    assert current_query(page) == held
    context.set_offline(False)
    expect(page.locator("#comparison input[name=query_id]")).not_to_have_value(held, timeout=20_000)
    expect(page.locator("#connection")).to_be_hidden()
    expect(page.locator(".progress .count")).to_have_text("6 / 40")

    shown = current_query(page)
    page.reload()  # mid-comparison: the same comparison comes back
    expect(page.locator("#comparison input[name=query_id]")).to_have_value(shown)
    until_htmx(page)
    for number in range(4):
        answer_and_wait(page, page.locator("#comparison button.candidate").nth(number % 2).click)
    expect(page.locator(".progress .count")).to_have_text("10 / 40")
    context.close()

    with app.state.session_factory() as session:
        rater = session.query(Rater).filter(Rater.external_id == "offline-1").one()
        answered = (
            session.query(Assignment)
            .filter(Assignment.rater_id == rater.id, Assignment.answered_at.is_not(None))
            .all()
        )
        assert rater.answers == 10 and len(answered) == 10
        offline = next(a for a in answered if a.id == int(held))
        assert offline.choice == "left"  # the click, not the key pressed while waiting
        assert offline.response_time_ms < 5000  # the rater's time, not the outage's
        stored = session.query(Triplet).filter(Triplet.project_id == project_id).count()
        assert stored + sum(a.purpose == 4 for a in answered) == 10


def test_the_page_rides_out_a_database_restart(browser, tmp_path):
    """Issue 15's crash suite, in the browser: PostgreSQL stops as in a power cut while a
    rater clicks. The page says it is reconnecting (no error), sends the answer again as
    the 503's Retry-After asks, and once the database is back the answer is stored once
    and rating goes on, without reloading."""
    if os.environ.get("CLOSER_TEST_POSTGRES_URL") or os.environ.get("CLOSER_TEST_SKIP_POSTGRES"):
        pytest.skip("needs a PostgreSQL server of its own to stop and start")
    database = start_postgres(durable=True)
    service = None
    try:
        url, token = database_with_token(database, "page_restart")
        service = ServiceProcesses(url, tmp_path / "data", web_processes=1, workers=0).start()
        _, slug = digits_study(service.url, token, 60, trees=2)
        context = browser.new_context(viewport={"width": 1280, "height": 800})
        page = context.new_page()
        page.goto(f"{service.url}/r/{slug}?participant=restart-1")
        page.get_by_role("button", name="Start").click()
        until_htmx(page)
        for number in range(3):
            answer_and_wait(
                page, page.locator("#comparison button.candidate").nth(number % 2).click
            )
        held = current_query(page)
        database.crash()
        page.locator("#comparison button.candidate").first.click()
        expect(page.locator("#connection")).to_contain_text("Reconnecting")
        shoot(page, screenshots_dir(tmp_path) / "rate-database-restart.png")
        time.sleep(3)
        assert current_query(page) == held
        database.start()
        expect(page.locator("#comparison input[name=query_id]")).not_to_have_value(
            held, timeout=20_000
        )
        expect(page.locator("#connection")).to_be_hidden()
        for number in range(2):
            answer_and_wait(
                page, page.locator("#comparison button.candidate").nth(number % 2).click
            )
        assert "Something went wrong" not in page.locator("#connection").text_content()
        context.close()
        engine = create_engine(url)
        with engine.connect() as connection:
            answered = connection.execute(
                text(
                    "SELECT count(*), count(DISTINCT a.id), max(r.answers) FROM assignments a "
                    "JOIN raters r ON r.id = a.rater_id "
                    "WHERE r.external_id = 'restart-1' AND a.answered_at IS NOT NULL"
                )
            ).one()
            stored = connection.execute(
                text(
                    "SELECT count(*), count(DISTINCT t.query_id) FROM triplets t "
                    "JOIN raters r ON r.id = t.rater_id WHERE r.external_id = 'restart-1'"
                )
            ).one()
        engine.dispose()
        assert tuple(answered) == (6, 6, 6)  # the held answer arrived, once
        assert stored[0] == stored[1]  # no query stored twice
    finally:
        if service is not None:
            service.stop()
        database.stop()


@pytest.mark.one_database  # the pages; the API's test runs on both databases
def test_a_participant_consents_on_a_phone_and_reads_the_debrief_with_the_code(
    client, auth, server, study, browser, tmp_path
):
    """Consent before anything: each statement ticked by a tap, "I agree" refused until
    they are; the task; the debrief shown with the code, and the way back left to the
    participant once they have read it. Another participant declines: the no-consent
    code, and nothing was served to them."""
    project_id, slug = study
    client.patch(
        f"{API}/projects/{project_id}/rating",
        headers=auth,
        json={
            "answers_per_rater": 2,
            "attention_rate": 0,
            "consent": {
                "text": "## What you will do\n\nCompare colours for about **five minutes**.",
                "statements": ["I have read the information above.", "I agree to take part."],
            },
            "no_consent_code": "RETURNED-1",
            "debrief": "## Thank you\n\nThe study measures how people see **shades**.",
        },
    ).raise_for_status()
    shots = screenshots_dir(tmp_path)
    context = browser.new_context(
        viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True
    )
    page = context.new_page()
    page.goto(f"{server}/r/{slug}?participant=consenting")
    page.get_by_role("button", name="Start").tap()
    expect(page.get_by_role("heading", name="What you will do")).to_be_visible()
    agree = page.get_by_role("button", name="I agree")
    assert agree.bounding_box()["y"] + agree.bounding_box()["height"] <= 844  # no scrolling
    shoot(page, shots / "consent-phone.png")
    agree.tap()
    expect(page.get_by_role("alert")).to_contain_text("Tick each statement")
    for statement in ("I have read the information above.", "I agree to take part."):
        page.get_by_label(statement).tap()
    page.get_by_role("button", name="I agree").tap()
    until_htmx(page)
    candidates = page.locator("#comparison button.candidate")
    answer_and_wait(page, candidates.nth(0).tap)
    candidates.nth(1).tap()  # the last answer: the code, not another comparison
    expect(page.locator("#completion-code")).to_have_text("THANKS-40")
    expect(page.get_by_role("heading", name="Thank you", exact=True)).to_be_visible()
    expect(page.locator(".debrief strong")).to_have_text("shades")
    shoot(page, shots / "debrief-phone.png", full_page=True)
    time.sleep(5)  # the redirect without a debrief comes after 4 s: here it waits for them
    assert "/r/" in page.url
    expect(page.get_by_role("link", name="go back to finish")).to_be_visible()

    other = browser.new_page(viewport={"width": 1280, "height": 800})
    other.goto(f"{server}/r/{slug}?participant=declining")
    other.get_by_role("button", name="Start").click()
    # the shot waits for the consent page: one taken while it is still loading fails
    expect(other.get_by_role("heading", name="What you will do")).to_be_visible()
    shoot(other, shots / "consent-desktop.png")
    other.get_by_role("button", name="I do not agree").click()
    expect(other.locator("#completion-code")).to_have_text("RETURNED-1")
    expect(other.get_by_text("You chose not to take part")).to_be_visible()
    listed = client.get(f"{API}/projects/{project_id}/participants", headers=auth).json()
    assert {p["participant"]: p["outcome"] for p in listed} == {
        "consenting": "completed",
        "declining": "declined_consent",
    }
    context.close()


@pytest.mark.one_database  # the pages; the API's test runs on both databases
def test_a_participant_answers_the_questionnaire_after_the_task_on_a_phone(
    client, auth, server, study, browser, tmp_path
):
    """After the last comparison: "a few questions", each problem beside its question,
    then the completion code."""
    project_id, slug = study
    client.patch(
        f"{API}/projects/{project_id}/rating",
        headers=auth,
        json={
            "answers_per_rater": 1,
            "attention_rate": 0,
            "questionnaire": {
                "when": "after",
                "questions": [
                    {"name": "age", "kind": "number", "prompt": "Your age?"},
                    {
                        "name": "hand",
                        "kind": "choice",
                        "prompt": "Your writing hand?",
                        "options": ["left", "right"],
                    },
                    {
                        "name": "effort",
                        "kind": "likert",
                        "prompt": "How hard was it?",
                        "options": ["1", "2", "3", "4", "5"],
                    },
                    {
                        "name": "notes",
                        "kind": "text",
                        "prompt": "Anything else?",
                        "required": False,
                    },
                ],
            },
        },
    ).raise_for_status()
    shots = screenshots_dir(tmp_path)
    context = browser.new_context(
        viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True
    )
    page = context.new_page()
    page.goto(f"{server}/r/{slug}?participant=asked")
    page.get_by_role("button", name="Start").tap()
    until_htmx(page)
    page.locator("#comparison button.candidate").first.tap()
    expect(page.get_by_role("heading", name="Nearly done")).to_be_visible()
    page.get_by_role("link", name="Continue").tap()
    expect(page.get_by_role("heading", name="A few questions")).to_be_visible()
    page.get_by_role("button", name="Continue").tap()
    expect(page.locator("#q-age-error")).to_have_text("An answer is required")
    expect(page.locator("#q-notes-error")).to_have_count(0)  # optional
    page.get_by_label("Your age?").fill("thirty")
    page.get_by_label("right").tap()
    page.get_by_label("4").tap()
    page.get_by_role("button", name="Continue").tap()
    expect(page.locator("#q-age-error")).to_have_text("Must be a number")
    shoot(page, shots / "questionnaire-phone.png", full_page=True)
    page.get_by_label("Your age?").fill("31")
    page.get_by_role("button", name="Continue").tap()
    expect(page.locator("#completion-code")).to_have_text("THANKS-40")
    listed = client.get(f"{API}/projects/{project_id}/participants", headers=auth).json()
    assert listed[0]["questionnaire"] == {"age": 31, "hand": "right", "effort": "4", "notes": None}
    context.close()


@pytest.mark.one_database  # the page; the API's test runs on both databases
def test_a_break_between_blocks_holds_the_next_comparison_until_it_ends(
    app, client, auth, server, study, browser, tmp_path
):
    """Two blocks of two: after the second answer a break shows, the keys answer
    nothing, "Start block 2" waits for the shortest break, and the next answer is timed
    from when the comparison showed, not from the break."""
    project_id, slug = study
    client.patch(
        f"{API}/projects/{project_id}/rating",
        headers=auth,
        json={"answers_per_rater": 4, "attention_rate": 0, "blocks": 2, "break_seconds": 2},
    ).raise_for_status()
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    page.goto(f"{server}/r/{slug}?participant=resting")
    page.get_by_role("button", name="Start").click()
    until_htmx(page)
    expect(page.locator(".progress .count")).to_have_text("0 / 4 · block 1 of 2")
    for _ in range(2):
        answer_and_wait(page, lambda: page.keyboard.press("ArrowLeft"))
    expect(page.get_by_role("heading", name="Time for a break")).to_be_visible()
    expect(page.locator("#comparison .candidate").first).to_be_hidden()
    start = page.get_by_role("button", name="Start block 2")
    expect(start).to_be_disabled()
    page.keyboard.press("ArrowLeft")  # answers nothing during a break
    shoot(page, screenshots_dir(tmp_path) / "break-desktop.png")
    expect(start).to_be_enabled(timeout=5_000)
    time.sleep(0.5)
    start.click()
    expect(page.locator(".progress .count")).to_have_text("2 / 4 · block 2 of 2")
    candidate = page.locator("#comparison button.candidate").first
    expect(candidate).to_be_visible()
    time.sleep(0.3)
    answer_and_wait(page, candidate.click)
    with app.state.session_factory() as session:
        times = [
            a.response_time_ms
            for a in session.query(Assignment).order_by(Assignment.id)
            if a.answered_at is not None
        ]
    assert len(times) == 3
    assert 300 <= times[2] < 2_000, times  # from the comparison, not from the break


@pytest.mark.one_database  # the page itself; the timing is the browser's
def test_the_time_to_answer_starts_when_the_images_are_drawn(app, server, study, browser):
    """On a slow link the comparison's images come after the comparison: the rater's
    time runs from when they are drawn, not from when the empty boxes appeared."""
    _, slug = study
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    held = hold_images(page)
    page.goto(f"{server}/r/{slug}?participant=slow-link")
    page.get_by_role("button", name="Start").click(no_wait_after=True)
    expect(page.locator("#comparison button.candidate")).to_have_count(2)
    until_htmx(page)
    query = current_query(page)
    page.wait_for_timeout(1_000)  # the images still on their way
    for route in held:
        route.continue_()
    page.unroute("**/media/**")
    until(page, "[...document.images].every(image => image.complete && image.naturalWidth)")
    page.wait_for_timeout(300)
    answer_and_wait(page, lambda: page.keyboard.press("ArrowLeft"))
    with app.state.session_factory() as session:
        timed = session.get(Assignment, int(query)).response_time_ms
    assert 250 <= timed < 900, timed  # not the 1.3 s since the empty comparison appeared


@pytest.mark.one_database  # the pages; the API's test runs on both databases
def test_the_whole_path_works_with_javascript_off(client, auth, server, study, browser):
    """Consent, practice, a comparison, a break, the questionnaire and the debrief, as plain
    forms: a browser without scripts goes through the whole study."""
    project_id, slug = study
    client.patch(
        f"{API}/projects/{project_id}/rating",
        headers=auth,
        json={
            "answers_per_rater": 2,
            "attention_rate": 0,
            "blocks": 2,
            "consent": {"text": "You compare colours.", "statements": ["I agree."]},
            "questionnaire": {
                "when": "after",
                "questions": [
                    {
                        "name": "hand",
                        "kind": "choice",
                        "prompt": "Your hand?",
                        "options": ["left", "right"],
                    }
                ],
            },
            "debrief": "The study measures **shades**.",
            "practice": {
                "trials": [{"items": ["shade-0", "shade-1", "shade-20"], "answer": ["shade-1"]}]
            },
        },
    ).raise_for_status()
    context = browser.new_context(java_script_enabled=False)
    page = context.new_page()
    page.goto(f"{server}/r/{slug}?participant=no-scripts")
    page.get_by_role("button", name="Start").click()
    page.get_by_label("I agree.").check()
    page.get_by_role("button", name="I agree").click()
    expect(page.locator(".progress .count")).to_have_text("Practice 1 of 1")
    page.locator("#comparison button.candidate").first.click()  # shade-1: right
    expect(page.locator(".feedback-screen")).to_contain_text("Correct!")
    expect(page.locator(".progress .count")).to_have_text("0 / 2 · block 1 of 2")
    page.locator("#comparison button.candidate").first.click()  # shown beside it
    expect(page.get_by_role("heading", name="Time for a break")).to_be_visible()
    page.locator("#comparison button.candidate").first.click()  # shown beside it
    # The answer's page load lands on the questionnaire itself.
    expect(page.get_by_role("heading", name="A few questions")).to_be_visible()
    page.get_by_label("right").check()
    page.get_by_role("button", name="Continue").click()
    expect(page.locator("#completion-code")).to_have_text("THANKS-40")
    expect(page.locator(".debrief strong")).to_have_text("shades")
    listed = client.get(f"{API}/projects/{project_id}/participants", headers=auth).json()
    assert listed[0]["questionnaire"] == {"hand": "right"} and listed[0]["answers"] == 2
    context.close()


@pytest.mark.one_database  # the page; the API's test runs on both databases
def test_practice_shows_feedback_before_the_next_screen(
    app, client, auth, server, study, browser, tmp_path
):
    """Two practice screens: a wrong tap shows what was expected and holds the next
    screen until "Next practice screen"; the task starts after the last feedback, and
    the practice never counts."""
    project_id, slug = study
    client.patch(
        f"{API}/projects/{project_id}/rating",
        headers=auth,
        json={
            "answers_per_rater": 2,
            "attention_rate": 0,
            "practice": {
                "trials": [
                    {"items": ["shade-0", "shade-1", "shade-20"], "answer": ["shade-1"]},
                    {"items": ["shade-5", "shade-25", "shade-6"], "answer": ["shade-6"]},
                ]
            },
        },
    ).raise_for_status()
    for size, name in (
        ({"width": 1280, "height": 800}, "desktop"),
        ({"width": 390, "height": 844}, "phone"),
    ):
        page = browser.new_page(viewport=size)
        page.goto(f"{server}/r/{slug}?participant=practising-{name}")
        page.get_by_role("button", name="Start").click()
        until_htmx(page)
        expect(page.locator(".progress .count")).to_have_text("Practice 1 of 2")
        answer_and_wait(page, lambda: page.keyboard.press("ArrowRight"))  # wrong: shade-20
        feedback = page.locator(".feedback-screen")
        expect(feedback).to_contain_text("Not quite: the expected answer was this one.")
        expect(feedback.locator(".expected-items img")).to_have_count(1)
        expect(page.locator("#comparison .candidate").first).to_be_hidden()
        shoot(page, screenshots_dir(tmp_path) / f"practice-feedback-{name}.png")
        page.get_by_role("button", name="Next practice screen").click()
        expect(page.locator(".progress .count")).to_have_text("Practice 2 of 2")
        right = page.locator('#comparison .candidate[data-key="shade-6"]')
        answer_and_wait(page, right.click)
        expect(feedback).to_contain_text("Correct!")
        page.get_by_role("button", name="Start the task").click()
        expect(page.locator(".progress .count")).to_have_text("0 / 2")
        answer_and_wait(page, lambda: page.keyboard.press("ArrowLeft"))
        expect(page.locator(".progress .count")).to_have_text("1 / 2")
        page.close()
    listed = client.get(f"{API}/projects/{project_id}/participants", headers=auth).json()
    assert [(p["answers"], p["practice_answered"], p["practice_correct"]) for p in listed] == [
        (1, 2, 1),
        (1, 2, 1),
    ]


# A slow link: 150 ms each way, 1.5 Mbit/s.
SLOW_LINK = {
    "offline": False,
    "latency": 150,
    "downloadThroughput": 1_500_000 / 8,
    "uploadThroughput": 750_000 / 8,
}

# Whether every image of the comparison was drawn the moment it was swapped in.
WHOLE_ON_SWAP = """() => {
    window.wholeOnSwap = [];
    document.addEventListener("htmx:afterSwap", () => {
        const images = [...document.querySelectorAll("#comparison img")];
        wholeOnSwap.push(images.length > 0 && images.every(i => i.complete && i.naturalWidth > 0));
    });
}"""


@pytest.mark.one_database  # the page itself; the timing is the browser's
def test_the_next_screen_arrives_with_its_images_drawn(server, study, browser):
    """Each answer's next comparison replaces the current one only once its images are
    decoded: never a blank box, even when the images are slow to come."""
    _, slug = study
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    page.goto(f"{server}/r/{slug}?participant=whole-screens")
    page.get_by_role("button", name="Start").click()
    until_htmx(page)
    page.evaluate(WHOLE_ON_SWAP)
    slow = page.context.new_cdp_session(page)
    slow.send("Network.enable")
    for answered in range(8):
        if answered == 4:  # then a slow link
            slow.send("Network.emulateNetworkConditions", SLOW_LINK)
        answer_and_wait(page, lambda: page.keyboard.press("ArrowLeft"))
    assert page.evaluate("wholeOnSwap") == [True] * 8


def test_the_next_screens_images_load_while_the_current_one_is_answered(
    request, client, auth, project, server, browser
):
    """Without a build, each next comparison is drawn as the one before it is served:
    the page fetches its images while the rater looks at the current one, so every
    image of the next screen reached the browser before the answer was sent, on a local
    link and on a slow one."""
    _, slug = _shades(client, auth, project["id"], server, build=False)
    served = request.node.served_requests
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    page.goto(f"{server}/r/{slug}?participant=ahead")
    page.get_by_role("button", name="Start").click()
    until_htmx(page)
    page.evaluate(WHOLE_ON_SWAP)
    link = page.context.new_cdp_session(page)
    link.send("Network.enable")

    def fetched() -> set[str]:
        return {what.split(" ", 1)[1] for _, what, status, _ in served.done if status == 200}

    for answered in range(8):
        if answered == 4:
            link.send("Network.emulateNetworkConditions", SLOW_LINK)
        ahead = page.locator('#comparison .upcoming[data-kind="image"]').evaluate_all(
            "(hints) => hints.map((hint) => hint.dataset.src)"
        )
        assert len(ahead) >= 2  # an attention check shows two items, the rest three
        deadline = time.monotonic() + 15
        while not set(ahead) <= fetched():  # the rater looks at the screen meanwhile
            assert time.monotonic() < deadline, (ahead, served.report())
            time.sleep(0.02)
        before = len(served.done)
        answer_and_wait(page, lambda: page.keyboard.press("ArrowLeft"))
        shown = page.locator("#comparison img").evaluate_all(
            "(images) => images.map((image) => new URL(image.src).pathname)"
        )
        assert set(shown) == set(ahead)
        # The answer went out, the next screen came, and none of its images was asked for.
        asked_since = {what for _, what, _, _ in served.done[before:]}
        assert not {f"GET {path}" for path in shown} & asked_since, asked_since
    assert page.evaluate("wholeOnSwap") == [True] * 8
