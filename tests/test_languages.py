"""The rater pages in the raters' languages: complete catalogs, the language a browser
gets, a study's own wording, right-to-left pages, and the settings that choose them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from babel.messages.extract import extract_from_dir
from babel.messages.pofile import read_po

from app.core import i18n
from tests.support.links import open_link
from tests.support.rating import configure

API = "/api/v1"
ROOT = Path(__file__).resolve().parents[1]
LOCALES = ROOT / "app" / "locales"
TAG = re.compile(r"</?\w+")


def _extracted() -> set:
    """What `pybabel extract -F babel.cfg -k N_` finds in the sources now."""
    found = set()
    for method, patterns in (
        ("python", ["app/**.py"]),
        ("jinja2", ["templates/rate/**.html", "templates/formats/**.html"]),
    ):
        mapping = [(pattern, method) for pattern in patterns]
        options = {
            pattern: {"extensions": "jinja2.ext.i18n", "trimmed": "true"} for pattern in patterns
        }
        keywords = {"_": None, "gettext": None, "ngettext": (1, 2), "N_": None}
        for _, _, message, _, _ in extract_from_dir(
            str(ROOT), mapping, options if method == "jinja2" else None, keywords=keywords
        ):
            found.add(message)
    return found


def test_the_catalog_template_holds_every_string_the_sources_mark():
    """A string marked for raters and not extracted into messages.pot (README: the
    commands) would show in English on every page, translated or not."""
    with (LOCALES / "messages.pot").open("rb") as source:
        template = {message.id for message in read_po(source) if message.id}
    found = _extracted()
    assert found - template == set(), "run pybabel extract (README: The raters' languages)"
    assert template - found == set(), "messages.pot lists strings no source marks any more"


@pytest.mark.parametrize("code", [code for code in i18n.languages() if code != "en"])
def test_every_catalog_translates_every_string_with_its_placeholders_and_markup(code):
    with (LOCALES / "messages.pot").open("rb") as source:
        template = [message.id for message in read_po(source) if message.id]
    with (LOCALES / code / "LC_MESSAGES" / "messages.po").open("rb") as source:
        catalog = read_po(source, locale=code)
    for source_id in template:
        message = catalog.get(source_id)
        assert message is not None, f"{code} lacks {source_id!r}"
        assert not message.fuzzy, f"{code}: {source_id!r} is marked fuzzy"
        if isinstance(source_id, tuple):
            forms = message.string
            assert len(forms) == catalog.num_plurals and all(forms), (code, source_id)
            allowed = i18n.placeholders(source_id[0]) | i18n.placeholders(source_id[1])
            for form in forms:
                assert i18n.placeholders(form) <= allowed, (code, source_id, form)
            # A count above the singular's reads the number: the last form shows it.
            assert i18n.placeholders(forms[-1]) == i18n.placeholders(source_id[1])
            continue
        assert message.string, f"{code}: {source_id!r} is not translated"
        assert i18n.placeholders(message.string) == i18n.placeholders(source_id), (
            code,
            source_id,
            message.string,
        )
        assert sorted(TAG.findall(message.string)) == sorted(TAG.findall(source_id)), (
            code,
            source_id,
        )


def test_six_languages_and_arabic_right_to_left():
    assert set(i18n.languages()) >= {"en", "de", "es", "fr", "ja", "ar"}
    assert i18n.direction("ar") == "rtl" and i18n.direction("de") == "ltr"
    assert i18n.Wording("de").number(12345) == "12.345"
    assert i18n.Wording("en").number(12345) == "12,345"


@pytest.mark.parametrize(
    ("header", "offered", "chosen"),
    [
        ("de-AT,de;q=0.9,en;q=0.5", ["en", "de"], "de"),
        ("fr-CH, fr;q=0.9", ["en", "de"], "en"),  # none of the study's: its first
        ("en;q=0.2, ar;q=0.8", ["en", "ar"], "ar"),  # by quality, not by order
        ("ja", ["ja", "en"], "ja"),
        ("*", ["es", "en"], "es"),
        ("", ["fr"], "fr"),
        (None, ["en"], "en"),
        ("de;q=0, en", ["de", "en"], "en"),  # q=0: not wanted
        ("de;q=x, es", ["de", "es"], "es"),  # a malformed part is skipped
    ],
)
def test_the_browser_chooses_among_the_study_languages(header, offered, chosen):
    assert i18n.negotiate(header, offered) == chosen


@pytest.fixture
def shapes(client, auth, project):
    rows = "key,text\ncircle,a circle\noval,an oval\nsquare,a square\ntriangle,a triangle"
    uploaded = client.post(
        f"{API}/projects/{project['id']}/items", headers=auth, files={"file": ("items.csv", rows)}
    )
    assert uploaded.status_code == 201, uploaded.text
    return project["id"], open_link(client, auth, project["id"])["public_slug"]


def test_a_study_speaks_the_language_its_rater_prefers_among_its_own(client, auth, shapes):
    project_id, slug = shapes
    # A study made before languages existed, or left as it is: English for everyone.
    english = client.get(f"/r/{slug}", headers={"Accept-Language": "de"})
    assert '<html lang="en" dir="ltr">' in english.text and ">Start</button>" in english.text

    configure(client, auth, project_id, languages=["en", "de", "ar"], answers_per_rater=1500)
    german = client.get(f"/r/{slug}", headers={"Accept-Language": "de-DE,de;q=0.9"})
    assert '<html lang="de" dir="ltr">' in german.text
    assert ">Starten</button>" in german.text
    assert german.headers["content-language"] == "de"
    assert "Accept-Language" in german.headers["vary"]
    assert "Es gibt 1.500 Vergleiche" in german.text  # the number as German writes it
    assert "Welches der beiden" not in german.text  # (the question shows on the screens)

    arabic = client.get(f"/r/{slug}", headers={"Accept-Language": "ar"})
    assert '<html lang="ar" dir="rtl">' in arabic.text and ">ابدأ</button>" in arabic.text

    other = client.get(f"/r/{slug}", headers={"Accept-Language": "fr"})
    assert '<html lang="en"' in other.text  # French is not the study's: its first

    # The rating page: the question (the format's default) and the progress, translated.
    started = client.post(
        f"/r/{slug}/start", data={}, headers={"Accept-Language": "de"}, follow_redirects=True
    )
    assert "Welches der beiden ist dem oberen ähnlicher?" in started.text
    assert "0 / 1.500" in started.text
    assert 'data-reconnecting="Verbindung wird wiederhergestellt' in started.text


def test_a_study_words_any_string_its_own_way(client, auth, shapes):
    project_id, slug = shapes
    configure(
        client,
        auth,
        project_id,
        languages=["de", "en"],
        texts={
            "de": {
                "Start": "Los geht’s",
                "Which of the two is closer to the one on top?": "Was passt besser?",
            }
        },
    )
    page = client.get(f"/r/{slug}", headers={"Accept-Language": "de"})
    assert ">Los geht’s</button>" in page.text
    # English readers of the same study read the catalog's words.
    assert ">Start</button>" in client.get(f"/r/{slug}", headers={"Accept-Language": "en"}).text
    started = client.post(
        f"/r/{slug}/start", data={}, headers={"Accept-Language": "de"}, follow_redirects=True
    )
    assert "Was passt besser?" in started.text

    preview = client.get(f"/projects/{project_id}/preview?language=de", headers=auth)
    assert "Was passt besser?" in preview.text  # the researcher sees the German screen
    texts = client.get(f"{API}/projects/{project_id}/rater-texts", headers=auth)
    assert texts.status_code == 200
    body = texts.json()
    assert {language["code"] for language in body["languages"]} >= {"en", "de", "ar"}
    assert [language["asked"] for language in body["languages"] if language["code"] == "de"] == [
        True
    ]
    start = next(entry for entry in body["texts"] if entry["source"] == "Start")
    assert start["translations"]["ja"] == "開始" and start["own"] == {"de": "Los geht’s"}


@pytest.mark.parametrize(
    ("sent", "named"),
    [
        ({"languages": ["en", "xx"]}, "'xx' is not a language the rater pages speak"),
        ({"languages": ["de", "de"]}, "each language once"),
        ({"languages": []}, "languages"),
        ({"texts": {"fr": {"Start": "Commencer ici"}}}, "texts.fr: the study is not asked in fr"),
        ({"texts": {"en": {"Begin": "Go"}}}, "texts.en['Begin']: not a string raters read"),
        (
            {"texts": {"en": {"Start block %(block)s": "Go on"}}},
            "texts.en['Start block %(block)s']: keep %(block)s",
        ),
        ({"texts": {"en": {"Start": " "}}}, "texts.en['Start']: empty"),
    ],
)
def test_bad_languages_and_wording_are_refused_naming_the_entry(client, auth, shapes, sent, named):
    project_id, _ = shapes
    before = client.get(f"{API}/projects/{project_id}/rating", headers=auth).json()
    refused = client.patch(f"{API}/projects/{project_id}/rating", headers=auth, json=sent)
    assert refused.status_code in (400, 422), refused.text
    assert named in refused.text
    after = client.get(f"{API}/projects/{project_id}/rating", headers=auth).json()
    assert after == before


def test_the_settings_page_sets_the_languages_and_the_wording(app, client, auth, shapes):
    from fastapi.testclient import TestClient

    from tests.support.workspace import page_csrf, signed_in_browser

    project_id, slug = shapes
    with TestClient(app) as browser:
        signed_in_browser(browser, token=auth["Authorization"].split()[1])
        settings = f"/projects/{project_id}/settings"
        page = browser.get(settings).text
        assert 'name="languages" value="en"' in page and "العربية (<code>ar</code>)" in page
        fields = {
            "csrf_token": page_csrf(browser, settings),
            "languages": "es, en",
            "texts": "es | Start | ¡Vamos!\nes | Continue",
        }
        refused = browser.post(settings, data=fields)
        assert refused.status_code == 422 and "Line 2: write the language" in refused.text
        # What only the settings' schema knows is said beside its field too, never a 500.
        for typed, said in [
            ({"languages": "en, en"}, "each language once"),
            ({"languages": "en, xx"}, "&#39;xx&#39; is not a language the rater pages speak"),
            ({"texts": "es | Start | " + "x" * 2_001}, "at most 2,000 characters"),
        ]:
            wrong = browser.post(settings, data={**fields, "texts": "", **typed})
            assert wrong.status_code == 422, (typed, wrong.status_code)
            assert said in wrong.text, typed
        fields["texts"] = "es | Start | ¡Vamos!"
        saved = browser.post(settings, data=fields)
        assert saved.status_code == 200, saved.text
        assert 'value="es, en"' in saved.text and "es | Start | ¡Vamos!" in saved.text
    rating = client.get(f"{API}/projects/{project_id}/rating", headers=auth).json()
    assert rating["languages"] == ["es", "en"]
    assert rating["texts"] == {"es": {"Start": "¡Vamos!"}}
    assert ">¡Vamos!</button>" in client.get(f"/r/{slug}").text  # no preference: the first


def test_the_questionnaire_says_what_is_wrong_in_the_raters_language(client, auth, shapes):
    project_id, slug = shapes
    configure(
        client,
        auth,
        project_id,
        languages=["fr"],
        questionnaire={
            "when": "before",
            "questions": [{"name": "age", "kind": "number", "prompt": "Âge", "required": True}],
        },
    )
    client.post(f"/r/{slug}/start", data={})
    form = client.get(f"/r/{slug}/rate")
    assert "Quelques questions" in form.text
    refused = client.post(f"/r/{slug}/questionnaire", data={"q-age": "vingt"})
    assert refused.status_code == 422
    assert "Doit être un nombre" in refused.text


def test_the_rater_api_words_practice_feedback_in_the_raters_language(client, auth, shapes):
    project_id, slug = shapes
    configure(
        client,
        auth,
        project_id,
        languages=["en", "fr"],
        practice={"trials": [{"items": ["circle", "oval", "square"], "answer": ["oval"]}]},
    )
    joined = client.post(f"{API}/rate/{slug}/raters", json={"participant": "api-fr"})
    token = {"X-Rater-Token": joined.json()["rater_token"], "Accept-Language": "fr-FR"}
    shown = client.get(f"{API}/rate/{slug}/next", headers=token).json()["comparison"]
    wrong = "right" if shown["left"]["key"] == "oval" else "left"
    answered = client.post(
        f"{API}/rate/{slug}/answers",
        headers=token,
        json={"query_id": shown["query_id"], "choice": wrong},
    )
    assert answered.json()["feedback"]["message"] == (
        "Pas tout à fait\u00a0: la réponse attendue était «\u00a0an oval\u00a0»."
    )
