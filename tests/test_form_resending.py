"""A reload of the page that answered a form sends the form again: on the pages that make
something shown once (an API token, a webhook and its secret, an invitation link), the
second sending makes nothing and says why, and a fresh form still makes another."""

from __future__ import annotations

import re

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from app.core.db import unit_of_work
from app.core.forms import SENT_FORMS_KEPT
from app.models import ApiToken, ProjectInvitation, Webhook
from tests.support.workspace import signed_in_page_csrf

_FORM_ID = re.compile(r'name="form_id" value="([A-Za-z0-9_-]+)"')


def _count(app, model) -> int:
    with unit_of_work(app.state.session_factory) as session:
        return session.scalar(select(func.count()).select_from(model))


def _form(browser, path: str) -> dict[str, str]:
    page = browser.get(path).text
    return {
        "csrf_token": re.search(r'name="csrf_token" value="([0-9a-f]+)"', page).group(1),
        "form_id": _FORM_ID.search(page).group(1),
    }


@pytest.mark.parametrize(
    ("page", "fields", "model", "made_status"),
    [
        ("/tokens", {"name": "notebook", "scope": "read", "reach": "all"}, ApiToken, 201),
        (
            "/projects/{pid}/webhooks",
            {"url": "https://lab.example.org/hook", "events": "participant.completed"},
            Webhook,
            200,
        ),
        (
            "/projects/{pid}/members/invite",
            {"email": "sam@lab.example", "role": "viewer"},
            ProjectInvitation,
            200,
        ),
    ],
    ids=["token", "webhook", "invitation"],
)
def test_a_reloaded_form_makes_nothing_twice(app, auth, project, page, fields, model, made_status):
    pid = project["id"]
    shown = "/projects/{pid}/members" if "invite" in page else page
    with TestClient(app) as browser:
        signed_in_page_csrf(browser, auth, "/tokens")
        before = _count(app, model)
        form = {**_form(browser, shown.format(pid=pid)), **fields}
        made = browser.post(page.format(pid=pid), data=form)
        assert made.status_code == made_status, made.text
        assert _count(app, model) == before + 1

        again = browser.post(page.format(pid=pid), data=form)  # what the reload sends
        assert again.status_code == 409, again.text
        assert "This form was sent already" in again.text
        assert _count(app, model) == before + 1

        if model is not ProjectInvitation:  # a second invitation of Sam is its own refusal
            fresh = {**_form(browser, shown.format(pid=pid)), **fields}
            assert browser.post(page.format(pid=pid), data=fresh).status_code == made_status
            assert _count(app, model) == before + 2


def test_the_browser_keeps_only_its_last_sent_forms(app, auth):
    with TestClient(app) as browser:
        signed_in_page_csrf(browser, auth, "/tokens")
        first = None
        for number in range(SENT_FORMS_KEPT + 1):
            form = {**_form(browser, "/tokens"), "name": f"t{number}", "scope": "read"}
            first = first or form
            assert browser.post("/tokens", data=form).status_code == 201
        kept = browser.cookies["closer_sent_forms"].strip('"').split(".")
        assert len(kept) == SENT_FORMS_KEPT and first["form_id"] not in kept
