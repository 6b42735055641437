"""A lab shares a project in Chromium: the owner invites from the Members page, the
invitee opens the link in their own browser, makes an account there and lands in the
project; a viewer sees the members but no form to change them, and no participant's id;
a used link says so."""

from __future__ import annotations

import re

import httpx
import pytest
from playwright.sync_api import expect

from tests.pages.test_workspace_pages import a_project_in_the_browser, researcher, sign_in
from tests.support.browser import DESKTOP, PHONE, screenshots_dir, shoot

__all__ = ["researcher"]  # the fixture, signed in as by a_project_in_the_browser

API = "/api/v1"


@pytest.mark.one_database  # the pages; tests/test_members.py covers both databases
def test_an_invitation_is_made_opened_signed_up_with_and_used_once(
    app, server, browser, researcher, tmp_path
):
    shots = screenshots_dir(tmp_path)
    owner, project_id, bearer = a_project_in_the_browser(app, browser, server, "Faces")
    items = "key,text\n" + "".join(f"w{i},word {i}\n" for i in range(3))
    for kind, body in (
        ("items", items),
        ("triplets", "anchor,closer,farther,rater\nw0,w1,w2,PROLIFIC-9c\n"),
    ):
        sent = httpx.post(
            f"{server}{API}/projects/{project_id}/{kind}",
            files={"file": (f"{kind}.csv", body)},
            headers=bearer,
        )
        assert sent.status_code == 201, sent.text
    owner.get_by_role("link", name="Members").click()
    expect(owner.locator("table.members tbody tr")).to_have_count(1)  # the owner alone

    # A wrong address is refused inline, and nothing is made.
    owner.get_by_label("Email").fill("not an address")
    owner.locator("input[name=email]").evaluate("input => input.type = 'text'")
    owner.get_by_role("button", name="Make an invitation link").click()
    expect(owner.get_by_role("alert")).to_contain_text("is not an email address")
    assert (
        httpx.get(f"{server}{API}/projects/{project_id}/invitations", headers=bearer).json() == []
    )

    owner.get_by_label("Email").fill("sam@lab.example")
    owner.get_by_label("Role").select_option("viewer")
    owner.get_by_role("button", name="Make an invitation link").click()
    link = owner.locator("#invitation-link").text_content().strip()
    assert link.startswith(f"{server}/invitations/")
    expect(owner.locator("ul.invitations")).to_contain_text("sam@lab.example as viewer")
    shoot(owner, shots / "members-owner-desktop.png", full_page=True)
    owner.set_viewport_size(PHONE)
    assert owner.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    owner.set_viewport_size(DESKTOP)

    # Sam opens it in a browser of their own: no account yet, so they make one.
    sam = browser.new_context(viewport=PHONE).new_page()
    sam.goto(link)
    expect(sam.locator(".lead")).to_contain_text("to the project Faces as viewer")
    sam.get_by_label("Your name").fill("Sam")
    sam.get_by_label("Password").fill("short")
    sam.locator("input[name=password]").evaluate("input => input.removeAttribute('minlength')")
    sam.get_by_role("button", name="Make my account and join").click()
    expect(sam.get_by_role("alert")).to_contain_text("a password needs at least 10 characters")
    sam.get_by_label("Your name").fill("Sam")
    sam.get_by_label("Password").fill("a long enough password")
    shoot(sam, shots / "invitation-sign-up-phone.png", full_page=True)
    sam.get_by_role("button", name="Make my account and join").click()
    expect(sam).to_have_url(f"{server}/projects/{project_id}")
    assert sam.evaluate("document.documentElement.scrollWidth <= window.innerWidth")

    # A viewer: the members, no forms; the participants' page is refused, saying why.
    sam.get_by_role("link", name="Members").click()
    expect(sam.locator("table.members tbody tr")).to_have_count(2)
    expect(sam.get_by_text("Your role: viewer")).to_be_visible()
    expect(sam.get_by_role("button", name="Make an invitation link")).to_have_count(0)
    shoot(sam, shots / "members-viewer-phone.png", full_page=True)
    assert sam.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    sam.goto(f"{server}/projects/{project_id}/participants")
    expect(sam.locator("body")).to_contain_text("the owner can allow you to see them")
    # ... and the raters by pseudonym.
    sam.goto(f"{server}/projects/{project_id}/raters")
    expect(sam.locator("a.rater-id")).to_have_text(re.compile(r"^rater-\d+$"))
    assert "PROLIFIC" not in sam.content()
    sam.locator("a.rater-id").click()
    expect(sam.get_by_role("heading", level=1)).to_contain_text("rater-")
    expect(sam.get_by_text("Their data request")).to_have_count(0)
    assert "PROLIFIC" not in sam.content()

    # The owner lets Sam see them, and makes Sam an editor.
    owner.goto(f"{server}/projects/{project_id}/members")
    row = owner.locator("tr", has_text="Sam")
    row.get_by_label("Role of Sam").select_option("editor")
    row.get_by_role("button", name="Save").click()
    expect(owner.locator("tr", has_text="Sam").get_by_label("Role of Sam")).to_have_value("editor")
    sam.goto(f"{server}/projects/{project_id}/participants")
    expect(sam.get_by_role("heading", name="Participants")).to_be_visible()
    # Removing asks first; declined, nothing happens.
    asked = []
    owner.once("dialog", lambda dialog: (asked.append(dialog.message), dialog.dismiss()))
    owner.locator("tr", has_text="Sam").get_by_role("button", name="Remove").click()
    expect(owner.locator("table.members tbody tr")).to_have_count(2)
    assert asked and asked[0].startswith("Remove Sam?")
    shoot(owner, shots / "members-owner-editor-desktop.png", full_page=True)

    # The link is used: opened again, it says so.
    stranger = browser.new_context(viewport=DESKTOP).new_page()
    stranger.goto(link)
    expect(stranger.get_by_role("alert")).to_contain_text("each link joins once")
    shoot(stranger, shots / "invitation-used-desktop.png")

    # Ada, signed in elsewhere as herself, cannot use a link made for another address.
    second = httpx.post(
        f"{server}{API}/projects/{project_id}/invitations",
        json={"email": "tom@lab.example", "role": "editor"},
        headers=bearer,
    ).json()
    ada = browser.new_context(viewport=DESKTOP).new_page()
    sign_in(ada, server)
    ada.goto(second["link"])
    expect(ada.get_by_role("alert")).to_contain_text("This invitation is for tom@lab.example")
    members = httpx.get(f"{server}{API}/projects/{project_id}/members", headers=bearer).json()
    assert [(m["name"], m["role"]) for m in members] == [
        ("ada@lab.example", "owner"),
        ("Sam", "editor"),
    ]


@pytest.mark.one_database  # the pages; tests/test_webhooks.py covers both databases
def test_a_webhook_is_made_on_its_page_and_its_deliveries_logged(
    app, server, browser, researcher, tmp_path
):
    from app.webhooks import delivery, service
    from tests.test_webhooks import Receiver, _complete, _study

    shots = screenshots_dir(tmp_path)
    receiver = Receiver()
    try:
        page, project_id, bearer = a_project_in_the_browser(app, browser, server, "Voices")
        page.get_by_role("link", name="Webhooks").click()
        expect(page.get_by_text("No webhooks yet.")).to_be_visible()
        # No event chosen: refused inline, the address kept.
        page.get_by_label("Address (http or https)").fill(receiver.url)
        page.get_by_role("button", name="Make the webhook").click()
        expect(page.get_by_role("alert")).to_contain_text("events: none given")
        expect(page.get_by_label("Address (http or https)")).to_have_value(receiver.url)
        page.get_by_label("participant.completed").check()
        page.get_by_label("study.full").check()
        page.get_by_role("button", name="Make the webhook").click()
        secret = page.locator("#webhook-secret").text_content().strip()
        assert secret.startswith("whsec_")
        expect(page.locator("section.webhook h2")).to_have_text(receiver.url)

        # An event, found and sent by the worker's upkeep, shows in the log.
        with httpx.Client(base_url=server) as api:
            _complete(api, _study(api, bearer, project_id), "PROLIFIC-77")
        with app.state.session_factory.begin() as session:
            service.find_events(session)
        assert delivery.deliver_due(app.state.session_factory, (0.0,)) == 1
        page.goto(f"{server}/projects/{project_id}/webhooks")
        expect(page.locator("table.deliveries tbody tr")).to_have_count(1)
        expect(page.locator("table.deliveries")).to_contain_text("participant.completed")
        expect(page.locator("table.deliveries")).to_contain_text("delivered (204")
        assert "whsec_" not in page.content()  # the secret was shown once
        shoot(page, shots / "webhooks-desktop.png", full_page=True)
        page.set_viewport_size(PHONE)
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
        shoot(page, shots / "webhooks-phone.png", full_page=True)
        (event,) = receiver.events(secret)
        assert event["type"] == "participant.completed"
        assert event["data"]["participant"] == "PROLIFIC-77"

        page.once("dialog", lambda dialog: dialog.accept())
        page.get_by_role("button", name="Delete").click()
        expect(page.get_by_text("No webhooks yet.")).to_be_visible()
    finally:
        receiver.server.shutdown()
