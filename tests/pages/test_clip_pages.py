"""Sounds and videos on the rater pages, in Chromium: each item plays from its own
button, one at a time, by keyboard; the answer waits until every clip was heard to its
end; plays are counted and stored with the answer; the next screen's clips are ready to
play when it shows; axe finds nothing on the screen."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from app.models import Assignment
from tests.pages.test_language_pages import axe_violations
from tests.support.browser import (
    answered,
    screenshots_dir,
    shoot,
    shown_query,
    until,
    until_htmx,
)
from tests.support.links import open_link
from tests.support.media import clip
from tests.support.rating import configure
from tests.support.uploads import upload, zip_bytes

API = "/api/v1"
pytestmark = pytest.mark.one_database  # the page and its scripts: nothing the database changes


@pytest.fixture
def tones(client, auth, project):
    """Six short tones (Ogg Opus) and two short videos (WebM), a session of three."""
    entries = {f"t{n}.ogg": clip("opus", seconds=0.4, pitch=220.0 * (n + 1)) for n in range(6)}
    rows = [f"tone-{n},tone {n + 1},t{n}.ogg" for n in range(6)]
    entries["manifest.csv"] = "key,text,image\n" + "\n".join(rows)
    uploaded = upload(client, auth, project["id"], "items", "tones.zip", zip_bytes(entries))
    assert uploaded.status_code == 201, uploaded.text
    settings = {"answers_per_rater": 3, "attention_rate": 0, "completion_code": "HEARD-3"}
    configure(client, auth, project["id"], **settings)
    return project["id"], open_link(client, auth, project["id"])["public_slug"]


def test_a_rater_hears_each_clip_before_answering_and_the_plays_are_kept(
    app, server, tones, browser, tmp_path
):
    project_id, slug = tones
    shots = screenshots_dir(tmp_path)
    context = browser.new_context(viewport={"width": 1280, "height": 800}, bypass_csp=True)
    page = context.new_page()
    page.goto(f"{server}/r/{slug}")
    page.get_by_role("button", name="Start").press("Enter")
    until_htmx(page)
    players = page.locator("#comparison .play")
    expect(players).to_have_count(3)
    choose = page.locator("#comparison button.choose")
    expect(choose.first).to_be_disabled()
    expect(page.locator(".listen-first")).to_be_visible()
    assert axe_violations(page) == []
    shoot(page, shots / "clips-waiting.png")

    # One at a time: the second's play stops the first.
    players.nth(1).press("Enter")
    until(page, "!document.querySelectorAll('#comparison .media')[1].paused")
    players.nth(2).press("Enter")
    until(page, "document.querySelectorAll('#comparison .media')[1].paused")
    until(page, "!document.querySelectorAll('#comparison .media')[2].paused")
    expect(page.locator("#comparison .clip.heard")).to_have_count(1, timeout=5_000)
    # The answer still waits: two of the three were not heard to their end.
    page.keyboard.press("ArrowLeft")
    assert shown_query(page) is not None and page.locator(".listen-first").is_visible()
    for number in (0, 1):
        players.nth(number).press("Enter")
        expect(page.locator("#comparison .clip.heard")).to_have_count(2 + number, timeout=5_000)
    expect(choose.first).to_be_enabled()
    expect(page.locator(".listen-first")).to_be_hidden()
    shoot(page, shots / "clips-heard.png")
    first = shown_query(page)
    keys = page.locator("#comparison .clip").evaluate_all(
        "(clips) => clips.map(c => c.dataset.key)"
    )
    answered(page, lambda: page.keyboard.press("ArrowLeft"))
    # The next screen's clips came before it showed: ready to play at once.
    ready = page.evaluate(
        "[...document.querySelectorAll('#comparison .media')].map(m => m.readyState)"
    )
    assert ready and min(ready) >= 3, ready
    with app.state.session_factory() as session:
        stored = session.get(Assignment, int(first))
        assert stored.choice == "left"
        # The anchor and the left once each; the right twice (stopped, then heard).
        assert stored.plays == {keys[0]: 1, keys[1]: 2, keys[2]: 1}
    context.close()


def test_without_play_to_end_a_clip_screen_answers_at_once(client, auth, server, tones, browser):
    project_id, slug = tones
    configure(client, auth, project_id, play_to_end=False)
    page = browser.new_context(viewport={"width": 390, "height": 844}, has_touch=True).new_page()
    page.goto(f"{server}/r/{slug}")
    page.get_by_role("button", name="Start").tap()
    until_htmx(page)
    expect(page.locator(".listen-first")).to_have_count(0)
    answered(page, lambda: page.locator("#comparison button.choose").nth(1).tap())
    box = page.locator("#comparison button.choose").last.bounding_box()
    assert box["y"] + box["height"] <= 844  # the whole clip screen fits a phone


@pytest.mark.parametrize(
    ("asked", "kind"),
    [
        ({"judgement": "odd_one_out"}, "webm"),
        (
            {"judgement": "rank", "shown": 4, "picks": 2},
            "weba",
        ),  # sounds in WebM: the file's name says nothing of their kind
    ],
)
def test_every_screen_of_clips_plays_and_passes_axe(
    client, auth, project, server, browser, tmp_path, asked, kind
):
    entries = {f"c{n}.bin": clip(kind, seconds=0.4, pitch=300.0 + 50 * n) for n in range(6)}
    entries["manifest.csv"] = "key,text,image\n" + "\n".join(
        f"clip-{n},clip {n + 1},c{n}.bin" for n in range(6)
    )
    assert (
        upload(client, auth, project["id"], "items", "c.zip", zip_bytes(entries)).status_code == 201
    )
    settings = {"answers_per_rater": 2, "attention_rate": 0, **asked}
    configure(client, auth, project["id"], **settings)
    slug = open_link(client, auth, project["id"])["public_slug"]
    page = browser.new_context(viewport={"width": 1280, "height": 800}, bypass_csp=True).new_page()
    page.goto(f"{server}/r/{slug}")
    page.get_by_role("button", name="Start").press("Enter")
    until_htmx(page)
    players = page.locator("#comparison .play")
    count = players.count()
    assert count == (3 if asked["judgement"] == "odd_one_out" else 5)
    for number in range(count):
        players.nth(number).press("Enter")
        expect(page.locator("#comparison .clip.heard")).to_have_count(number + 1, timeout=5_000)
    assert axe_violations(page) == []
    shoot(page, screenshots_dir(tmp_path) / f"clips-{asked['judgement']}.png")
    page.evaluate(
        """() => document.addEventListener("htmx:afterSwap", () => {
            window.readyAtSwap = [...document.querySelectorAll('#comparison .media')]
                .map((media) => media.readyState);
        }, {once: true})"""
    )
    if asked["judgement"] == "odd_one_out":
        answered(page, lambda: page.keyboard.press("2"))
    else:
        page.keyboard.press("1")
        page.keyboard.press("3")
        answered(page, lambda: page.keyboard.press("Enter"))
    # The next screen's clips came before it showed, as elements of their kind: ready to
    # play the moment it was swapped in.
    until(page, "window.readyAtSwap !== undefined")
    ready = page.evaluate("window.readyAtSwap")
    assert ready and min(ready) >= 3, ready


def test_a_sorting_screen_of_clips_is_heard_then_sorted_by_keyboard(
    client, auth, project, server, browser, tmp_path
):
    """A CompRF build that sorts 4 items a screen, over 40 labelled tones: each pivot
    and item plays from its own button, the sides wait until all were heard, and the
    arrow keys place them."""
    entries = {
        f"t{n}.ogg": clip("opus", seconds=0.3, pitch=(200.0 if n < 20 else 800.0) + 5 * n)
        for n in range(40)
    }
    entries["manifest.csv"] = "key,label,text,image\n" + "\n".join(
        f"tone-{n},{'low' if n < 20 else 'high'},tone {n + 1},t{n}.ogg" for n in range(40)
    )
    project_id = project["id"]
    assert upload(client, auth, project_id, "items", "t.zip", zip_bytes(entries)).status_code == 201
    settings = {"attention_rate": 0, "random_share": 0, "answers_per_rater": 4}
    configure(client, auth, project_id, **settings)
    slug = open_link(client, auth, project_id)["public_slug"]
    build = client.post(
        f"{API}/projects/{project_id}/builds",
        headers=auth,
        json={"n_trees": 1, "random_state": 3, "sort_size": 4},
    )
    assert build.status_code == 201, build.text
    page = browser.new_context(viewport={"width": 1280, "height": 800}, bypass_csp=True).new_page()
    page.goto(f"{server}/r/{slug}")
    page.get_by_role("button", name="Start").press("Enter")
    until_htmx(page)
    # The first query is a random triplet (joining holds no build query): heard, answered.
    for number in range(3):
        page.locator("#comparison .play").nth(number).press("Enter")
        expect(page.locator("#comparison .clip.heard")).to_have_count(number + 1, timeout=5_000)
    page.keyboard.press("ArrowLeft")
    expect(page.locator("#comparison .sortee").first).to_be_visible()
    players = page.locator("#comparison .play")
    count = players.count()
    assert count == 2 + page.locator("#comparison .sortee").count()  # the pivots, the items
    expect(page.locator("#comparison .sortee input[type=radio]").first).to_be_disabled()
    for number in range(count):
        players.nth(number).press("Enter")
        expect(page.locator("#comparison .clip.heard")).to_have_count(number + 1, timeout=5_000)
    assert axe_violations(page) == []
    shoot(page, screenshots_dir(tmp_path) / "clips-sort.png")
    page.locator("body").press("Tab")  # (focus leaves the last Play button)
    for _ in range(count - 2):
        page.keyboard.press("ArrowLeft")
    answered(page, lambda: page.keyboard.press("Enter"))


def _tabbed(page, presses: int) -> list[dict]:
    """What each Tab press focused: its tag, class, text, and its look while focused."""
    seen = []
    for _ in range(presses):
        page.keyboard.press("Tab")
        seen.append(
            page.evaluate(
                """() => {
                    const element = document.activeElement;
                    const style = getComputedStyle(element);
                    const look = [style.outlineStyle, style.outlineWidth, style.borderColor,
                                  style.boxShadow].join("|");
                    element.dataset.focusedLook = look;
                    return {tag: element.tagName, name: element.className || element.id,
                            text: element.textContent.trim().slice(0, 30), look};
                }"""
            )
        )
    return seen


def test_focus_walks_every_control_of_a_clip_screen_and_always_shows(server, tones, browser):
    _, slug = tones
    page = browser.new_context(viewport={"width": 1280, "height": 800}).new_page()
    page.goto(f"{server}/r/{slug}")
    page.get_by_role("button", name="Start").press("Enter")
    until_htmx(page)
    for number in range(3):  # heard, so the Choose buttons take focus too
        page.locator("#comparison .play").nth(number).press("Enter")
        expect(page.locator("#comparison .clip.heard")).to_have_count(number + 1, timeout=5_000)
    page.evaluate("document.activeElement.blur()")
    walked = _tabbed(page, 14)
    # Focus leaves the controls and comes round again (nothing holds it): between two
    # visits to the page itself, the anchor's Play, then each candidate's Play and
    # Choose, in reading order.
    tops = [at for at, step in enumerate(walked) if step["tag"] == "BODY"]
    assert len(tops) >= 2
    lap = [step["name"].split()[0] for step in walked[tops[0] + 1 : tops[1]]]
    assert lap == ["play", "play", "candidate", "play", "candidate"]
    # Each looks otherwise when focused than at rest.
    page.evaluate("document.activeElement.blur()")
    looks = page.evaluate(
        """() => [...document.querySelectorAll('button[data-focused-look]')].map((element) => {
            const style = getComputedStyle(element);
            return [element.dataset.focusedLook, [style.outlineStyle, style.outlineWidth,
                    style.borderColor, style.boxShadow].join("|")];
        })"""
    )
    assert len(looks) == 5 and all(focused != rest for focused, rest in looks), looks
