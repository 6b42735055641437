"""The rater pages in the raters' languages, in Chromium: a right-to-left study laid out
mirrored and answered by keyboard with the arrows following the sides, every format's
screen in another language, and axe-core's WCAG 2.2 AA checks over each of them on a
desktop and a phone, light and dark."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.sync_api import expect

from app.models import Assignment
from tests.support.browser import answered, screenshots_dir, shoot, until, until_htmx
from tests.support.links import open_link
from tests.support.rating import configure

API = "/api/v1"
AXE = Path(__file__).resolve().parents[2] / "node_modules" / "axe-core" / "axe.min.js"
WCAG_AA = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "wcag22aa"]
DESKTOP = {"viewport": {"width": 1280, "height": 800}}
PHONE = {"viewport": {"width": 390, "height": 844}, "is_mobile": True, "has_touch": True}

pytestmark = pytest.mark.one_database  # the pages themselves: nothing the database changes


def axe_violations(page) -> list[str]:
    """axe-core's WCAG 2.2 A/AA violations on the page as it stands, a line each."""
    page.add_script_tag(path=str(AXE))
    found = page.evaluate(
        "async (tags) => (await axe.run(document, {runOnly: {type: 'tag', values: tags}}))"
        ".violations.map(v => `${v.id} (${v.impact}): ${v.nodes.length} × `"
        " + v.nodes[0].target.join(' '))",
        WCAG_AA,
    )
    return list(found)


@pytest.fixture
def words(client, auth, project):
    """Twelve words as items, a session of six answers, the link open."""
    names = [
        "river",
        "lake",
        "sea",
        "stone",
        "rock",
        "sand",
        "tree",
        "leaf",
        "wood",
        "sky",
        "cloud",
        "rain",
    ]
    rows = "key,text\n" + "\n".join(f"{name},{name}" for name in names)
    uploaded = client.post(
        f"{API}/projects/{project['id']}/items", headers=auth, files={"file": ("words.csv", rows)}
    )
    assert uploaded.status_code == 201, uploaded.text
    settings = {"answers_per_rater": 6, "completion_code": "DONE-6", "attention_rate": 0}
    configure(client, auth, project["id"], **settings)
    return project["id"], open_link(client, auth, project["id"])["public_slug"]


def test_an_arabic_study_reads_right_to_left_and_its_arrows_follow_the_sides(
    app, client, auth, server, words, browser, tmp_path
):
    project_id, slug = words
    configure(client, auth, project_id, languages=["ar", "en"])
    shots = screenshots_dir(tmp_path)
    for screen, colours in ((DESKTOP, "light"), (PHONE, "dark")):
        context = browser.new_context(
            locale="ar-EG", color_scheme=colours, bypass_csp=True, **screen
        )
        page = context.new_page()
        page.goto(f"{server}/r/{slug}")
        expect(page.locator("html")).to_have_attribute("dir", "rtl")
        expect(page.get_by_role("button", name="ابدأ")).to_be_visible()
        assert axe_violations(page) == []
        shoot(page, shots / f"rtl-instructions-{colours}.png")
        page.get_by_role("button", name="ابدأ").click()
        until_htmx(page)
        expect(page.locator(".question")).to_have_text("أيّ الاثنين أقرب إلى العنصر في الأعلى؟")
        first, second = (
            page.locator("#comparison button.candidate").nth(at).bounding_box() for at in (0, 1)
        )
        assert first["x"] > second["x"]  # mirrored: the first candidate on the right
        assert axe_violations(page) == []
        shoot(page, shots / f"rtl-screen-{colours}.png")
        if colours == "light":
            # ← picks the candidate on the left of the screen: the second one.
            query = page.locator("#comparison input[name=query_id]").get_attribute("value")
            page.keyboard.press("ArrowLeft")
            expect(page.locator("#comparison input[name=query_id]")).not_to_have_value(query)
            with app.state.session_factory() as session:
                assert session.get(Assignment, int(query)).choice == "right"
            for _ in range(5):
                answered(page, lambda: page.keyboard.press("ArrowRight"))
            expect(page.locator("#completion-code")).to_have_text("DONE-6")
            expect(page.locator(".done h1")).to_have_text("شكرًا لك!")
            assert axe_violations(page) == []
            shoot(page, shots / "rtl-done.png")
        context.close()


@pytest.mark.parametrize(
    ("language", "asked", "question"),
    [
        ("de", {"judgement": "odd_one_out"}, "Welches ähnelt den beiden anderen am wenigsten?"),
        (
            "ja",
            {"judgement": "rank", "shown": 6, "picks": 2},
            "上のものに最も似ているものを、似ている順に選んでください。",
        ),
        (
            "fr",
            {"judgement": "triplet", "allow_cant_tell": True, "blocks": 2, "break_seconds": 1},
            "Lequel des deux ressemble le plus à celui du haut\u202f?",
        ),
        (
            "es",
            {"judgement": "rank", "shown": 4, "picks": 1},
            "Elija los que más se parecen al de arriba, el más parecido primero.",
        ),
    ],
)
def test_every_format_speaks_the_study_language_and_passes_axe(
    client, auth, server, words, browser, tmp_path, language, asked, question
):
    project_id, slug = words
    configure(client, auth, project_id, languages=[language], **asked)
    shots = screenshots_dir(tmp_path)
    for screen, colours in ((PHONE, "light"), (DESKTOP, "dark")):
        context = browser.new_context(color_scheme=colours, bypass_csp=True, **screen)
        page = context.new_page()
        page.goto(f"{server}/r/{slug}")
        expect(page.locator("html")).to_have_attribute("lang", language)
        assert axe_violations(page) == []
        page.locator("form button.primary").click()
        until_htmx(page)
        expect(page.locator(".question")).to_have_text(question)
        # Everything the screen asks fits it, the Submit button included.
        sent = page.locator("#comparison .send-picks, #comparison button.candidate").last
        box = sent.bounding_box()
        assert box["y"] + box["height"] <= screen["viewport"]["height"]
        assert axe_violations(page) == []
        shoot(page, shots / f"{language}-{asked['judgement']}-{colours}.png")
        context.close()


@pytest.mark.parametrize(
    ("language", "screen", "colours"),
    [("en", PHONE, "dark"), ("ar", DESKTOP, "light"), ("ar", PHONE, "dark")],
)
def test_every_rater_page_state_is_done_by_keyboard_and_passes_axe(
    client, auth, server, words, browser, tmp_path, language, screen, colours
):
    """Instructions, consent (and its refusal), questionnaire (and its problems), a
    practice screen and its feedback, the task, a break, the completion; then the closed
    link's page and a wrong link's page: each by keyboard, each without a WCAG 2.2 AA
    violation axe can see, and the progress spoken by the live line."""
    project_id, slug = words
    configure(
        client,
        auth,
        project_id,
        languages=[language],
        answers_per_rater=4,
        blocks=2,
        consent={"text": "You will compare words.", "statements": ["I agree to take part."]},
        questionnaire={
            "when": "before",
            "questions": [{"name": "age", "kind": "number", "prompt": "Age", "required": True}],
        },
        practice={"trials": [{"items": ["river", "lake", "stone"], "answer": ["lake"]}]},
    )
    shots = screenshots_dir(tmp_path)
    context = browser.new_context(locale=language, color_scheme=colours, bypass_csp=True, **screen)
    page = context.new_page()
    seen = []

    def checked(name: str) -> None:
        assert axe_violations(page) == [], name
        seen.append(name)
        shoot(page, shots / f"state-{language}-{name}.png")

    page.goto(f"{server}/r/{slug}")
    checked("instructions")
    page.locator("form button.primary").press("Enter")
    expect(page.locator("form.consent")).to_be_visible()
    checked("consent")
    page.locator("button[value=agree]").press("Enter")  # nothing ticked: refused, said why
    expect(page.locator("form.consent .error")).to_be_visible()
    checked("consent-refused")
    page.locator("input[name=statement-0]").press("Space")
    page.locator("button[value=agree]").press("Enter")
    expect(page.locator("form.questionnaire")).to_be_visible()
    checked("questionnaire")
    page.locator("form.questionnaire button.primary").press("Enter")
    expect(page.locator("form.questionnaire p.error")).to_have_count(1)  # beside its question
    checked("questionnaire-problems")
    page.locator("#q-age").fill("")
    page.locator("#q-age").press_sequentially("33")
    page.locator("#q-age").press("Enter")
    until_htmx(page)
    expect(page.locator(".practice-progress")).to_be_visible()
    checked("practice")
    page.keyboard.press("ArrowRight" if language == "ar" else "ArrowLeft")  # lake: the first
    expect(page.locator(".feedback-screen.correct")).to_be_visible()
    checked("feedback")
    page.locator(".feedback-screen .continue").press("Enter")
    expect(page.locator(".progress .count")).to_contain_text("0 / 4")
    until(page, "document.getElementById('announcer').textContent.includes('0 / 4')")
    checked("task")
    for _ in range(2):
        answered(page, lambda: page.keyboard.press("ArrowLeft"))
    expect(page.locator(".break-screen")).to_be_visible()
    checked("break")
    page.locator(".break-screen .continue").press("Enter")
    for _ in range(2):
        answered(page, lambda: page.keyboard.press("ArrowRight"))
    expect(page.locator("#completion-code")).to_be_visible()
    checked("done")

    assert (
        client.put(
            f"{API}/projects/{project_id}/link", headers=auth, json={"state": "closed"}
        ).status_code
        == 200
    )
    page = browser.new_context(
        locale=language, color_scheme=colours, bypass_csp=True, **screen
    ).new_page()
    page.goto(f"{server}/r/{slug}")
    expect(page.locator(".notice")).to_be_visible()
    checked("closed")
    page.goto(f"{server}/r/no-such-study", wait_until="domcontentloaded")
    expect(page.locator("html")).to_have_attribute("lang", language)  # the browser's choice
    checked("missing")
    assert len(seen) == 12
