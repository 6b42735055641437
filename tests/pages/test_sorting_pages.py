"""A CompRF build's sorting screens in a real browser: the node's items placed towards a
pivot by tap and by the arrow keys, the last placement taken back with Backspace, sent
with Submit or Enter; a sorting screen of 8 or 12 items fits a phone and a laptop
without scrolling."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect
from sqlalchemy import select

from app.models import Item, Judgement
from tests.pages.test_screen_pages import SCREENS, _query
from tests.pages.test_screen_pages import _study as screen_study
from tests.support.browser import (
    hold_images,
    screenshots_dir,
    shoot,
    stays_put_while_images_arrive,
    until,
    until_htmx,
)
from tests.support.uploads import coloured_squares

API = "/api/v1"


def _study(client, auth, project_id: int, sort_size: int, **rating) -> str:
    """40 labelled coloured squares and a running build that sorts; the public slug."""
    slug = screen_study(
        client,
        auth,
        project_id,
        items=coloured_squares(40, labels=["warm"] * 20 + ["cool"] * 20),
        **{"random_share": 0, "completion_code": "SORTED", **rating},
    )
    build = client.post(
        f"{API}/projects/{project_id}/builds",
        headers=auth,
        json={"n_trees": 2, "random_state": 3, "sort_size": sort_size},
    )
    assert build.status_code == 201, build.text
    return slug


def _to_sorting_screen(page, server: str, slug: str, tap: bool = False) -> None:
    """Join, and answer the first query (a random triplet: joining holds no build query)."""
    page.goto(f"{server}/r/{slug}")
    start = page.get_by_role("button", name="Start")
    start.tap() if tap else start.click()
    page.wait_for_url("**/rate")
    until_htmx(page)
    page.wait_for_load_state("load")
    left = page.locator('#comparison button[value="left"]')
    left.tap() if tap else left.click()
    expect(page.locator("#comparison .sortee").first).to_be_visible()


def _keys(page) -> list[str]:
    return page.locator("#comparison .sortee").evaluate_all(
        "cards => cards.map(c => c.dataset.key)"
    )


def _stored(app, project_id: int) -> list[tuple[list[str], list[str], int | None]]:
    with app.state.session_factory() as session:
        keys = dict(session.execute(select(Item.id, Item.key)).all())
        rows = session.scalars(
            select(Judgement).where(Judgement.project_id == project_id).order_by(Judgement.id)
        ).all()
        return [([keys[i] for i in row.shown], row.chosen, row.response_time_ms) for row in rows]


def test_a_sorting_screen_is_placed_by_tap_and_by_arrow_keys_with_undo(
    app, client, auth, project, server, browser, tmp_path
):
    slug = _study(client, auth, project["id"], sort_size=4, answers_per_rater=3)
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    _to_sorting_screen(page, server, slug)
    loads = []
    page.on("load", lambda _: loads.append(page.url))
    sortees = page.locator("#comparison .sortee")
    send = page.locator("#comparison .send-sides")
    expect(sortees).to_have_count(4)
    expect(page.locator("#comparison .pivot")).to_have_count(2)
    expect(send).to_be_disabled()
    expect(sortees.nth(0)).to_have_class(re.compile(r"\bcurrent\b"))

    # By mouse: the second item right, the first left (the highlight moves on), then keys.
    first = _keys(page)
    sortees.nth(1).locator(".side-right").click()
    expect(sortees.nth(1)).to_have_class(re.compile(r"\bto-right\b"))
    sortees.nth(0).locator(".side-left").click()
    expect(sortees.nth(2)).to_have_class(re.compile(r"\bcurrent\b"))
    page.keyboard.press("ArrowLeft")  # the third
    page.keyboard.press("ArrowLeft")  # the fourth...
    page.keyboard.press("Backspace")  # ...taken back
    expect(page.locator("#comparison .sorted-count")).to_have_text("3")
    expect(send).to_be_disabled()
    page.keyboard.press("ArrowRight")
    expect(send).to_be_enabled()
    shoot(page, screenshots_dir(tmp_path) / "sort-placed.png")
    before = _query(page)
    page.keyboard.press("Enter")
    expect(page.locator("#comparison input[name=query_id]")).not_to_have_value(before)

    # The next screen by taps alone, changing one's mind before Submit.
    second = _keys(page)
    for at in range(len(second)):
        sortees.nth(at).locator(".side-left").click()
    sortees.nth(0).locator(".side-right").click()
    before = _query(page)
    send.click()
    expect(page.locator("#completion-code")).to_have_text("SORTED")
    assert loads == []  # every screen swapped in without a page load

    stored = _stored(app, project["id"])
    assert [shown for shown, _, _ in stored] == [first, second]
    assert [sides for _, sides, _ in stored] == [
        ["left", "right", "left", "right"],
        ["right"] + ["left"] * (len(second) - 1),
    ]
    assert all(time is not None and time > 0 for _, _, time in stored)


def test_a_sorting_screen_answers_without_scripts_and_names_a_missing_side(
    app, client, auth, project, server, browser
):
    slug = _study(client, auth, project["id"], sort_size=3, allow_cant_tell=True)
    context = browser.new_context(java_script_enabled=False)
    page = context.new_page()
    page.goto(f"{server}/r/{slug}")
    page.get_by_role("button", name="Start").click()
    page.locator('#comparison button[value="left"]').click()
    sortees = page.locator("#comparison .sortee")
    expect(sortees).to_have_count(3)
    sortees.nth(0).locator(".side-left").click()
    sortees.nth(1).locator(".side-cant").click()
    page.locator("#comparison .send-sides").click()  # the third has no side
    expect(page.locator("#comparison .error")).to_contain_text("Put every item")
    assert _stored(app, project["id"]) == []
    sortees.nth(0).locator(".side-left").click()
    sortees.nth(1).locator(".side-cant").click()
    sortees.nth(2).locator(".side-right").click()
    page.locator("#comparison .send-sides").click()
    expect(page.locator("#comparison .sortee").first).to_be_visible()
    [(_, sides, _)] = _stored(app, project["id"])
    assert sides == ["left", "cant_tell", "right"]
    context.close()


@pytest.mark.one_database  # the page itself: nothing the database changes
@pytest.mark.parametrize("screen", SCREENS)
@pytest.mark.parametrize("size", [8, 12])
def test_every_sorting_screen_fits_without_scrolling(
    client, auth, project, server, browser, tmp_path, screen, size
):
    slug = _study(client, auth, project["id"], sort_size=size, allow_cant_tell=size == 12)
    context = browser.new_context(**SCREENS[screen])
    page = context.new_page()
    _to_sorting_screen(page, server, slug, tap=bool(SCREENS[screen].get("has_touch")))
    expect(page.locator("#comparison .sortee")).to_have_count(size)
    until(page, "[...document.images].every(image => image.complete)")
    width, height = SCREENS[screen]["viewport"].values()
    parts = [page.locator("#comparison .sortee").nth(i) for i in range(size)]
    parts += [page.locator(".pivot").nth(0), page.locator(".pivot").nth(1)]
    parts.append(page.locator(".send-sides"))
    for part in parts:
        box = part.bounding_box()
        assert box["x"] >= 0 and box["x"] + box["width"] <= width, (size, screen, box)
        assert box["y"] >= 0 and box["y"] + box["height"] <= height, (size, screen, box)
    images = page.locator("#comparison .sortee img")
    smallest = min(images.nth(i).bounding_box()["height"] for i in range(images.count()))
    assert smallest >= 36, smallest  # still big enough to see
    sides = page.locator("#comparison .sortee .side-left")
    narrowest = min(sides.nth(i).bounding_box()["width"] for i in range(sides.count()))
    assert narrowest >= 22, narrowest  # and to tap
    shoot(page, screenshots_dir(tmp_path) / f"sort-{size}-{screen}.png")
    context.close()


@pytest.mark.one_database  # the page itself: nothing the database changes
def test_a_sorting_screen_stays_put_while_its_images_arrive(client, auth, project, server, browser):
    slug = _study(client, auth, project["id"], sort_size=8)
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    page.goto(f"{server}/r/{slug}")
    page.get_by_role("button", name="Start").click()
    until_htmx(page)
    page.wait_for_load_state("load")
    held = hold_images(page)
    page.locator('#comparison button[value="left"]').click()
    expect(page.locator("#comparison .sortee").first).to_be_visible()
    stays_put_while_images_arrive(page, held, "#comparison :is(.pivot, .sortee, .send-sides)")
