"""Screens of several items in a real browser: a rank "2 of 8" screen picked by mouse
and by number keys, with picks taken back before they are sent; an odd-one-out in one
tap or key; every format's screen fits a phone and a laptop without scrolling."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect
from sqlalchemy import select

from app.models import Item, Judgement
from tests.support.browser import (
    hold_images,
    screenshots_dir,
    shoot,
    stays_put_while_images_arrive,
    until,
    until_htmx,
)
from tests.support.links import open_link
from tests.support.uploads import coloured_squares

API = "/api/v1"


def _study(client, auth, project_id: int, items: bytes | None = None, **rating) -> str:
    """24 coloured squares (or the `items` archive given), its link open; returns the
    study's public slug."""
    archive = items or coloured_squares(24)
    uploaded = client.post(
        f"{API}/projects/{project_id}/items", headers=auth, files={"file": ("c.zip", archive)}
    )
    assert uploaded.status_code == 201, uploaded.text
    settings = client.patch(
        f"{API}/projects/{project_id}/rating",
        headers=auth,
        json={"attention_rate": 0, "random_share": 1, "completion_code": "GRID-DONE", **rating},
    )
    assert settings.status_code == 200, settings.text
    return open_link(client, auth, project_id)["public_slug"]


def _start(page, server: str, slug: str, tap: bool = False) -> None:
    page.goto(f"{server}/r/{slug}")
    start = page.get_by_role("button", name="Start")
    start.tap() if tap else start.click()
    page.wait_for_url("**/rate")
    expect(page.locator("#comparison .pick").first).to_be_visible()
    until_htmx(page)
    page.wait_for_load_state("load")


def _query(page) -> str:
    return page.locator("#comparison input[name=query_id]").get_attribute("value")


def _keys(page) -> list[str]:
    return page.locator("#comparison .pick").evaluate_all("cards => cards.map(c => c.dataset.key)")


def _judgements(app, project_id: int) -> list[tuple[list[str], list[str], int | None]]:
    """Each judgement's items and picks as keys, and its time to answer."""
    with app.state.session_factory() as session:
        keys = dict(session.execute(select(Item.id, Item.key)).all())
        rows = session.scalars(
            select(Judgement).where(Judgement.project_id == project_id).order_by(Judgement.id)
        ).all()
        return [
            ([keys[i] for i in row.shown], [keys[i] for i in row.chosen], row.response_time_ms)
            for row in rows
        ]


def test_a_rank_screen_is_picked_in_order_by_mouse_and_keys_with_undo(
    app, client, auth, project, server, browser, tmp_path
):
    slug = _study(
        client, auth, project["id"], judgement="rank", shown=8, picks=2, answers_per_rater=3
    )
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    loads = []
    _start(page, server, slug)
    page.on("load", lambda _: loads.append(page.url))
    send = page.locator("#comparison .send-picks")
    cards = page.locator("#comparison .pick")
    expect(cards).to_have_count(8)
    expect(send).to_be_disabled()

    # By mouse: the third, then the first; the third again takes it back; then the fifth.
    first = _keys(page)
    cards.nth(2).click()
    expect(cards.nth(2).locator(".order")).to_have_text("1")
    cards.nth(0).click()
    expect(cards.nth(0).locator(".order")).to_have_text("2")
    expect(send).to_be_enabled()
    cards.nth(6).click()  # a third pick is refused: two are wanted
    expect(cards.nth(6)).not_to_have_class(re.compile(r"\bpicked\b"))
    cards.nth(2).click()
    expect(cards.nth(0).locator(".order")).to_have_text("1")
    expect(send).to_be_disabled()
    cards.nth(4).click()
    shoot(page, screenshots_dir(tmp_path) / "rank-picked.png")
    before = _query(page)
    send.click()
    expect(page.locator("#comparison input[name=query_id]")).not_to_have_value(before)

    # By keys: 2 and 7, Backspace takes 7 back, 8, Enter sends.
    second = _keys(page)
    for key in ("2", "7", "Backspace", "8"):
        page.keyboard.press(key)
    expect(page.locator("#comparison .picked-count")).to_have_text("2")
    before = _query(page)
    page.keyboard.press("Enter")
    expect(page.locator("#comparison input[name=query_id]")).not_to_have_value(before)

    # Without every pick, Enter sends nothing.
    page.keyboard.press("1")
    page.keyboard.press("Enter")
    expect(page.locator("#comparison .picked-count")).to_have_text("1")
    page.keyboard.press("3")
    page.keyboard.press("Enter")
    expect(page.locator("#completion-code")).to_have_text("GRID-DONE")
    assert loads == []  # every screen swapped in without a page load

    stored = _judgements(app, project["id"])
    assert [shown for shown, _, _ in stored][:2] == [first, second]
    assert [picked for _, picked, _ in stored] == [
        [first[0], first[4]],
        [second[1], second[7]],
        [stored[2][0][0], stored[2][0][2]],
    ]
    assert all(time is not None and time > 0 for _, _, time in stored)


def test_an_odd_one_out_is_one_tap_or_one_key(app, client, auth, project, server, browser):
    slug = _study(client, auth, project["id"], judgement="odd_one_out", answers_per_rater=2)
    context = browser.new_context(
        viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True
    )
    page = context.new_page()
    _start(page, server, slug, tap=True)
    shown = [_keys(page)]
    before = _query(page)
    page.locator("#comparison .pick").nth(1).tap()
    expect(page.locator("#comparison input[name=query_id]")).not_to_have_value(before)
    shown.append(_keys(page))
    page.keyboard.press("3")
    expect(page.locator("#completion-code")).to_have_text("GRID-DONE")
    stored = _judgements(app, project["id"])
    assert [picked for _, picked, _ in stored] == [[shown[0][1]], [shown[1][2]]]
    context.close()


SCREENS = {
    "laptop": {"viewport": {"width": 1366, "height": 657}},
    "desktop": {"viewport": {"width": 1280, "height": 800}},
    "phone": {
        "viewport": {"width": 390, "height": 844},
        "device_scale_factor": 2,
        "is_mobile": True,
        "has_touch": True,
    },
    "phone-small": {
        "viewport": {"width": 360, "height": 640},
        "is_mobile": True,
        "has_touch": True,
    },
}
FORMATS = {
    "odd-one-out": {"judgement": "odd_one_out"},
    "rank-2-of-6": {"judgement": "rank", "shown": 6, "picks": 2},
    "rank-2-of-8": {"judgement": "rank", "shown": 8, "picks": 2, "allow_cant_tell": True},
    "rank-3-of-12": {"judgement": "rank", "shown": 12, "picks": 3},
}


@pytest.mark.one_database  # the page itself: nothing the database changes
@pytest.mark.parametrize("screen", SCREENS)
@pytest.mark.parametrize("layout", FORMATS)
def test_every_screen_fits_without_scrolling(
    client, auth, project, server, browser, tmp_path, screen, layout
):
    slug = _study(client, auth, project["id"], **FORMATS[layout])
    context = browser.new_context(**SCREENS[screen])
    page = context.new_page()
    _start(page, server, slug, tap=bool(SCREENS[screen].get("has_touch")))
    until(page, "[...document.images].every(image => image.complete)")
    width, height = SCREENS[screen]["viewport"].values()
    parts = [page.locator("#comparison .pick").nth(i) for i in range(page.locator(".pick").count())]
    if layout.startswith("rank"):
        parts += [page.locator(".anchor"), page.locator(".send-picks")]
    if FORMATS[layout].get("allow_cant_tell"):
        parts.append(page.locator(".cant-tell"))
    for part in parts:
        box = part.bounding_box()
        assert box["x"] >= 0 and box["x"] + box["width"] <= width, (layout, screen, box)
        assert box["y"] >= 0 and box["y"] + box["height"] <= height, (layout, screen, box)
    smallest = min(
        page.locator("#comparison .pick img").nth(i).bounding_box()["height"]
        for i in range(page.locator("#comparison .pick img").count())
    )
    assert smallest >= 44  # still big enough to see and tap
    shoot(page, screenshots_dir(tmp_path) / f"screen-{layout}-{screen}.png")
    context.close()


@pytest.mark.one_database  # the page itself: nothing the database changes
@pytest.mark.parametrize("screen", ["laptop", "phone"])
@pytest.mark.parametrize("layout", ["odd-one-out", "rank-2-of-8"])
def test_a_screen_stays_put_while_its_images_arrive(
    client, auth, project, server, browser, screen, layout
):
    slug = _study(client, auth, project["id"], **FORMATS[layout])
    context = browser.new_context(**SCREENS[screen])
    page = context.new_page()
    held = hold_images(page)
    page.goto(f"{server}/r/{slug}")
    page.get_by_role("button", name="Start").click(no_wait_after=True)
    expect(page.locator("#comparison .pick").first).to_be_visible()
    stays_put_while_images_arrive(
        page, held, "#comparison :is(.anchor, .pick, .send-picks, .cant-tell)"
    )
    context.close()
