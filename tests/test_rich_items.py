"""Items whose text is Markdown: rendered with inline marks where the study says so,
sanitised (no script, style, link or remote image), and plain text stays plain."""

from __future__ import annotations

import json

from tests.support.links import open_link
from tests.support.rating import configure
from tests.support.uploads import upload

API = "/api/v1"
HOSTILE = (
    "*very* **big** `E=mc²` ~~old~~ <script>alert(1)</script> <style>*{}</style> "
    "![tracker](http://evil.example/x.png) [leave](http://evil.example) "
    "<img src=x onerror=alert(2)>"
)


def _screens(client, slug, count=8) -> str:
    """The pages of a rater's first screens, one after another."""
    client.post(f"/r/{slug}/start", data={})
    seen = ""
    for _ in range(count):
        page = client.get(f"/r/{slug}/rate").text
        seen += page
        if 'name="query_id"' not in page:
            break
        query = page.split('name="query_id" value="')[1].split('"')[0]
        client.post(f"/r/{slug}/answer", data={"query_id": query, "choice": "left"})
    return seen


def test_markdown_texts_render_their_marks_and_nothing_else(client, auth, project):
    rows = [{"key": "rich", "text": HOSTILE}] + [
        {"key": f"plain-{n}", "text": f"word {n}\nsecond line"} for n in range(3)
    ]
    assert (
        upload(client, auth, project["id"], "items", "i.json", json.dumps(rows)).status_code == 201
    )
    configure(client, auth, project["id"], text_markdown=True, answers_per_rater=8)
    slug = open_link(client, auth, project["id"])["public_slug"]
    seen = _screens(client, slug)
    assert "<em>very</em> <strong>big</strong> <code>E=mc²</code> <s>old</s>" in seen
    body = seen.replace('<script src="/static', "")
    # The raw HTML is text (escaped), never markup; a link or image is neither.
    assert "<script>" not in body and "<style>" not in body and "<img src=x" not in body
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in body
    assert "<a " not in body and '<img src="http://evil' not in body
    assert "word 0<br>" in seen  # a new line is a line


def test_plain_texts_stay_plain(client, auth, project):
    rows = "key,text\nrich,*very* <b>big</b>\na,a\nb,b"
    assert upload(client, auth, project["id"], "items", "i.csv", rows).status_code == 201
    slug = open_link(client, auth, project["id"])["public_slug"]
    seen = _screens(client, slug)
    assert "*very* &lt;b&gt;big&lt;/b&gt;" in seen and "<em>" not in seen
