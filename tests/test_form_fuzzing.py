"""Issue 32: the workspace's forms fuzzed as schemathesis fuzzes the API. The forms are
found as a browser finds them: every POST form on the pages of a seeded project (its
fields, hidden ones included), each sent with generated values (hostile text: NUL,
deep brackets, 5,000-digit numbers, NaN, 100,000 characters; random text and bytes)
and the page's own CSRF token, on both databases. No answer may be a server error."""

from __future__ import annotations

import re
from html.parser import HTMLParser

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.worker.loop import Worker
from tests.support.workspace import signed_in_page_csrf

pytestmark = pytest.mark.slow

API = "/api/v1"
HOSTILE = [
    "",
    " ",
    "\x00",
    "a\x00b",
    "[" * 5000,
    "{" * 5000,
    "1" + "0" * 5000,
    "-1",
    "0",
    "2147483648",
    "9223372036854775808",
    "NaN",
    "1e999",
    "-0.0",
    "x" * 100_000,
    '{"n_components": 3}',
    "<script>alert(1)</script>",
    "../../etc/passwd",
    "é" * 300,
    "true",
    "null",
]
# Forms that end the session or the project: sent last, or not at all.
ENDS_SESSION = re.compile(r"/logout")
ENDS_PROJECT = re.compile(r"/delete$|/projects/\d+$")


class _Forms(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.forms: list[dict] = []
        self.links: set[str] = set()
        self._current: dict | None = None

    def handle_starttag(self, tag: str, attrs) -> None:
        attributes = dict(attrs)
        if tag == "a" and (attributes.get("href") or "").startswith("/projects"):
            self.links.add(attributes["href"].split("#")[0])
        if tag == "form" and (attributes.get("method") or "get").lower() == "post":
            self._current = {"action": attributes.get("action") or "", "fields": {}}
            self.forms.append(self._current)
        elif tag in ("input", "select", "textarea", "button") and self._current is not None:
            name = attributes.get("name")
            if name:
                self._current["fields"][name] = (attributes.get("type") or tag).lower()

    def handle_endtag(self, tag: str) -> None:
        if tag == "form":
            self._current = None


def _crawl(client, start: str) -> dict[str, dict]:
    """Every POST form reachable from `start` within the project, by action."""
    seen: set[str] = set()
    forms: dict[str, dict] = {}
    waiting = [start]
    while waiting:
        path = waiting.pop()
        if path in seen or not path.startswith(start) or "export" in path:
            continue
        seen.add(path)
        page = client.get(path)
        if page.status_code != 200 or "text/html" not in page.headers["content-type"]:
            continue
        parser = _Forms()
        parser.feed(page.text)
        for form in parser.forms:
            if form["action"].startswith("/") and not ENDS_SESSION.search(form["action"]):
                forms.setdefault(form["action"].split("?")[0], {**form, "page": path})
        waiting.extend(parser.links - seen)
    return forms


@pytest.fixture
def seeded(app, client, auth, project):
    pid = project["id"]
    rows = "key,label,features\n" + "\n".join(f"k{i},{i % 3},{i} {i % 5}" for i in range(30))
    client.post(f"{API}/projects/{pid}/items", headers=auth, files={"file": ("i.csv", rows)})
    answers = "anchor,closer,farther,rater\n" + "\n".join(
        f"k{i},k{(i + 3) % 30},k{(i + 1) % 30},r{i % 2}" for i in range(60)
    )
    client.post(f"{API}/projects/{pid}/triplets", headers=auth, files={"file": ("t.csv", answers)})
    client.post(f"{API}/projects/{pid}/builds", headers=auth, json={"n_trees": 2})
    client.post(
        f"{API}/projects/{pid}/models",
        headers=auth,
        json={"name": "t", "kind": "tete", "train": False},
    )
    Worker(app.state.session_factory).run(until_idle=True)
    return pid


def _values(kind: str):
    if kind == "file":
        return st.binary(max_size=2000).map(lambda data: ("fuzz.bin", data))
    return st.sampled_from(HOSTILE) | st.text(max_size=200)


def test_generated_form_posts_find_no_server_error(client, auth, seeded):
    pid = seeded
    signed_in_page_csrf(client, auth, f"/projects/{pid}")
    forms = _crawl(client, f"/projects/{pid}")
    # The projects list's own forms (a new project, an archive import).
    for action, form in _crawl(client, "/projects").items():
        forms.setdefault(action, form)
    ordered = sorted(forms.values(), key=lambda form: bool(ENDS_PROJECT.search(form["action"])))
    assert len(ordered) >= 15, sorted(forms)  # the crawl found the workspace's forms
    failures: list[str] = []
    sent = 0
    statuses: dict[int, int] = {}
    for form in ordered:
        fields = {name: kind for name, kind in form["fields"].items() if name != "csrf_token"}
        if not fields:
            continue
        csrf = re.search(
            r'name="csrf_token" value="([0-9a-f]+)"', client.get(form["page"]).text
        ).group(1)
        text_fields = {n: _values(k) for n, k in fields.items() if k != "file"}
        file_fields = {n: _values(k) for n, k in fields.items() if k == "file"}

        @settings(
            max_examples=12,
            deadline=None,
            database=None,
            derandomize=True,
            suppress_health_check=list(HealthCheck),
        )
        @given(data=st.fixed_dictionaries(text_fields), files=st.fixed_dictionaries(file_fields))
        def post(data, files):
            nonlocal sent
            response = client.post(
                form["action"],
                data={**data, "csrf_token": csrf},
                files=files or None,
                follow_redirects=False,
            )
            sent += 1
            statuses[response.status_code] = statuses.get(response.status_code, 0) + 1
            if response.status_code >= 500:
                failures.append(f"{form['action']} {data!r:.300} -> {response.status_code}")

        post()
    print(f"{sent} form posts to {len(ordered)} forms; statuses {sorted(statuses.items())}")
    assert sum(count for status, count in statuses.items() if status < 400) > sent // 10
    assert not failures, failures[:10]
