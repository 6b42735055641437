"""The researcher's workspace in Chromium, on both databases: signing in (password or
token) and out, the projects list and its form, a project's overview with its chart,
study link and preview, the tokens page, CSRF, hostile names, and the API docs offline."""

from __future__ import annotations

import json
import re
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import numpy as np
import pytest
from playwright.sync_api import expect

from app.auth.service import create_token, set_researcher_password
from app.core.db import unit_of_work
from tests.support.browser import (
    DESKTOP,
    PHONE,
    look_at_pages,
    screenshots_dir,
    settled,
    shoot,
    until,
)
from tests.support.links import open_link
from tests.support.waiting import wait_for

API = "/api/v1"
PASSWORD = "correct horse battery"


@pytest.fixture
def researcher(app):
    with unit_of_work(app.state.session_factory) as session:
        set_researcher_password(session=session, email="ada@lab.example", password=PASSWORD)
    return "ada@lab.example"


def sign_in(page, server: str, email: str = "ada@lab.example", password: str = PASSWORD):
    if "/login" not in page.url:
        page.goto(f"{server}/login")
    page.get_by_label("Email").fill(email)
    page.get_by_label("Password", exact=True).fill(password)
    page.get_by_role("button", name="Sign in").click()


def a_project_in_the_browser(app, browser, server: str, name: str):
    """Signed in, a project created from the projects page: the page, the project's id
    and an API bearer header for the same researcher."""
    page = browser.new_page(viewport=DESKTOP)
    sign_in(page, server)
    page.get_by_label("Name", exact=True).fill(name)
    page.get_by_role("button", name="Create project").click()
    project_id = int(page.url.rsplit("/", 1)[1])
    with unit_of_work(app.state.session_factory) as session:
        token = create_token(session=session, researcher_name="ada@lab.example")
    return page, project_id, {"Authorization": f"Bearer {token}"}


def point_on_scatter(page, index: int) -> tuple[float, float]:
    """Where the embedding page draws a point a user can reach: the first of its first
    series from `index` on that shows on screen and under no other element (a phone's
    item card rides over the chart's lower part)."""
    found = page.evaluate(
        """(index) => {
            const element = document.getElementById("scatter");
            const chart = echarts.getInstanceByDom(element);
            const data = chart.getOption().series[0].data;
            const box = element.getBoundingClientRect();
            for (let at = index; at < data.length; at++) {
                const [x, y] = chart.convertToPixel({ seriesIndex: 0 }, [data[at][0], data[at][1]]);
                const hit = document.elementFromPoint(box.left + x, box.top + y);
                if (hit && element.contains(hit)) return [box.left + x, box.top + y];
            }
            return null;
        }""",
        index,
    )
    assert found is not None, f"no point from {index} on is in view and uncovered"
    return found[0], found[1]


class Confirmations:
    """The questions a page asks before it acts (`window.confirm`), each answered "Cancel"
    until `accept` is set."""

    def __init__(self, page) -> None:
        self.asked: list[str] = []
        self.accept = False
        page.on("dialog", self._answer)

    def _answer(self, dialog) -> None:
        self.asked.append(dialog.message)
        dialog.accept() if self.accept else dialog.dismiss()


def watch(page) -> dict:
    """Dialogs that open, and requests that leave for another origin or sign out."""
    seen: dict = {"dialogs": [], "requests": []}
    page.on("dialog", lambda dialog: (seen["dialogs"].append(dialog.message), dialog.dismiss()))
    page.on("request", lambda request: seen["requests"].append(request.url))
    return seen


@pytest.mark.one_database  # the pages; tests/test_projects.py and the access matrix cover both databases
def test_a_researcher_signs_in_creates_a_project_and_watches_its_overview(
    app, server, browser, researcher, tmp_path
):
    shots = screenshots_dir(tmp_path)
    page = browser.new_page(viewport=DESKTOP)
    page.goto(server)
    expect(page).to_have_url(f"{server}/login")
    shoot(page, shots / "workspace-sign-in-desktop.png")

    sign_in(page, server, password="not the password")
    expect(page.get_by_role("alert")).to_have_text("Wrong email or password.")
    sign_in(page, server)
    expect(page).to_have_url(f"{server}/")
    expect(page.get_by_text("No projects yet")).to_be_visible()

    page.get_by_role("button", name="Create project").click()  # no name
    expect(page.locator("#name-error")).to_have_text("must not be empty")
    page.get_by_label("Name", exact=True).fill("Colour study")
    page.get_by_label("Description").fill("Which colour is closer?")
    page.get_by_role("button", name="Create project").click()
    expect(page.get_by_role("heading", name="Colour study")).to_be_visible()
    project_id = int(page.url.rsplit("/", 1)[1])

    study_url = page.locator("#study-url").text_content()
    assert urlsplit(study_url).path.startswith("/r/")
    # A new study's link is closed, and opens only once there is something to ask.
    expect(page.locator("#link-state")).to_have_text("closed")
    page.get_by_role("button", name="Open the link").click()
    expect(page.locator("#study-link .error")).to_contain_text("has 0 items")
    expect(page.locator("#link-state")).to_have_text("closed")
    rater = browser.new_page(viewport=PHONE)
    rater.goto(study_url + "?PROLIFIC_PID=early-bird")
    expect(rater.get_by_role("status")).to_have_text(
        "This study has not opened yet. Please come back later."
    )
    expect(rater.get_by_role("button", name="Start")).to_have_count(0)
    expect(rater.get_by_text("completion code")).to_have_count(0)
    shoot(rater, shots / "rate-not-open-phone.png")
    # No answers yet: the overview says so where the answers-per-hour chart will be.
    expect(page.locator(".empty-chart")).to_have_text(
        "No rater has answered in the last 7 days: open the study link above, share it, "
        "and their answers per hour show here."
    )
    expect(page.locator("[data-chart]")).to_have_count(0)
    shoot(page, shots / "workspace-overview-desktop.png", full_page=True)
    page.set_viewport_size(PHONE)
    shoot(page, shots / "workspace-overview-phone.png", full_page=True)
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= PHONE["width"], f"the overview scrolls sideways on a phone ({width}px)"
    page.set_viewport_size(DESKTOP)

    # Items arrive (through the API, as a script would): the overview counts them.
    with unit_of_work(app.state.session_factory) as session:
        token = create_token(session=session, researcher_name="ada@lab.example")
    items = "key,text\n" + "\n".join(f"c{i},colour {i}" for i in range(5))
    uploaded = httpx.post(
        f"{server}{API}/projects/{project_id}/items",
        headers={"Authorization": f"Bearer {token}"},
        files={"file": ("items.csv", items)},
    )
    assert uploaded.status_code == 201, uploaded.text
    page.goto(f"{server}/projects/{project_id}")  # (a reload would post the refused form again)
    expect(page.locator(".figures dd").first).to_have_text("5")
    page.get_by_role("button", name="Open the link").click()
    expect(page.locator("#link-state")).to_have_text("open")
    rater.reload()
    expect(rater.get_by_role("button", name="Start")).to_be_visible()
    page.get_by_role("button", name="Pause").click()
    expect(page.locator("#link-state")).to_have_text("paused")
    shoot(page, shots / "workspace-overview-paused-desktop.png", full_page=True)
    rater.reload()
    expect(rater.get_by_role("status")).to_contain_text("paused")
    rater.close()

    # The preview shows what raters will see, whatever the link's state.
    page.get_by_role("link", name="Preview").click()
    expect(page.get_by_text("nothing you choose here is recorded")).to_be_visible()
    expect(page.locator(".candidate")).to_have_count(2)
    shown = page.locator(".item-anchor").text_content()
    page.locator(".candidate").first.click()
    expect(page.locator(".candidate")).to_have_count(2)
    shoot(page, shots / "workspace-preview-desktop.png")
    page.goto(f"{server}/projects/{project_id}")
    page.get_by_role("button", name="Resume").click()
    expect(page.locator("#link-state")).to_have_text("open")
    answers = httpx.get(
        f"{server}{API}/projects/{project_id}", headers={"Authorization": f"Bearer {token}"}
    ).json()
    assert answers["triplet_count"] == 0 and shown  # the preview recorded nothing

    page.goto(server)
    row = page.locator("table.projects tbody tr").first
    expect(row).to_contain_text("Colour study")
    expect(row.locator("td").nth(1)).to_have_text("5")
    shoot(page, shots / "workspace-projects-desktop.png")
    page.set_viewport_size(PHONE)
    shoot(page, shots / "workspace-projects-phone.png", full_page=True)

    page.get_by_role("button", name="Sign out").click()
    expect(page).to_have_url(f"{server}/login")
    page.goto(f"{server}/projects/{project_id}")
    expect(page).to_have_url(f"{server}/login?next=%2Fprojects%2F{project_id}")
    sign_in(page, server)  # back where they were going
    expect(page).to_have_url(f"{server}/projects/{project_id}")


def sign_in_with_token(page, server: str, token: str) -> None:
    page.goto(f"{server}/login")
    page.locator("summary").click()
    page.get_by_label("API token").fill(token)
    page.get_by_role("button", name="Sign in").click()


@pytest.mark.one_database  # the pages; tests/test_tokens.py covers both databases
def test_tokens_sign_in_are_shown_once_and_revoked_at_once(app, server, browser, tmp_path):
    with unit_of_work(app.state.session_factory) as session:
        token = create_token(session=session, researcher_name="bo", token_name="laptop")
    page = browser.new_page(viewport=DESKTOP)
    sign_in_with_token(page, server, token)
    expect(page).to_have_url(f"{server}/")
    page.get_by_role("link", name="API tokens").click()
    expect(page.locator("table.data tbody tr")).to_have_count(1)

    laptop = {"Authorization": f"Bearer {token}"}
    shapes = httpx.post(f"{server}{API}/projects", json={"name": "Shapes"}, headers=laptop).json()
    httpx.post(f"{server}{API}/projects", json={"name": "Colours"}, headers=laptop)
    page.reload()
    page.get_by_label("Name", exact=True).fill("notebook")
    page.get_by_role("button", name="Create token").click()  # no scope chosen: said so
    expect(page.get_by_role("alert")).to_have_text(
        "Choose what the token may do: predict, read, write or admin."
    )
    expect(page.get_by_label("Name", exact=True)).to_have_value("notebook")  # kept
    page.get_by_label("read: predict, plus reading the projects").check()
    page.get_by_label("Only the projects ticked here").check()
    page.get_by_label("Shapes").check()
    page.get_by_label("Expires at the end of").fill("2099-01-31")
    page.get_by_role("button", name="Create token").click()
    created = page.locator("#new-token").text_content()
    assert created.startswith("closer_")
    shoot(page, screenshots_dir(tmp_path) / "workspace-tokens-desktop.png")
    # A reload sends the form again: no second token, and the page says why.
    page.reload()
    expect(page.get_by_role("alert")).to_contain_text("This form was sent already")
    expect(page.locator("#new-token")).to_have_count(0)
    expect(page.locator("tr", has_text="notebook")).to_have_count(1)
    bearer = {"Authorization": f"Bearer {created}"}
    listed = httpx.get(f"{server}{API}/projects", headers=bearer)
    assert [project["name"] for project in listed.json()] == ["Shapes"]
    changed = httpx.patch(
        f"{server}{API}/projects/{shapes['id']}", json={"name": "mine"}, headers=bearer
    )
    assert changed.status_code == 403
    page.goto(f"{server}/tokens")
    assert created not in page.content()  # shown once
    row = page.locator("tr", has_text="notebook")
    expect(row).to_contain_text("just now")  # used a moment ago
    expect(row).to_contain_text("read")
    expect(row).to_contain_text("Shapes")
    expect(row).to_contain_text("2099-01-31 23:59 UTC")
    expect(row).to_contain_text("made with another token")  # this browser's: laptop
    page.set_viewport_size(PHONE)
    shoot(page, screenshots_dir(tmp_path) / "workspace-tokens-phone.png", full_page=True)
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    page.set_viewport_size(DESKTOP)

    # Signed in with the read token: the pages say so, and lead to no token page.
    reader = browser.new_page(viewport=DESKTOP)
    sign_in_with_token(reader, server, created)
    expect(reader.get_by_role("note")).to_contain_text("Signed in with the token notebook: read")
    expect(reader.get_by_role("link", name="API tokens")).to_have_count(0)
    expect(reader.get_by_role("link", name="Shapes")).to_be_visible()
    expect(reader.get_by_role("link", name="Colours")).to_have_count(0)
    reader.goto(f"{server}/projects/{shapes['id']}/settings")
    expect(reader.get_by_label("Redirect when done (recruiting platform URL)")).not_to_be_editable()
    expect(reader.get_by_role("button", name="Delete the project")).to_have_count(0)
    shoot(reader, screenshots_dir(tmp_path) / "workspace-settings-read-token.png", full_page=True)
    reader.goto(f"{server}/tokens")
    expect(reader.get_by_text("this token's scope is 'read'")).to_be_visible()
    reader.close()

    confirm = Confirmations(page)
    row.get_by_role("button", name="Revoke").click()  # asked first; "Cancel" keeps it
    assert confirm.asked == [
        "Revoke the token notebook? Scripts and services that use it are refused from now "
        "on, and so are the tokens it made; this cannot be undone."
    ]
    expect(page.locator("tr", has_text="notebook")).not_to_contain_text("revoked")
    assert httpx.get(f"{server}{API}/projects", headers=bearer).status_code == 200
    confirm.accept = True
    row.get_by_role("button", name="Revoke").click()
    expect(page.locator("tr", has_text="notebook")).to_contain_text("revoked")
    assert httpx.get(f"{server}{API}/projects", headers=bearer).status_code == 401

    # Signing out everywhere: every browser of this researcher, this one too.
    other = browser.new_page(viewport=DESKTOP)
    sign_in_with_token(other, server, token)
    expect(other).to_have_url(f"{server}/")
    page.reload()
    expect(page.get_by_text("You are signed in on 2 browsers")).to_be_visible()
    page.get_by_role("button", name="Sign out everywhere").click()
    assert confirm.asked[-1] == "Sign out on every browser, this one too?"
    expect(page).to_have_url(f"{server}/login?signed_out=everywhere")
    expect(page.get_by_role("status")).to_contain_text("Signed out everywhere")
    other.goto(f"{server}/tokens")
    expect(other).to_have_url(f"{server}/login?next=%2Ftokens")
    other.close()

    # Revoking the token a browser signed in with signs it out.
    sign_in_with_token(page, server, token)
    page.goto(f"{server}/tokens")
    page.locator("tr", has_text="laptop").get_by_role("button", name="Revoke").click()
    expect(page).to_have_url(f"{server}/login?next=%2Ftokens")


@pytest.mark.one_database  # the security policy: the API tests cover both databases
def test_a_form_posted_from_another_site_is_refused_and_changes_nothing(
    app, server, browser, researcher
):
    page = browser.new_page(viewport=DESKTOP)
    sign_in(page, server)
    expect(page).to_have_url(f"{server}/")
    # A page of another origin (about:blank here) posts the create form, without a token.
    page.goto("about:blank")
    page.set_content(
        f'<form method="post" action="{server}/projects">'
        '<input name="name" value="planted"><button>Send</button></form>'
    )
    with page.expect_response(f"{server}/projects") as posted:
        page.get_by_role("button", name="Send").click()
    assert posted.value.status == 403
    page.goto(server)
    expect(page.get_by_text("No projects yet")).to_be_visible()

    # With the browser's own session cookie but no token (a script on another site
    # cannot read the page to get it): refused too, through the API as through forms.
    cookies = {c["name"]: c["value"] for c in page.context.cookies()}
    with httpx.Client(base_url=server, cookies=cookies) as stolen:
        assert stolen.post("/projects", data={"name": "planted"}).status_code == 403
        assert stolen.post(f"{API}/projects", json={"name": "planted"}).status_code == 403
        assert stolen.get(f"{API}/projects").json() == []


@pytest.mark.one_database  # the pages' escaping; tests/test_hostile_input.py stores them on both
def test_hostile_names_and_texts_render_as_text_on_every_page(
    app, live_server, browser, researcher, tmp_path
):
    server = live_server
    with unit_of_work(app.state.session_factory) as session:
        token = create_token(session=session, researcher_name="ada@lab.example")
    bearer = {"Authorization": f"Bearer {token}"}
    name = "<script>window.pwned = 1</script>Study"
    project = httpx.post(
        f"{server}{API}/projects", headers=bearer, json={"name": name, "description": name}
    ).json()
    pid = project["id"]
    hostile = {
        "xss": "<img src=x onerror=alert(1)>",
        'k" hx-get="logout" hx-trigger="load': "plain",
        "<b>third": "<b>bold</b>",
    }
    rows = [
        f'"{key.replace(chr(34), chr(34) * 2)}","{text}","<i>x</i>"'
        for key, text in hostile.items()
    ]
    rows += [f"n{i},item {i},{'<i>x</i>' if i % 2 else 'y'}" for i in range(9)]
    items = "key,text,label\n" + "\n".join(rows) + "\n"
    uploaded = httpx.post(
        f"{server}{API}/projects/{pid}/items",
        headers=bearer,
        files={"file": ("<i>f</i>.csv", items)},
    )
    assert uploaded.status_code == 201, uploaded.text
    keys = list(hostile) + [f"n{i}" for i in range(9)]
    triplets = [(keys[i], keys[(i + 1) % 12], keys[(i + 5) % 12]) for i in range(12)] * 5
    body = [list(t) for t in triplets]
    assert (
        httpx.post(
            f"{server}{API}/projects/{pid}/triplets",
            headers=bearer,
            files={"file": ("t.json", json.dumps(body))},
        ).status_code
        == 201
    )
    model = httpx.post(
        f"{server}{API}/projects/{pid}/models",
        headers=bearer,
        json={"name": "<svg onload=alert(2)>", "kind": "tete", "params": {"max_iter": 50}},
    ).json()
    slug = open_link(httpx, bearer, pid, server)["public_slug"]
    joined = httpx.post(
        f"{server}{API}/rate/{slug}/raters", json={"participant": "<script>alert(3)</script>"}
    )
    assert joined.status_code == 201

    page = browser.new_page(viewport=DESKTOP)
    seen = watch(page)
    sign_in(page, server)
    wait_for(  # the model's first fit, in the worker
        lambda: httpx.get(
            f"{server}{API}/projects/{pid}/models/{model['id']}", headers=bearer
        ).json()["serving"],
        60,
        "the model's first fit",
    )
    pages = [
        "/",
        f"/projects/{pid}",
        f"/projects/{pid}/uploads",
        f"/projects/{pid}/settings",
        f"/projects/{pid}/raters",
        f"/projects/{pid}/builds",
        f"/projects/{pid}/models",
        f"/projects/{pid}/downloads",
        f"/projects/{pid}/preview",
        "/tokens",
    ]
    for path in pages:
        page.goto(f"{server}{path}")
        settled(page)
        assert page.evaluate("window.pwned") is None
    for _ in range(60):  # the preview draws three of 12 items at random: see the hostile one
        page.goto(f"{server}/projects/{pid}/preview")
        if page.get_by_text("<img src=x onerror=alert(1)>").count():
            break
    expect(page.get_by_text("<img src=x onerror=alert(1)>")).to_be_visible()
    page.goto(f"{server}/projects/{pid}/raters")
    expect(page.get_by_text("<script>alert(3)</script>")).to_be_visible()
    page.goto(f"{server}/projects/{pid}/models")
    # As text in its card's heading, and in the labelling table where it labels items.
    expect(page.locator(".model h3", has_text="<svg onload=alert(2)>")).to_be_visible()
    named = page.get_by_text("<svg onload=alert(2)>", exact=True)
    expect(named.first).to_be_visible()
    page.goto(f"{server}/projects/{pid}/uploads")
    expect(page.get_by_text("<i>f</i>.csv")).to_be_visible()

    page.goto(f"{server}/projects/{pid}/models/{model['id']}/embedding")
    until(page, "document.getElementById('embedding')?.dataset.drawnMs !== undefined", 30)
    texts = set()
    series = page.evaluate(
        "echarts.getInstanceByDom(document.getElementById('scatter')).getOption().series.length"
    )
    assert series == 2  # labels "<i>x</i>" and "y", as legend text
    for index in range(6):
        x, y = point_on_scatter(page, index)
        page.mouse.move(x, y)
        page.wait_for_timeout(50)
        texts.add(page.locator("#item-card").inner_text())
    assert any("<i>x</i>" in text for text in texts)
    shoot(page, screenshots_dir(tmp_path) / "workspace-hostile-desktop.png")
    assert page.evaluate("window.pwned") is None
    assert seen["dialogs"] == []
    strays = [
        url
        for url in seen["requests"]
        if not url.startswith(server) or urlsplit(url).path.endswith(("logout", "/x"))
    ]
    assert strays == []


@pytest.mark.one_database  # the page itself: nothing the database changes
def test_the_api_docs_work_offline(server, browser, tmp_path):
    page = browser.new_page(viewport=DESKTOP)
    outside: list[str] = []
    errors: list[str] = []

    def only_here(route):
        if route.request.url.startswith(server) or route.request.url.startswith(("data:", "blob:")):
            route.continue_()
        else:
            outside.append(route.request.url)
            route.abort()

    page.route("**/*", only_here)
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.goto(f"{server}/docs")
    # Swagger UI draws the whole spec (its first request builds it: 1.3 s on a loaded
    # machine) before the title shows; ReDoc below gets as long.
    expect(page.locator(".swagger-ui .info .title")).to_contain_text("Closer", timeout=20_000)
    expect(page.locator(".opblock-tag-section").first).to_be_visible()
    shoot(page, screenshots_dir(tmp_path) / "api-docs-swagger.png")
    page.get_by_role("link", name="ReDoc").click()  # and back to the workspace from either
    expect(page.get_by_role("link", name="← Closer workspace")).to_have_attribute("href", "/")
    expect(page.locator("h1", has_text="Closer")).to_be_visible(timeout=20_000)
    shoot(page, screenshots_dir(tmp_path) / "api-docs-redoc.png")
    assert outside == []
    # ReDoc's sidebar draws its maker's logo: made here, not fetched from their CDN.
    logo = page.get_by_alt_text("redocly logo")
    expect(logo).to_have_attribute("src", re.compile(r"^data:image/svg\+xml,"))
    assert errors == []
    spec = json.loads(httpx.get(f"{server}/openapi.json").text)
    assert spec["info"]["title"] == "Closer"


@pytest.mark.one_database  # the forms; the upload and settings API tests cover both databases
def test_uploads_settings_and_raters_are_run_from_their_pages(
    app, server, browser, researcher, tmp_path
):
    shots = screenshots_dir(tmp_path)
    page, project_id, bearer = a_project_in_the_browser(app, browser, server, "Shapes")

    # Items with two mistakes: each is listed with its row and column, nothing stored.
    page.get_by_role("link", name="Uploads").click()
    items_form = page.locator("form[data-upload]").first
    bad = tmp_path / "shapes.csv"
    bad.write_text("key,label\ncircle,round\ncircle,round\n,angular\nsquare,angular\n")
    items_form.locator("input[type=file]").set_input_files(bad)
    items_form.get_by_role("button", name="Upload items").click()
    problems = items_form.locator("table.problems tbody tr")
    expect(problems).to_have_count(2)
    expect(problems.first).to_contain_text("shapes.csv")
    expect(problems.first.locator("td").nth(1)).to_have_text("3")
    expect(problems.first.locator("td").nth(2)).to_have_text("key")
    shoot(page, shots / "workspace-uploads-rejected-desktop.png", full_page=True)
    listed = httpx.get(f"{server}{API}/projects/{project_id}", headers=bearer).json()
    assert listed["item_count"] == 0
    good = tmp_path / "shapes-fixed.csv"
    good.write_text("key,label\ncircle,round\noval,round\nsquare,angular\ntriangle,angular\n")
    items_form.locator("input[type=file]").set_input_files(good)
    items_form.get_by_role("button", name="Upload items").click()
    expect(items_form.locator(".success")).to_contain_text("Stored 4 items")
    expect(page.locator("#recent-uploads tbody tr").first).to_contain_text("shapes-fixed.csv")
    triplets_form = page.locator("form[data-upload]").nth(1)
    # A messy log: with "skip bad rows", the good rows are stored and the rest listed.
    messy = tmp_path / "messy.csv"
    messy.write_text(
        "anchor,closer,farther\n# from the pilot\ncircle,oval,zebra\noval,circle,square\n"
    )
    triplets_form.locator("input[type=file]").set_input_files(messy)
    triplets_form.get_by_label("Skip bad rows").check()
    triplets_form.get_by_role("button", name="Upload triplets").click()
    expect(triplets_form.locator(".success")).to_contain_text("Stored 1 triplets")
    expect(triplets_form.locator(".warning")).to_contain_text("2 rows left out")
    skipped = triplets_form.locator("table.skipped tbody tr")
    expect(skipped).to_have_count(2)  # the comment line, and the row with an unknown item
    expect(skipped.nth(0)).to_contain_text("comment line")
    expect(skipped.nth(1).locator("td").nth(1)).to_have_text("3")
    triplets_form.get_by_label("Skip bad rows").uncheck()
    triplets = tmp_path / "answers.csv"
    triplets.write_text("anchor,closer,farther\ncircle,oval,square\nsquare,triangle,oval\n")
    triplets_form.locator("input[type=file]").set_input_files(triplets)
    triplets_form.get_by_role("button", name="Upload triplets").click()
    expect(triplets_form.locator(".success")).to_contain_text("Stored 2 triplets")
    assert (
        httpx.get(f"{server}{API}/projects/{project_id}", headers=bearer).json()["triplet_count"]
        == 3
    )
    # A test split: stored, and marked so in the export.
    held = tmp_path / "held-out.csv"
    held.write_text("anchor,closer,farther\ntriangle,square,circle\n")
    triplets_form.locator("input[type=file]").set_input_files(held)
    triplets_form.get_by_label("A test split").check()
    triplets_form.get_by_role("button", name="Upload triplets").click()
    expect(triplets_form.locator(".success")).to_contain_text("Stored 1 triplets")
    exported = httpx.get(
        f"{server}{API}/projects/{project_id}/triplets/export?format=json", headers=bearer
    ).json()
    assert [row["split"] for row in exported] == ["train"] * 3 + ["test"]
    # Judgements: an odd-one-out stored with the two triplets it implies.
    judgements_form = page.locator("form[data-upload]").nth(2)
    odd = tmp_path / "odd-one-out.csv"
    odd.write_text("item1,item2,item3,pick1\ncircle,oval,square,square\n")
    judgements_form.locator("input[type=file]").set_input_files(odd)
    judgements_form.get_by_role("button", name="Upload judgements").click()
    expect(judgements_form.locator(".success")).to_contain_text("Stored 1 judgements")
    newest = page.locator("#recent-uploads tbody tr").first
    expect(newest).to_contain_text("judgements")
    expect(newest).to_contain_text("odd-one-out.csv")
    counted = httpx.get(f"{server}{API}/projects/{project_id}", headers=bearer).json()
    assert counted["triplet_count"] == 6
    page.set_viewport_size(PHONE)
    shoot(page, shots / "workspace-uploads-phone.png", full_page=True)
    page.set_viewport_size(DESKTOP)

    # Settings: the form refuses what the API refuses, field by field.
    page.get_by_role("link", name="Settings").click()
    page.get_by_label("Answers per rater").fill("many")
    page.get_by_label("Redirect when done").fill("ftp://example.org")
    page.get_by_role("button", name="Save settings").click()
    expect(page.locator("#answers_per_rater-error")).to_have_text("must be a whole number")
    expect(page.locator("#completion_url-error")).to_have_text(
        "must be a web address starting with http:// or https://"
    )
    page.get_by_label("Answers per rater").fill("25")
    page.get_by_label("Redirect when done").fill("https://app.prolific.com/submissions/complete")
    page.get_by_label("Share of random questions").fill("0.7")
    page.get_by_label("Share of attention checks").fill("0.5")
    page.get_by_role("button", name="Save settings").click()
    expect(page.get_by_role("alert")).to_contain_text("random_share + attention_rate")
    page.get_by_label("Share of attention checks").fill("0.1")
    page.get_by_label("Offer “Can’t tell”").check()
    # Raters who fail the checks: sent back with the platform's code for that.
    page.get_by_label("Exclude below this attention-check accuracy").fill("0.8")
    page.get_by_label("Code when attention checks fail").fill("FAILED-CHECKS")
    page.get_by_label("Redirect when attention checks fail").fill(
        "https://app.prolific.com/submissions/complete?cc=FAILED-CHECKS"
    )
    # The samplers' shares: empty is automatic, a share above 1 is refused on its field.
    page.get_by_label("Proposed questions: share for labelling").fill("0.7")
    page.get_by_label("Proposed questions: share for the embedding").fill("1.5")
    page.get_by_role("button", name="Save settings").click()
    expect(page.locator("#embedding_share-error")).to_have_text("must be at most 1")
    page.get_by_label("Proposed questions: share for the embedding").fill("0.3")
    # The consent: statements without a text are refused on the field; both are saved.
    page.get_by_label("Statements to tick, one a line").fill("I have read it.\nI agree.")
    page.get_by_role("button", name="Save settings").click()
    expect(page.locator("#consent-error")).to_contain_text("Consent: the text")
    page.get_by_label("Consent (empty: none asked)").fill("## About\n\nYou compare shapes.")
    # The questionnaire, a row a question: a choice with one option is refused, named.
    page.get_by_label("Questionnaire (empty: none)").select_option("before")
    page.locator("#q-0-prompt").fill("Your age?")
    page.locator("#q-0-name").fill("age")
    page.locator("#q-0-kind").select_option("number")
    page.locator("#q-1-prompt").fill("Your writing hand?")
    page.locator("#q-1-name").fill("hand")
    page.locator("#q-1-kind").select_option("choice")
    page.locator("#q-1-options").fill("left")
    page.get_by_role("button", name="Save settings").click()
    expect(page.locator("#questionnaire-error")).to_contain_text(
        "Questionnaire: question 2: question 'hand': a choice question needs 2 options"
    )
    page.locator("#q-1-options").fill("left\nright")
    page.get_by_role("button", name="Save settings").click()
    expect(page.get_by_text("Saved")).to_be_visible()
    shoot(page, shots / "workspace-settings-desktop.png", full_page=True)
    saved = httpx.get(f"{server}{API}/projects/{project_id}/rating", headers=bearer).json()
    assert saved["consent"] == {
        "text": "## About\n\nYou compare shapes.",
        "statements": ["I have read it.", "I agree."],
    }
    assert saved["questionnaire"] == {
        "when": "before",
        "questions": [
            {
                "name": "age",
                "kind": "number",
                "prompt": "Your age?",
                "options": [],
                "required": True,
            },
            {
                "name": "hand",
                "kind": "choice",
                "prompt": "Your writing hand?",
                "options": ["left", "right"],
                "required": True,
            },
        ],
    }
    rating = httpx.get(f"{server}{API}/projects/{project_id}/rating", headers=bearer).json()
    assert rating["labelling_share"] == 0.7 and rating["embedding_share"] == 0.3
    assert rating["placement_share"] is None
    assert rating["answers_per_rater"] == 25 and rating["allow_cant_tell"] is True
    assert rating["random_share"] == 0.7 and rating["attention_rate"] == 0.1
    assert rating["completion_url"] == "https://app.prolific.com/submissions/complete"
    assert rating["min_attention_accuracy"] == 0.8
    assert rating["screened_out_code"] == "FAILED-CHECKS"
    assert rating["screened_out_url"].endswith("?cc=FAILED-CHECKS")

    # Raters: join two, exclude one from the table, and the API says so too.
    open_link(httpx, bearer, project_id, server)
    for participant in ("p-one", "p-two"):
        joined = httpx.post(
            f"{server}{API}/rate/{rating['public_slug']}/raters", json={"participant": participant}
        )
        assert joined.status_code == 201, joined.text
    page.get_by_role("link", name="Raters").click()
    row = page.locator("tr", has_text="p-two")
    expect(row).to_contain_text("Counted")
    row.get_by_role("button", name="Exclude").click()
    expect(page.locator("tr", has_text="p-two")).to_contain_text("Excluded")
    shoot(page, shots / "workspace-raters-desktop.png", full_page=True)
    listed = httpx.get(f"{server}{API}/projects/{project_id}/raters", headers=bearer).json()
    assert {r["external_id"]: r["excluded"] for r in listed} == {"p-one": False, "p-two": True}
    page.get_by_role("link", name="Answers", exact=True).click()  # sort by answers
    expect(page.locator("th[aria-sort]")).to_contain_text("Answers")
    page.locator("tr", has_text="p-two").get_by_role("button", name="Include").click()
    expect(page.locator("tr", has_text="p-two")).to_contain_text("Counted")
    listed = httpx.get(f"{server}{API}/projects/{project_id}/raters", headers=bearer).json()
    assert not any(r["excluded"] for r in listed)

    # A data request: p-two's records are downloaded from their page, then they are
    # erased once their id is typed right; the participants page logs it without them.
    page.get_by_role("link", name="Participants").click()
    page.get_by_role("link", name="p-two").click()
    with page.expect_download() as downloading:
        page.get_by_role("link", name="Download their records (JSON)").click()
    held = json.loads(Path(downloading.value.path()).read_text())
    assert held["participant"]["participant"] == "p-two"
    page.get_by_label("Type their participant id").fill("p-one")
    page.get_by_role("button", name="Erase this participant").click()
    expect(page.locator("#confirm-participant-error")).to_contain_text(
        "'p-one' is not this participant's id (p-two): nothing was erased"
    )
    page.set_viewport_size({"width": 390, "height": 844})
    shoot(page, shots / "workspace-erase-refused-phone.png", full_page=True)
    page.set_viewport_size({"width": 1280, "height": 800})
    page.get_by_label("Type their participant id").fill("p-two")
    page.get_by_role("button", name="Erase this participant").click()
    expect(page.get_by_role("status")).to_contain_text("The participant was erased")
    expect(page.locator("table.erasures tbody tr")).to_have_count(1)
    expect(page.locator("table.participants")).not_to_contain_text("p-two")
    shoot(page, shots / "workspace-participants-erased-desktop.png", full_page=True)
    listed = httpx.get(f"{server}{API}/projects/{project_id}/raters", headers=bearer).json()
    assert [r["external_id"] for r in listed] == ["p-one"]


@pytest.fixture
def live_server(settings):
    """The service with its worker in-process, as `closer serve` runs on the embedded
    default: builds step and models fit while the test watches."""
    from tests.support.browser import serve_in_thread

    with serve_in_thread(
        settings.model_copy(update={"worker_in_process": True, "worker_poll_seconds": 0.1})
    ) as url:
        yield url


def _clusters_csv(n: int = 60) -> str:
    """Three clusters of points in the plane: labels, 2-D features, a test split."""
    import numpy as np

    rng = np.random.default_rng(0)
    centres = {"red": (0, 0), "green": (6, 0), "blue": (3, 5)}
    lines = ["key,label,split,features"]
    for i in range(n):
        name = list(centres)[i % 3]
        x, y = np.array(centres[name]) + rng.normal(0, 0.8, 2)
        split = "test" if i >= n - 9 else "train"
        lines.append(f"p{i},{name},{split},{x:.3f} {y:.3f}")
    return "\n".join(lines) + "\n"


# The pages and their order on SQLite, the embedded default; on PostgreSQL the same steps
# run through the API (test_rating, test_builds, test_models, test_project_archive) and
# over HTTP with a crowd (test_crowd, test_training_e2e).
@pytest.mark.one_database
def test_a_whole_study_runs_in_the_browser_from_sign_in_to_download(
    app, live_server, browser, researcher, tmp_path
):
    import subprocess
    import sys

    server = live_server
    shots = screenshots_dir(tmp_path)
    page = browser.new_page(viewport=DESKTOP)
    sign_in(page, server)
    page.get_by_label("Name", exact=True).fill("Clusters")
    page.get_by_role("button", name="Create project").click()
    project_id = int(page.url.rsplit("/", 1)[1])

    page.get_by_role("link", name="Uploads").click()
    items_form = page.locator("form[data-upload]").first
    broken = tmp_path / "points.csv"
    broken.write_text(_clusters_csv().replace("p7,", "p6,", 1))
    items_form.locator("input[type=file]").set_input_files(broken)
    items_form.get_by_role("button", name="Upload items").click()
    expect(items_form.locator("table.problems tbody tr")).to_have_count(1)
    fixed = tmp_path / "points-fixed.csv"
    fixed.write_text(_clusters_csv())
    items_form.locator("input[type=file]").set_input_files(fixed)
    items_form.get_by_role("button", name="Upload items").click()
    expect(items_form.locator(".success")).to_contain_text("Stored 60 items")

    page.get_by_role("link", name="Settings").click()
    page.get_by_label("Answers per rater").fill("0")
    page.get_by_label("Share of attention checks").fill("0")
    page.get_by_role("button", name="Save settings").click()
    expect(page.get_by_text("Saved")).to_be_visible()
    page.get_by_role("link", name="Overview").click()
    page.get_by_role("button", name="Open the link").click()
    expect(page.locator("#link-state")).to_have_text("open")

    page.get_by_role("link", name="Models").click()
    page.get_by_label("Name", exact=True).fill("map")
    page.get_by_label("Kind").select_option("tete")
    page.get_by_label("Parameters").fill('{"max_iter": 200}')
    page.get_by_label("Answers before the first automatic fit").fill("60")
    page.get_by_role("button", name="Create and train").click()
    expect(page.locator("#model-1")).to_contain_text("map")

    page.get_by_role("link", name="Builds").click()
    page.get_by_label("Trees").fill("3")
    page.get_by_label("Seed (optional)").fill("0")
    page.get_by_label("Items per sorting screen").fill("4")  # a node's items 4 at a time
    expect(page.locator("#build-estimate")).to_contain_text("sorting screens of up to 4 items")
    page.get_by_role("button", name="Start build").click()
    expect(page.locator(".build")).to_have_count(1)
    expect(page.locator(".build h3")).to_contain_text("sorting screens of up to 4 items")
    build_id = int(page.locator(".build").first.get_attribute("id").split("-")[1])
    bar = page.locator(".build .overall progress")
    before = float(bar.get_attribute("value"))
    shoot(page, shots / "workspace-builds-start-desktop.png", full_page=True)

    with unit_of_work(app.state.session_factory) as session:
        token = create_token(session=session, researcher_name="ada@lab.example")
    crowd = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "app.cli",
            "simulate",
            "--project",
            str(project_id),
            "--token",
            token,
            "--url",
            server,
            "--raters",
            "4",
            "--think-time",
            "0.05",
            "--noise",
            "0.05",
            "--build",
            str(build_id),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        # The bar moves by itself (htmx refreshes the list every 2 s).
        until(
            page,
            f"Number(document.querySelector('.build .overall progress').value) > {before}",
            seconds=90,
        )
        moved = float(bar.get_attribute("value"))
        assert moved > before
        expect(page.locator(".build .needed")).to_contain_text("~")
        shoot(page, shots / "workspace-builds-running-desktop.png", full_page=True)
        page.set_viewport_size(PHONE)
        shoot(page, shots / "workspace-builds-phone.png", full_page=True)
        page.set_viewport_size(DESKTOP)
        expect(page.locator(".build").first).to_have_attribute(
            "data-status", "complete", timeout=180_000
        )
        assert crowd.wait(timeout=60) == 0
    finally:
        if crowd.poll() is None:
            crowd.kill()

    # The overview draws the raters' answers per hour.
    page.get_by_role("link", name="Overview").click()
    until(page, "document.querySelector('[data-chart]')?.dataset.drawn === '1'")
    assert page.locator("[data-chart] canvas").count() >= 1

    # The model refit on the answers: a learning curve, and its embedding.
    page.get_by_role("link", name="Models").click()
    page.get_by_role("button", name="Train now").click()
    until(page, "document.querySelector('#model-1 [data-chart]')?.dataset.drawn === '1'", 120)
    shoot(page, shots / "workspace-models-desktop.png", full_page=True)
    page.set_viewport_size(PHONE)
    shoot(page, shots / "workspace-models-phone.png", full_page=True)
    page.set_viewport_size(DESKTOP)
    page.get_by_role("link", name="Embedding").click()
    # The link loads a page of its own: the wait starts on it, not on the models' page.
    page.wait_for_url("**/embedding")
    until(page, "document.getElementById('embedding')?.dataset.drawnMs !== undefined", 30)
    shown = page.evaluate("document.getElementById('embedding-status').textContent")
    assert "60 items" in shown
    x, y = point_on_scatter(page, 0)
    page.mouse.move(x, y)
    expect(page.locator("#item-card .key")).to_have_text(re.compile(r"^p\d+$"))
    page.mouse.click(x, y)
    expect(page.locator("#item-card ol.neighbours li")).to_have_count(8)
    shoot(page, shots / "workspace-embedding-desktop.png")
    # On a phone, the card of the item tapped shows on screen beside the chart.
    page.set_viewport_size(PHONE)
    # A user scrolls the chart up to the top of the screen, above the card that rides
    # over its lower part (with a card showing neighbours, "if needed" scrolled too little).
    page.evaluate("document.getElementById('scatter').scrollIntoView({block: 'start'})")
    # The chart redraws at its new size, points gliding there: tap once they are.
    page.evaluate(
        """() => new Promise((resolve) => {
            const chart = echarts.getInstanceByDom(document.getElementById("scatter"));
            const done = () => { chart.off("finished", done); resolve(); };
            chart.on("finished", done);
            chart.resize({ animation: { duration: 0 } });
            setTimeout(done, 3000);
        })"""
    )
    x, y = point_on_scatter(page, 1)
    page.mouse.click(x, y)
    expect(page.locator("#item-card ol.neighbours li")).to_have_count(8)
    card_top = page.evaluate("document.getElementById('item-card').getBoundingClientRect().top")
    assert card_top < PHONE["height"], f"the item card is below the fold ({card_top}px)"
    shoot(page, shots / "workspace-embedding-phone.png")
    page.set_viewport_size(DESKTOP)
    # A neighbour leads to the item itself, on the items page.
    nearest = page.locator("#item-card ol.neighbours li a").first
    nearest_key = nearest.text_content().split(" ")[0]
    nearest.click()
    expect(page.locator("table.items tbody tr")).to_have_count(1)
    expect(page.locator("table.items tbody tr .key")).to_have_text(nearest_key)

    # A rater excluded from the table; the counted answers leave theirs out.
    page.get_by_role("link", name="Raters").click()
    first = page.locator("table.raters tbody tr").first
    expect(first.locator("td").nth(2)).to_have_text(re.compile(r"^\d+\.\d s$"))  # median time
    excluded_id = first.locator(".rater-id").text_content()
    first.get_by_role("button", name="Exclude").click()
    expect(page.locator("tr", has_text=excluded_id)).to_contain_text("Excluded")
    # One click to the rater's own page: their answers and times, and the same control.
    page.locator("tr", has_text=excluded_id).get_by_role("link", name=excluded_id).click()
    expect(page.get_by_role("heading", level=1)).to_contain_text(excluded_id)
    expect(page.locator("table.rater-answers tbody tr").first).to_contain_text(" s")
    rater_path = urlsplit(page.url).path
    page.get_by_role("button", name="Include").click()
    expect(page).to_have_url(f"{server}{rater_path}")
    page.get_by_role("button", name="Exclude").click()
    expect(page.locator("form.exclusion")).to_contain_text("Excluded")

    bearer = {"Authorization": f"Bearer {token}"}
    # The participants, as a researcher pays them: four simulated raters, and their CSV.
    page.get_by_role("link", name="Participants").click()
    expect(page.locator("table.participants tbody tr")).to_have_count(4)
    with page.expect_download() as downloading:
        page.get_by_role("link", name="Download participants (CSV)").click()
    paid = Path(downloading.value.path()).read_bytes()
    assert paid.startswith(b"\xef\xbb\xbf") and paid.count(b"\r\n") == 5
    assert (
        paid
        == httpx.get(
            f"{server}{API}/projects/{project_id}/participants/export", headers=bearer
        ).content
    )

    api_export = httpx.get(
        f"{server}{API}/projects/{project_id}/triplets/export?format=csv", headers=bearer
    ).text
    page.get_by_role("link", name="Downloads").click()
    expect(page.get_by_role("heading", name="Downloads", exact=True)).to_be_visible()
    shoot(page, shots / "workspace-downloads-desktop.png", full_page=True)
    with page.expect_download() as downloading:
        page.get_by_role("button", name="Download answers").click()
    downloaded = Path(downloading.value.path()).read_text(encoding="utf-8")
    assert downloaded == api_export and downloaded.count("\n") > 100
    page.get_by_label("Raters").select_option("counted")
    with page.expect_download() as downloading:
        page.get_by_role("button", name="Download answers").click()
    counted = Path(downloading.value.path()).read_text(encoding="utf-8")
    assert excluded_id not in counted and counted.count("\n") < downloaded.count("\n")

    # Every page, at desktop and phone size, light and dark: kept as artifacts, and none
    # scrolls sideways on a phone.
    pages = {
        "projects": "/",
        "tokens": "/tokens",
        "overview": f"/projects/{project_id}",
        "uploads": f"/projects/{project_id}/uploads",
        "settings": f"/projects/{project_id}/settings",
        "raters": f"/projects/{project_id}/raters",
        "participants": f"/projects/{project_id}/participants",
        "rater": rater_path,
        "builds": f"/projects/{project_id}/builds",
        "models": f"/projects/{project_id}/models",
        "embedding": f"/projects/{project_id}/models/1/embedding",
        "downloads": f"/projects/{project_id}/downloads",
        "preview": f"/projects/{project_id}/preview",
    }
    look_at_pages(page, browser, server, pages, shots)


@pytest.mark.one_database  # the clicks; tests/test_project_archive.py covers both databases
def test_a_project_is_downloaded_whole_and_created_again_in_two_clicks(
    app, server, browser, researcher, tmp_path
):
    page, project_id, bearer = a_project_in_the_browser(app, browser, server, "Pilot")
    items = "key,label\n" + "\n".join(f"k{i},{i % 2}" for i in range(6))
    httpx.post(
        f"{server}{API}/projects/{project_id}/items",
        headers=bearer,
        files={"file": ("items.csv", items)},
    )
    httpx.post(
        f"{server}{API}/projects/{project_id}/triplets",
        headers=bearer,
        files={"file": ("t.csv", "anchor,closer,farther\nk0,k2,k1\nk1,k3,k0\n")},
    )
    page.reload()
    with page.expect_download() as downloading:
        page.get_by_role("link", name="Download the whole project").click()
    archive = tmp_path / "pilot.zip"
    downloading.value.save_as(archive)

    page.get_by_role("link", name="Projects").click()
    page.locator("summary", has_text="From a project archive").click()
    page.get_by_label("Archive").set_input_files(archive)
    page.get_by_role("button", name="Create from archive").click()
    expect(page.get_by_role("heading", name="Pilot")).to_be_visible()
    copy_id = int(page.url.rsplit("/", 1)[1])
    assert copy_id != project_id
    expect(page.locator(".figures dd").nth(0)).to_have_text("6")
    expect(page.locator(".figures dd").nth(1)).to_have_text("2")

    page.get_by_role("link", name="Projects").click()
    page.locator("summary", has_text="From a project archive").click()
    not_an_archive = tmp_path / "notes.zip"
    not_an_archive.write_text("not a zip")
    page.get_by_label("Archive").set_input_files(not_an_archive)
    page.get_by_role("button", name="Create from archive").click()
    expect(page.get_by_role("alert")).to_contain_text("nothing was created")
    expect(page.locator("ul.problems li")).to_contain_text("not a ZIP archive")
    expect(page.locator("table.projects tbody tr")).to_have_count(2)


@pytest.mark.one_database  # the buttons; tests/test_queue_states.py covers both databases
def test_builds_and_models_are_paused_resumed_and_cancelled_from_their_pages(
    app, server, browser, researcher
):
    page, project_id, bearer = a_project_in_the_browser(app, browser, server, "Controls")
    assert (
        httpx.post(
            f"{server}{API}/projects/{project_id}/items",
            headers=bearer,
            files={"file": ("points.csv", _clusters_csv(30))},
        ).status_code
        == 201
    )
    page.get_by_role("link", name="Builds").click()
    # What a build would ask shows before it starts, and follows the settings.
    estimate = page.locator("#build-estimate")
    expect(estimate).to_contain_text("100 trees over 21 of 21 items")
    hundred = estimate.locator("strong").first.text_content()
    page.get_by_label("Trees").fill("2")
    expect(estimate).to_contain_text("2 trees over 21 of 21 items")
    two = estimate.locator("strong").first.text_content()
    as_number = lambda text: int(re.sub(r"\D", "", text))  # noqa: E731
    assert as_number(hundred) == pytest.approx(50 * as_number(two), rel=0.01)
    page.get_by_label("Trees").fill("none")
    expect(estimate).to_contain_text("Fix the settings above")
    page.get_by_role("button", name="Start build").click()
    expect(page.locator("#n_trees-error")).to_be_visible()
    page.get_by_label("Trees").fill("2")
    page.get_by_role("button", name="Start build").click()
    build = page.locator(".build").first
    expect(build).to_have_attribute("data-status", "running")
    for action, status in (("Pause", "paused"), ("Resume", "running"), ("Cancel", "cancelled")):
        build.get_by_role("button", name=action).click()
        expect(page.locator(".build").first).to_have_attribute("data-status", status)
    builds = httpx.get(f"{server}{API}/projects/{project_id}/builds", headers=bearer).json()
    assert [b["status"] for b in builds] == ["cancelled"]
    rows = [[f"p{i}", f"p{i + 1}", f"p{i + 2}"] for i in range(12)]  # enough to fit on
    answers = httpx.post(
        f"{server}{API}/projects/{project_id}/triplets",
        headers=bearer,
        files={"file": ("answers.json", json.dumps(rows))},
    )
    assert answers.status_code == 201

    page.get_by_role("link", name="Models").click()
    page.get_by_label("Name", exact=True).fill("bad")
    page.get_by_label("Parameters").fill("{n_components: 2")
    page.get_by_role("button", name="Create and train").click()
    expect(page.locator("#params-error")).to_contain_text("not JSON")
    page.get_by_label("Parameters").fill('{"n_components": 0}')
    page.get_by_role("button", name="Create and train").click()
    expect(page.get_by_role("alert")).to_contain_text("n_components")
    page.get_by_label("Kind").select_option(label="TripletBoost classifier")
    page.get_by_label("Parameters").fill('{"n_iter": 2000000}')
    page.get_by_role("button", name="Create and train").click()
    expect(page.get_by_role("alert")).to_contain_text(
        "params: n_iter x n_runs must be at most 20,000,000 rounds in all; got 2,000,000 x 20"
    )
    page.get_by_label("Kind").select_option(label="t-ETE embedding")
    page.get_by_label("Parameters").fill('{"n_components": 2}')
    page.get_by_role("button", name="Create and train").click()
    card = page.locator(".model", has_text="bad")
    expect(card).to_contain_text("queued")  # no worker here: it waits
    card.get_by_role("button", name="Cancel fit").click()
    expect(page.locator(".model", has_text="bad")).to_contain_text("cancelled")
    models = httpx.get(f"{server}{API}/projects/{project_id}/models", headers=bearer).json()
    assert models[0]["latest"]["status"] == "cancelled"


@pytest.mark.one_database  # the pages and forms; the API tests cover both databases
def test_a_project_is_renamed_and_its_model_and_itself_deleted_from_its_pages(
    app, server, browser, researcher, tmp_path
):
    """The second week's housekeeping: the Overview says how the builds and models stand,
    the project gets a better name, a model goes (asked first), the archive is on
    Downloads, and the project goes once its name is typed."""
    import numpy as np

    from app.worker.loop import Worker

    page, project_id, bearer = a_project_in_the_browser(app, browser, server, "Pilot")
    httpx.post(
        f"{server}{API}/projects/{project_id}/items",
        headers=bearer,
        files={"file": ("points.csv", _clusters_csv(30))},
    )
    rng = np.random.default_rng(1)
    rows = [[f"p{i}" for i in rng.choice(30, size=3, replace=False)] for _ in range(40)]
    httpx.post(
        f"{server}{API}/projects/{project_id}/triplets",
        headers=bearer,
        files={"file": ("answers.json", json.dumps(rows))},
    )
    created = httpx.post(
        f"{server}{API}/projects/{project_id}/models",
        headers=bearer,
        json={"name": "map", "kind": "tete", "params": {"max_iter": 20}},
    )
    assert created.status_code == 201
    Worker(app.state.session_factory).run(until_idle=True)
    page.goto(f"{server}/projects/{project_id}")
    work = page.locator(".work")
    expect(work).to_contain_text("No build yet")
    expect(work.locator("li", has_text="map")).to_contain_text("v1 ready")

    page.get_by_role("link", name="Settings").click()
    page.get_by_label("Name", exact=True).fill("")
    page.get_by_role("button", name="Save name and description").click()
    expect(page.locator("#about-name-error")).to_have_text("must not be empty")
    page.get_by_label("Name", exact=True).fill("Pilot, wave 2")
    page.get_by_label("Description").fill("Forty raters from the lab pool")
    page.get_by_role("button", name="Save name and description").click()
    expect(page.get_by_role("status")).to_have_text("Saved the project's name and description.")
    look_at_pages(
        page,
        browser,
        server,
        {
            "settings-about": f"/projects/{project_id}/settings",
            "overview-work": f"/projects/{project_id}",
        },
        screenshots_dir(tmp_path),
    )
    page.goto(f"{server}/projects/{project_id}")
    expect(page.get_by_role("heading", level=1)).to_have_text("Pilot, wave 2")
    expect(page.locator(".lead")).to_have_text("Forty raters from the lab pool")

    confirm = Confirmations(page)
    page.get_by_role("link", name="Models").click()
    card = page.locator(".model", has_text="map")
    card.get_by_role("button", name="Delete").click()
    assert confirm.asked == [
        "Delete the model map with its 1 version? Predictions from it stop at once; this "
        "cannot be undone."
    ]
    expect(page.locator(".model", has_text="map")).to_have_count(1)
    confirm.accept = True
    card.get_by_role("button", name="Delete").click()
    expect(page.locator(".model")).to_have_count(0)
    assert httpx.get(f"{server}{API}/projects/{project_id}/models", headers=bearer).json() == []

    page.get_by_role("link", name="Downloads").click()
    archive = page.get_by_role("link", name="Download the whole project (archive)")
    expect(archive).to_have_attribute("href", f"/api/v1/projects/{project_id}/archive")

    page.get_by_role("link", name="Settings").click()
    page.get_by_label("Type the project's name").fill("Pilot")
    page.get_by_role("button", name="Delete the project").click()
    expect(page.locator("#confirm-name-error")).to_contain_text("type the project's name")
    assert httpx.get(f"{server}{API}/projects/{project_id}", headers=bearer).status_code == 200
    page.get_by_label("Type the project's name").fill("Pilot, wave 2")
    page.get_by_role("button", name="Delete the project").click()
    expect(page).to_have_url(re.compile(rf"^{re.escape(server)}/\?deleted="))
    expect(page.get_by_role("status")).to_contain_text("Deleted the project “Pilot, wave 2”")
    expect(page.locator("table.projects")).not_to_contain_text("Pilot")
    assert httpx.get(f"{server}{API}/projects/{project_id}", headers=bearer).status_code == 404


@pytest.mark.one_database  # the page and its forms; the API test covers both databases
def test_items_are_browsed_searched_and_fixed_on_their_page(
    app, server, browser, researcher, tmp_path
):
    from tests.support.uploads import png, zip_bytes

    page, project_id, bearer = a_project_in_the_browser(app, browser, server, "Things")
    archive = zip_bytes(
        {
            "manifest.csv": "key,label,text,image\ncat,animal,a tabby cat,cat.png\n"
            "car,vehicle,a red car,car.png\ncap,,a blue cap,cap.png\n",
            "cat.png": png((120, 120, 120)),
            "car.png": png((200, 30, 30)),
            "cap.png": png((30, 30, 200)),
        }
    )
    stored = httpx.post(
        f"{server}{API}/projects/{project_id}/items",
        headers=bearer,
        files={"file": ("things.zip", archive)},
    )
    assert stored.status_code == 201, stored.text
    page.get_by_role("link", name="Items").click()
    rows = page.locator("table.items tbody tr")
    expect(rows).to_have_count(3)
    # The thumbnails are there (they load lazily: wait for them).
    until(page, "[...document.querySelectorAll('table.items img')].every(i => i.complete)")
    loaded = page.evaluate(
        "Array.from(document.querySelectorAll('table.items img')).map(i => i.naturalWidth)"
    )
    assert loaded == [8, 8, 8]

    page.get_by_label("Search").fill("red")
    page.get_by_role("button", name="Search").click()
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("car")
    page.get_by_role("link", name="Show all").click()
    expect(rows).to_have_count(3)

    cap = page.locator("#item-" + str(_item_id(server, bearer, project_id, "cap")))
    cap.get_by_label("Label", exact=True).fill("clothing")
    cap.get_by_role("button", name="Save").click()
    expect(cap.get_by_role("status")).to_have_text("saved")
    expect(cap.get_by_label("Split")).to_have_value("train")  # labelled: now a training item
    fixed = httpx.get(f"{server}{API}/projects/{project_id}/items/cap", headers=bearer).json()
    assert (fixed["label"], fixed["split"]) == ("clothing", "train")
    cap.get_by_label("Label", exact=True).fill("")
    cap.get_by_label("Split").select_option("test")
    cap.get_by_role("button", name="Save").click()
    expect(cap.get_by_role("alert")).to_have_text("split: split 'test' needs a label")
    kept = httpx.get(f"{server}{API}/projects/{project_id}/items/cap", headers=bearer).json()
    assert (kept["label"], kept["split"]) == ("clothing", "train")  # refused: nothing changed

    # Deleting: asked first, refused while a build asks about the item, then done, with
    # its answers, and the row says so.
    build = httpx.post(
        f"{server}{API}/projects/{project_id}/builds",
        headers=bearer,
        json={"n_trees": 1, "random_state": 0},
    ).json()  # waits for raters: no answers yet
    page.reload()
    confirm = Confirmations(page)
    sent = []
    page.on("request", lambda request: request.method == "POST" and sent.append(request.url))
    car = page.locator("#item-" + str(_item_id(server, bearer, project_id, "car")))
    car.get_by_role("button", name="Delete").click()
    assert confirm.asked == [
        "Delete the item car? Queries about it are withdrawn; models fitted with it show it "
        "until their next fit. This cannot be undone."
    ]
    cap.get_by_role("button", name="Save").click()  # a request after it: sent in order
    expect(cap.get_by_role("status")).to_have_text("saved")
    assert [url.rsplit("/", 1)[-1] for url in sent] == ["fix"]  # declined: nothing sent
    assert httpx.get(f"{server}{API}/projects/{project_id}/items/car", headers=bearer).is_success
    confirm.accept = True
    car.get_by_role("button", name="Delete").click()
    expect(car.get_by_role("alert")).to_contain_text(
        "item 'car' is in the trees of build 1 (running)"
    )
    cancelled = httpx.post(
        f"{server}{API}/projects/{project_id}/builds/{build['id']}/cancel", headers=bearer
    )
    assert cancelled.status_code == 200, cancelled.text
    answers = "anchor,closer,farther\ncar,cap,cat\ncat,cap,car\n"
    assert (
        httpx.post(
            f"{server}{API}/projects/{project_id}/triplets",
            headers=bearer,
            files={"file": ("answers.csv", answers)},
        ).status_code
        == 201
    )
    page.reload()
    car.get_by_role("button", name="Delete").click()
    assert confirm.asked[-1].startswith("Delete the item car and the 2 answers that name it?")
    expect(car).to_have_text("Deleted car and the 2 answers that named it.")
    gone = httpx.get(f"{server}{API}/projects/{project_id}/items/car", headers=bearer)
    assert gone.status_code == 404
    project = httpx.get(f"{server}{API}/projects/{project_id}", headers=bearer).json()
    assert (project["item_count"], project["triplet_count"]) == (2, 0)
    look_at_pages(
        page, browser, server, {"items": f"/projects/{project_id}/items"}, screenshots_dir(tmp_path)
    )


def _item_id(server, bearer, project_id, key) -> int:
    return httpx.get(f"{server}{API}/projects/{project_id}/items/{key}", headers=bearer).json()[
        "id"
    ]


@pytest.mark.one_database  # the page's polling
def test_the_models_page_shows_what_the_worker_does_by_itself(app, server, browser, researcher):
    """No fit runs, yet the page keeps up: a fit the refit check starts on its own shows
    up without a reload, and a poll that finds nothing new swaps nothing (204). "Train
    now" on a model without answers says why on the model's card."""
    import numpy as np

    from app.training.jobs import refit_check
    from app.worker.loop import Worker

    page, project_id, bearer = a_project_in_the_browser(app, browser, server, "Keeps up")
    items = httpx.post(
        f"{server}{API}/projects/{project_id}/items",
        headers=bearer,
        files={"file": ("points.csv", _clusters_csv(30))},
    )
    assert items.status_code == 201
    created = httpx.post(
        f"{server}{API}/projects/{project_id}/models",
        headers=bearer,
        json={"name": "map", "kind": "tete", "params": {"max_iter": 20}, "min_answers": 40},
    )
    assert created.status_code == 201 and created.json()["latest"] is None
    polls: list[int] = []
    page.on(
        "response",
        lambda response: polls.append(response.status) if "seen=" in response.url else None,
    )
    page.goto(f"{server}/projects/{project_id}/models")
    card = page.locator(".model", has_text="map")
    expect(card).to_contain_text("Not fitted yet")
    card.get_by_role("button", name="Train now").click()
    expect(page.locator(".model", has_text="map").get_by_role("alert")).to_contain_text(
        "t-ETE needs at least 10 answers to fit"
    )

    rng = np.random.default_rng(0)
    rows = [[f"p{i}" for i in rng.choice(30, size=3, replace=False)] for _ in range(40)]
    answers = httpx.post(
        f"{server}{API}/projects/{project_id}/triplets",
        headers=bearer,
        files={"file": ("answers.json", json.dumps(rows))},
    )
    assert answers.status_code == 201
    for _ in range(150):  # nothing new for the page yet: the polls swap nothing
        if 204 in polls:
            break
        page.wait_for_timeout(100)  # (Playwright hands the page's responses over meanwhile)
    assert 204 in polls
    refit_check(app.state.session_factory)
    Worker(app.state.session_factory).run(until_idle=True)
    expect(page.locator(".model", has_text="map")).to_contain_text("v1 ready", timeout=15_000)
    expect(page.locator(".model", has_text="map").get_by_role("alert")).to_have_count(0)


def _answer_by_oracle(server, bearer, project_id, queries_path, oracle, post_path) -> int:
    """Answer every query a build or a routing asks (by item key) with the oracle, until
    it asks none; returns the number of answers sent."""
    import numpy as np

    sent = 0
    for _ in range(60):
        queries = httpx.get(f"{server}{API}/projects/{project_id}/{queries_path}", headers=bearer)
        if not queries.json():
            return sent
        rows = []
        for query in queries.json():
            a, p, q = (int(query[role][1:]) for role in ("anchor", "left", "right"))
            rows.append([f"p{i}" for i in oracle.answer(np.array([[a, p, q]]))[0]])
        response = post_path(rows)
        assert response.status_code in (200, 201), response.text
        sent += len(rows)
    raise AssertionError(f"{queries_path} still asks after 60 rounds")


def _a_finished_build(
    app, server, bearer, project_id, oracle, n_trees: int, rater: str | None = None
) -> tuple[int, int]:
    """A CompRF build over the project's training items, its questions answered by the
    oracle through the API (as `rater`, if named) and folded in by the worker until it
    is complete; returns the build's id and the answers sent."""
    from app.builds.jobs import sweep
    from app.worker.loop import Worker

    build = httpx.post(
        f"{server}{API}/projects/{project_id}/builds",
        headers=bearer,
        json={"n_trees": n_trees, "random_state": 0},
    ).json()

    def upload(rows):
        by = {"rater": rater} if rater else {}
        answers = [{"anchor": a, "closer": c, "farther": f, **by} for a, c, f in rows]
        response = httpx.post(
            f"{server}{API}/projects/{project_id}/triplets",
            headers=bearer,
            files={"file": ("answers.json", json.dumps(answers))},
        )
        sweep(app.state.session_factory)
        Worker(app.state.session_factory).run(until_idle=True)
        return response

    sent = _answer_by_oracle(
        server, bearer, project_id, f"builds/{build['id']}/queries?limit=100000", oracle, upload
    )
    return build["id"], sent


def _a_forest_model(app, server, bearer, project_id, oracle, n_trees: int) -> int:
    """A finished build with a model "forest" on it; returns the build's id."""
    build_id, _ = _a_finished_build(app, server, bearer, project_id, oracle, n_trees)
    forest = httpx.post(
        f"{server}{API}/projects/{project_id}/models",
        headers=bearer,
        json={"name": "forest", "kind": "comprf", "build_id": build_id},
    )
    assert forest.status_code == 201, forest.text
    return build_id


@pytest.mark.one_database  # the page; the API test covers both databases
def test_a_finished_build_is_built_again_without_a_rater_excluded_since(
    app, server, browser, researcher, tmp_path
):
    """The researcher excludes a rater on the Raters page; the finished build says it
    holds that rater's answers, "Build again…" shows the answers a new build would ask
    for, and its button starts one without them."""
    import numpy as np

    from app.learn import FeatureOracle

    page, project_id, bearer = a_project_in_the_browser(app, browser, server, "Again")
    items = _clusters_csv(30)
    points = np.array(
        [[float(v) for v in line.split(",")[3].split()] for line in items.split("\n")[1:-1]]
    )
    httpx.post(
        f"{server}{API}/projects/{project_id}/items",
        headers=bearer,
        files={"file": ("points.csv", items)},
    )
    build_id, answered = _a_finished_build(
        app, server, bearer, project_id, FeatureOracle(points), n_trees=1, rater="spammer"
    )
    page.get_by_role("link", name="Raters").click()
    page.locator("tr", has_text="spammer").get_by_role("button", name="Exclude").click()
    expect(page.locator("tr", has_text="spammer")).to_contain_text("Excluded")

    page.get_by_role("link", name="Builds").click()
    notice = page.locator(f"#build-{build_id} .notice")
    expect(notice).to_contain_text(
        f"Its trees hold {answered:,} answers of 1 rater excluded since it finished"
    )
    look_at_pages(
        page,
        browser,
        server,
        {"builds-excluded": f"/projects/{project_id}/builds"},
        screenshots_dir(tmp_path),
    )
    page.goto(f"{server}/projects/{project_id}/builds")
    page.locator(f"#build-{build_id}").get_by_role("link", name="Build again…").click()
    # What it would ask for, before anything starts.
    expect(page.locator("h1")).to_have_text("Build 1 again?")
    asked = httpx.get(
        f"{server}{API}/projects/{project_id}/builds/{build_id}/rebuild/estimate", headers=bearer
    ).json()
    assert 0 < asked["answers"]
    expect(page.locator(".again-answers")).to_have_text(f"~{asked['answers']:,}")
    shoot(page, screenshots_dir(tmp_path) / "build-again-desktop.png", full_page=True)
    assert len(httpx.get(f"{server}{API}/projects/{project_id}/builds", headers=bearer).json()) == 1
    page.get_by_role("button", name=f"Build again, asking ~{asked['answers']:,} answers").click()
    newest = page.locator(".build").first
    expect(newest).to_have_attribute("data-status", "running")
    expect(newest.locator("h3")).to_contain_text("Build 2")
    expect(page.locator(f"#build-{build_id}")).to_have_attribute("data-status", "complete")
    builds = httpx.get(f"{server}{API}/projects/{project_id}/builds", headers=bearer).json()
    assert [b["status"] for b in builds] == ["complete", "running"]
    assert builds[1]["params"] == builds[0]["params"]


def test_the_models_page_says_which_model_labels_best(app, server, browser, researcher, tmp_path):
    """Three models on the same project: the page ranks them by the share of the test
    split each labels right (an item left unlabelled counts as wrong); a CompRF forest
    joins once the researcher has it label the test split by routing, from its card."""
    import numpy as np

    from app.builds.routing import newest_routing
    from app.learn import FeatureOracle, random_triplets
    from app.worker.loop import Worker

    page, project_id, bearer = a_project_in_the_browser(app, browser, server, "Which labels")
    items = _clusters_csv(60)
    points = np.array(
        [[float(v) for v in line.split(",")[3].split()] for line in items.split("\n")[1:-1]]
    )
    answers = random_triplets(60, 3000, FeatureOracle(points), random_state=0)
    body = "anchor,closer,farther\n" + "\n".join(f"p{a},p{c},p{f}" for a, c, f in answers)
    for what, filename, content in (("items", "points.csv", items), ("triplets", "t.csv", body)):
        response = httpx.post(
            f"{server}{API}/projects/{project_id}/{what}",
            headers=bearer,
            files={"file": (filename, content)},
        )
        assert response.status_code == 201, response.text
    for name, kind in (("boost", "tripletboost"), ("map", "tete")):
        created = httpx.post(
            f"{server}{API}/projects/{project_id}/models",
            headers=bearer,
            json={"name": name, "kind": kind, "auto_refit": False},
        )
        assert created.status_code == 201, created.text
    Worker(app.state.session_factory).run(until_idle=True)
    served = {
        model["name"]: model["serving"]["metrics"]["test"]
        for model in httpx.get(f"{server}{API}/projects/{project_id}/models", headers=bearer).json()
    }
    right = {name: found["accuracy"] * found["coverage"] for name, found in served.items()}

    # A two-tree forest over the training items, its questions answered by the oracle.
    oracle = FeatureOracle(points)
    build_id = _a_forest_model(app, server, bearer, project_id, oracle, n_trees=2)
    page.get_by_role("link", name="Models").click()
    forest_card = page.locator(".model", has_text="forest")
    expect(forest_card.get_by_role("button", name="Train now")).to_have_count(0)
    expect(page.locator(".labelling tr", has_text="forest")).to_have_count(0)
    forest_card.get_by_role("button", name="Label test and unlabelled items").click()
    expect(page.locator(".model", has_text="forest")).to_contain_text("items labelled")
    with unit_of_work(app.state.session_factory) as session:
        routing_id = newest_routing(session, build_id).id

    def answer_routing(rows):
        return httpx.post(
            f"{server}{API}/projects/{project_id}/routings/{routing_id}/answers",
            headers=bearer,
            json={"answers": rows},
        )

    _answer_by_oracle(
        server,
        bearer,
        project_id,
        f"routings/{routing_id}/queries",
        oracle,
        answer_routing,
    )
    labels = httpx.get(
        f"{server}{API}/projects/{project_id}/routings/{routing_id}", headers=bearer
    ).json()
    assert labels["status"] == "complete"
    truth = {f"p{i}": name for i, name in enumerate(["red", "green", "blue"] * 20)}
    tested = [f"p{i}" for i in range(51, 60)]
    right["forest"] = float(np.mean([labels["result"][k]["label"] == truth[k] for k in tested]))
    best = max(right, key=right.get)

    page.reload()
    expect(page.locator(".model", has_text="forest")).to_contain_text("Labelled 9 test")
    # REST clients get the same standings.
    standings = httpx.get(f"{server}{API}/projects/{project_id}/labelling", headers=bearer).json()
    assert standings["measure"] == "test"
    by_name = {row["name"]: row for row in standings["standings"]}
    assert {name: row["test"]["right"] for name, row in by_name.items()} == pytest.approx(right)
    assert by_name["forest"]["cv"] is None and by_name["forest"]["kind"] == "comprf"
    assert standings["best_model_id"] == by_name[best]["model_id"]
    card = page.locator(".labelling")
    expect(card).to_contain_text(f"Now: {best}, labelling {100 * right[best]:.0f}% of the items")
    expect(card.locator("tr.chosen")).to_contain_text(best)
    for name in right:
        expect(card.locator("tr", has_text=name)).to_contain_text(f"{100 * right[name]:.0f}% /")
    shoot(page, screenshots_dir(tmp_path) / "models-labelling.png", full_page=True)

    # The forest's labels download beside the other models' predictions.
    page.get_by_role("link", name="Downloads").click()
    expect(page.get_by_text("The labels of its newest routing (9 items)")).to_be_visible()
    with page.expect_download() as download:
        page.get_by_role("link", name="Predictions CSV").last.click()
    rows = Path(download.value.path()).read_text().splitlines()
    assert rows[0].startswith("key,label") and len(rows) == 1 + 9


@pytest.mark.one_database  # the page's message: nothing the database changes
def test_a_forest_with_nothing_to_label_says_so_instead_of_offering_to(
    app, server, browser, researcher
):
    import numpy as np

    from app.learn import FeatureOracle

    page, project_id, bearer = a_project_in_the_browser(app, browser, server, "All labelled")
    items = _clusters_csv(30).replace(",test,", ",train,")
    points = np.array(
        [[float(v) for v in line.split(",")[3].split()] for line in items.split("\n")[1:-1]]
    )
    uploaded = httpx.post(
        f"{server}{API}/projects/{project_id}/items",
        headers=bearer,
        files={"file": ("points.csv", items)},
    )
    assert uploaded.status_code == 201, uploaded.text
    _a_forest_model(app, server, bearer, project_id, FeatureOracle(points), n_trees=1)
    page.get_by_role("link", name="Models").click()
    card = page.locator(".model", has_text="forest")
    expect(card).to_contain_text("no test or unlabelled items for the forest to label")
    # Nothing to press but the model's own Delete: no labelling, no training.
    expect(card.get_by_role("button")).to_have_text(["Delete"])


@pytest.mark.one_database  # the chart's script: nothing the database changes
def test_hovering_a_point_of_a_large_map_shows_its_item(
    app, live_server, browser, researcher, tmp_path
):
    """A map of 2,100 items (one series of more than 2,000 points: ECharts draws it in
    its large mode, whose events carry no data): hovering over points brings up each
    one's card, point after point within the same series."""
    server = live_server
    with unit_of_work(app.state.session_factory) as session:
        token = create_token(session=session, researcher_name="ada@lab.example")
    bearer = {"Authorization": f"Bearer {token}"}
    pid = httpx.post(f"{server}{API}/projects", headers=bearer, json={"name": "map"}).json()["id"]
    items = "key,text\n" + "".join(f"i{i},item {i}\n" for i in range(2_100))
    uploaded = httpx.post(
        f"{server}{API}/projects/{pid}/items",
        headers=bearer,
        files={"file": ("items.csv", items)},
        timeout=60,
    )
    assert uploaded.status_code == 201, uploaded.text
    rng = np.random.default_rng(0)
    triplets = [
        [f"i{a}", f"i{b}", f"i{c}"]
        for a, b, c in rng.integers(0, 2_100, size=(8_000, 3))
        if len({a, b, c}) == 3
    ]
    posted = httpx.post(
        f"{server}{API}/projects/{pid}/triplets",
        headers=bearer,
        files={"file": ("t.json", json.dumps(triplets))},
        timeout=60,
    )
    assert posted.status_code == 201, posted.text
    model = httpx.post(
        f"{server}{API}/projects/{pid}/models",
        headers=bearer,
        json={"name": "map", "kind": "tete", "params": {"n_components": 2, "t": 1, "max_iter": 20}},
    ).json()

    embedding = f"{server}{API}/projects/{pid}/models/{model['id']}/embedding"
    wait_for(  # the worker fits it
        lambda: httpx.get(embedding, headers=bearer).status_code == 200, 60, "the model's fit"
    )

    page = browser.new_page(viewport=DESKTOP)
    sign_in(page, server)
    page.goto(f"{server}/projects/{pid}/models/{model['id']}/embedding")
    until(page, "document.getElementById('embedding')?.dataset.drawnMs !== undefined", 60)
    page.locator("#scatter").scroll_into_view_if_needed()
    shown = set()
    for index in range(0, 600, 100):
        x, y = point_on_scatter(page, index)
        page.mouse.move(x, y)
        page.wait_for_timeout(100)
        shown.add(page.locator("#item-card .key").inner_text())
    assert len(shown) >= 4 and all(re.fullmatch(r"i\d+", key) for key in shown), shown
    shoot(page, screenshots_dir(tmp_path) / "embedding-large-hover.png")


def test_the_models_page_sets_a_choice_models_accuracy_beside_the_noise_ceiling(
    app, server, browser, researcher, tmp_path
):
    """A lab's judgement file with repeated screens (THINGS' noise-ceiling set: each
    screen answered by several named raters) and a choice model: the Models page says how
    often a rater chose as the others' majority, with its interval, and sets the model's
    held-out choice accuracy beside it; on a phone too, nothing scrolling sideways."""
    import numpy as np

    from app.worker.loop import Worker

    page, project_id, bearer = a_project_in_the_browser(app, browser, server, "Ceiling")
    rng = np.random.default_rng(5)
    X = (rng.random((24, 4)) < 0.4) * rng.gamma(3.0, 1.0, (24, 4))
    rows = []
    for screen in range(60):
        shown = rng.choice(24, 3, replace=False)
        i, j, k = shown
        likeness = np.array([X[j] @ X[k], X[i] @ X[k], X[i] @ X[j]])
        p = np.exp(likeness - likeness.max())
        p /= p.sum()
        raters = range(8) if screen < 30 else [screen % 8]  # the first 30 repeated
        for rater in raters:
            odd = shown[rng.choice(3, p=p)]
            rows.append(f"k{i},k{j},k{k},k{odd},r{rater}")
    files = (
        ("items", "items.csv", "key\n" + "".join(f"k{n}\n" for n in range(24))),
        ("judgements", "things.csv", "item1,item2,item3,pick1,rater\n" + "\n".join(rows)),
    )
    for what, filename, content in files:
        response = httpx.post(
            f"{server}{API}/projects/{project_id}/{what}",
            headers=bearer,
            files={"file": (filename, content)},
        )
        assert response.status_code == 201, response.text
    created = httpx.post(
        f"{server}{API}/projects/{project_id}/models",
        headers=bearer,
        json={"name": "things", "kind": "choice", "params": {"n_components": 8}},
    )
    assert created.status_code == 201, created.text
    Worker(app.state.session_factory).run(until_idle=True)
    ceiling = httpx.get(f"{server}{API}/projects/{project_id}/ceiling", headers=bearer).json()
    assert ceiling["screens"] == 30 and ceiling["raters"] == 8
    model = httpx.get(f"{server}{API}/projects/{project_id}/models", headers=bearer).json()[0]
    held = model["serving"]["metrics"]["heldout_choice_accuracy"]

    page.get_by_role("link", name="Models").click()
    card = page.locator(".ceiling")
    expect(card).to_contain_text(f"{100 * ceiling['accuracy']:.1f}%")
    expect(card).to_contain_text(f"{100 * ceiling['majority_share']:.1f}%")
    expect(card).to_contain_text("30 screens, 8 raters")
    expect(card.locator("tr", has_text="things")).to_contain_text(f"{100 * held:.1f}%")
    # The version says how it chose its sparsity, as a t-ETE model says its dimension.
    expect(page.locator(".model", has_text="things")).to_contain_text("the sparsest within")
    look_at_pages(
        page,
        browser,
        server,
        {"models-ceiling": f"/projects/{project_id}/models"},
        screenshots_dir(tmp_path),
    )
    shoot(page, screenshots_dir(tmp_path) / "models-ceiling.png", full_page=True)


@pytest.mark.one_database  # the page; tests/test_active_gain.py covers both databases
def test_the_models_page_says_what_asking_actively_saved_from_the_studys_arms(
    app, server, browser, researcher, tmp_path
):
    """A study whose arms ask differently (one only at random): the model's card draws
    each arm's held-out error against its answers, and says in words how many answers
    the random arm needs for the active arm's error, with its interval; while the worker
    measures, a progress bar; on a phone too, nothing scrolling sideways."""
    import numpy as np

    from app.worker.loop import Worker

    page, project_id, bearer = a_project_in_the_browser(app, browser, server, "Gain")
    rng = np.random.default_rng(9)
    X = rng.normal(size=(30, 2))
    rows = "key,features\n" + "".join(f"k{n},{x} {y}\n" for n, (x, y) in enumerate(X))
    uploaded = httpx.post(
        f"{server}{API}/projects/{project_id}/items",
        headers=bearer,
        files={"file": ("i.csv", rows)},
    )
    assert uploaded.status_code == 201, uploaded.text
    settings = {
        "attention_rate": 0,
        "answers_per_rater": 60,
        "arms": [{"name": "baseline", "random_share": 1}, {"name": "adaptive"}],
    }
    changed = httpx.patch(
        f"{server}{API}/projects/{project_id}/rating", headers=bearer, json=settings
    )
    assert changed.status_code == 200, changed.text
    slug = httpx.put(
        f"{server}{API}/projects/{project_id}/link", headers=bearer, json={"state": "open"}
    ).json()["public_slug"]
    for _ in range(4):
        joined = httpx.post(f"{server}{API}/rate/{slug}/raters", json={})
        token = {"X-Rater-Token": joined.json()["rater_token"]}
        state = httpx.get(f"{server}{API}/rate/{slug}/next", headers=token).json()
        while state["comparison"] is not None:
            shown = state["comparison"]
            a, left, right = (
                X[int(shown[side]["key"][1:])] for side in ("anchor", "left", "right")
            )
            nearer = np.linalg.norm(a - left) < np.linalg.norm(a - right)
            state = httpx.post(
                f"{server}{API}/rate/{slug}/answers",
                headers=token,
                json={"query_id": shown["query_id"], "choice": "left" if nearer else "right"},
            ).json()
    created = httpx.post(
        f"{server}{API}/projects/{project_id}/models",
        headers=bearer,
        json={"name": "map", "kind": "tete", "auto_refit": False, "params": {"n_components": 2}},
    )
    assert created.status_code == 201, created.text
    Worker(app.state.session_factory).run(until_idle=True)

    page.get_by_role("link", name="Models").click()
    card = page.locator(".model", has_text="map").locator(".gain")
    expect(card).to_contain_text("What asking actively saved")
    expect(card.locator("progress")).to_be_visible()  # asked for by the visit
    Worker(app.state.session_factory).run(until_idle=True)
    gain_url = f"{server}{API}/projects/{project_id}/models/{created.json()['id']}/gain"
    gain = httpx.get(gain_url, headers=bearer).json()
    assert gain["status"] == "ready"
    active = gain["arms"][1]
    figure = active["gain"]
    first = "its first " if figure["answers"] < active["answers"] else ""
    expect(card).to_contain_text(
        f"Arm adaptive reached a held-out triplet error of {100 * figure['error']:.1f}% "
        f"with {first}{figure['answers']} answers"
    )
    expect(card).to_contain_text("Asked at random, arm baseline")
    expect(card.locator("tr", has_text="baseline")).to_contain_text("at random")
    # Each fit kept the loss the version chose (its dimension was given), and says so.
    expect(card).to_contain_text(
        f"Every fit keeps what the version chose on all its answers (loss {gain['fixed']['t']})"
    )
    until(page, "document.querySelector('.gain [data-chart]')?.dataset.drawn === '1'")
    look_at_pages(
        page,
        browser,
        server,
        {"models-gain": f"/projects/{project_id}/models"},
        screenshots_dir(tmp_path),
    )
    shoot(page, screenshots_dir(tmp_path) / "models-gain.png", full_page=True)
