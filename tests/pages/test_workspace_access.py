"""The workspace's pages through axe-core in Chromium: no serious or critical WCAG 2.2
A/AA violation on any of them, desktop and phone, light and dark."""

from __future__ import annotations

import pytest

from tests.pages.test_language_pages import AXE, WCAG_AA
from tests.pages.test_workspace_pages import sign_in_with_token
from tests.support.links import open_link
from tests.support.uploads import coloured_squares, upload

API = "/api/v1"
pytestmark = pytest.mark.one_database  # the pages themselves


def serious_violations(page) -> list[str]:
    page.add_script_tag(path=str(AXE))
    return page.evaluate(
        "async (tags) => (await axe.run(document, {runOnly: {type: 'tag', values: tags}}))"
        ".violations.filter(v => v.impact === 'serious' || v.impact === 'critical')"
        ".map(v => `${v.id} (${v.impact}): ${v.nodes.length} × ` + v.nodes[0].target.join(' ')"
        " + ': ' + (v.nodes[0].any[0]?.message ?? ''))",
        WCAG_AA,
    )


@pytest.mark.parametrize(
    "screen",
    [
        {"viewport": {"width": 1280, "height": 800}, "color_scheme": "light"},
        {"viewport": {"width": 390, "height": 844}, "color_scheme": "dark", "is_mobile": True},
    ],
)
def test_every_workspace_page_has_no_serious_violation(
    client, auth, project, server, browser, screen
):
    project_id = project["id"]
    labels = ["a", "b", "c"] * 4
    assert (
        upload(
            client, auth, project_id, "items", "s.zip", coloured_squares(12, labels=labels)
        ).status_code
        == 201
    )
    open_link(client, auth, project_id)
    context = browser.new_context(bypass_csp=True, **screen)
    page = context.new_page()
    sign_in_with_token(page, server, auth["Authorization"].removeprefix("Bearer "))
    found = {}
    for path in (
        "/",
        f"/projects/{project_id}",
        f"/projects/{project_id}/settings",
        f"/projects/{project_id}/items",
        f"/projects/{project_id}/uploads",
        f"/projects/{project_id}/raters",
        f"/projects/{project_id}/participants",
        f"/projects/{project_id}/builds",
        f"/projects/{project_id}/models",
        f"/projects/{project_id}/downloads",
        f"/projects/{project_id}/members",
        f"/projects/{project_id}/webhooks",
        "/tokens",
    ):
        page.goto(f"{server}{path}")
        found[path] = serious_violations(page)
    bad = {path: said for path, said in found.items() if said}
    assert bad == {}, "\n".join(f"{path}: {said}" for path, said in bad.items())
    context.close()
