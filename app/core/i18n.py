"""The rater pages' languages. Every string a rater reads is English in the source,
marked for gettext (`_()` and `{% trans %}` in the templates, `N_()` in Python), and
translated from the catalogs in app/locales/<code>/LC_MESSAGES/messages.po, kept with
Babel's tooling (README: "The raters' languages"). A study names the languages it is
asked in; each page speaks the one its rater's browser prefers among them, and the
study may word any string its own way (`texts`).

The catalogs are read from their .po files once per process (compiled in memory), so
there is no compiled file to keep in step with them."""

from __future__ import annotations

import functools
import io
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from babel import Locale, UnknownLocaleError
from babel.messages.mofile import write_mo
from babel.messages.pofile import read_po
from babel.numbers import format_decimal
from babel.support import NullTranslations, Translations

LOCALES_DIR = Path(__file__).resolve().parents[1] / "locales"
DOMAIN = "messages"
SOURCE_LANGUAGE = "en"  # the language the source strings are written in
PLACEHOLDER = re.compile(r"%\((\w+)\)[sd]")


def N_(message: str) -> str:
    """Marks a rater-facing string for the catalogs; it is translated where it is shown
    (the page's wording knows the rater's language, the code that made it does not)."""
    return message


@functools.cache
def languages() -> tuple[str, ...]:
    """The languages rater pages can speak: English, and each locale with a catalog."""
    found = sorted(
        folder.name
        for folder in LOCALES_DIR.iterdir()
        if (folder / "LC_MESSAGES" / f"{DOMAIN}.po").is_file()
    )
    return (SOURCE_LANGUAGE, *(code for code in found if code != SOURCE_LANGUAGE))


def language_name(code: str) -> str:
    """The language in its own words ("Deutsch", "العربية")."""
    name = Locale.parse(code).get_display_name(code) or code
    return name[:1].upper() + name[1:]


@functools.cache
def direction(code: str) -> str:
    """ "rtl" for a right-to-left script (Arabic, Hebrew, Persian, Urdu), else "ltr"."""
    try:
        return "rtl" if Locale.parse(code).character_order == "right-to-left" else "ltr"
    except (ValueError, UnknownLocaleError):
        return "ltr"


@functools.cache
def _catalog(code: str) -> NullTranslations:
    if code == SOURCE_LANGUAGE:
        return NullTranslations()
    with (LOCALES_DIR / code / "LC_MESSAGES" / f"{DOMAIN}.po").open("rb") as source:
        catalog = read_po(source, locale=code)
    compiled = io.BytesIO()
    write_mo(compiled, catalog)
    compiled.seek(0)
    return Translations(fp=compiled, domain=DOMAIN)


@functools.cache
def source_messages() -> tuple[tuple[str, str | None], ...]:
    """Every string raters read, as the catalogs' template lists it (messages.pot, made by
    `pybabel extract`): (the English string, its plural or None)."""
    found: list[tuple[str, str | None]] = []
    with (LOCALES_DIR / f"{DOMAIN}.pot").open("rb") as source:
        for message in read_po(source):
            if isinstance(message.id, tuple | list):
                found.append((str(message.id[0]), str(message.id[1])))
            elif message.id:
                found.append((str(message.id), None))
    return tuple(found)


@functools.cache
def source_strings() -> frozenset[str]:
    """The English strings a study may word its own way (singular and plural forms)."""
    return frozenset(
        text for singular, plural in source_messages() for text in (singular, plural) if text
    )


def placeholders(text: str) -> set[str]:
    """The named placeholders of a string (%(count)s): a translation keeps them all."""
    return set(PLACEHOLDER.findall(text))


@dataclass(frozen=True)
class Wording:
    """What a rater page says, in one language: the catalog's translation, under the
    study's own wording of any string (`overrides`, by English source string)."""

    code: str = SOURCE_LANGUAGE
    overrides: Mapping[str, str] = field(default_factory=dict)

    @property
    def direction(self) -> str:
        return direction(self.code)

    def gettext(self, message: str) -> str:
        if not message:
            return message
        own = self.overrides.get(message)
        return own if own else _catalog(self.code).gettext(message)

    def ngettext(self, singular: str, plural: str, count: int) -> str:
        own = self.overrides.get(singular if count == 1 else plural)
        return own if own else _catalog(self.code).ngettext(singular, plural, count)

    def quoted(self, text: str) -> str:
        """“text”, „Text“, « texte », 「テキスト」: as the language quotes."""
        return self.gettext(N_("“%(text)s”")) % {"text": text}

    def number(self, value: int | float) -> str:
        """A count as the language writes it (1.234 in German, 1,234 in English)."""
        return format_decimal(value, locale=self.code)


ENGLISH = Wording()


def negotiate(accept_language: str | None, offered: Iterable[str]) -> str:
    """The study's language the browser prefers (its Accept-Language header, by quality),
    else the study's first. A regional preference (de-AT) takes the language (de)."""
    offered = list(offered) or [SOURCE_LANGUAGE]
    wanted: list[tuple[float, int, str]] = []
    for order, part in enumerate((accept_language or "")[:1000].split(",")[:20]):
        tag, _, params = part.strip().partition(";")
        quality = 1.0
        if params.strip().startswith("q="):
            try:
                quality = float(params.strip()[2:])
            except ValueError:
                continue
        if tag and quality > 0:
            wanted.append((-quality, order, tag.replace("-", "_").lower()))
    by_lower = {code.lower(): code for code in offered}
    for _, _, tag in sorted(wanted):
        if tag in by_lower:
            return by_lower[tag]
        language = tag.split("_")[0]
        if language in by_lower:
            return by_lower[language]
        regional = [code for lower, code in by_lower.items() if lower.split("_")[0] == language]
        if regional:
            return regional[0]
    return offered[0]


def wording_for(
    accept_language: str | None,
    offered: Iterable[str] | None,
    texts: Mapping[str, Mapping[str, str]] | None = None,
) -> Wording:
    """A study's page wording for this browser: one of the study's languages, with the
    study's own words for it."""
    usable = [code for code in (offered or [SOURCE_LANGUAGE]) if code in languages()]
    code = negotiate(accept_language, usable)
    return Wording(code, dict((texts or {}).get(code) or {}))


def text_problems(texts: Mapping[str, Mapping[str, str]], offered: Iterable[str]) -> list[str]:
    """What is wrong with a study's own wording: a language it is not asked in, a string
    raters never read, or a placeholder the wording drops or adds; each names the entry."""
    problems = []
    offered = set(offered)
    known = source_strings()
    for code, wording in texts.items():
        if code not in offered:
            problems.append(f"texts.{code}: the study is not asked in {code} (languages)")
            continue
        for source, own in wording.items():
            at = f"texts.{code}[{source[:60]!r}]"
            if source not in known:
                problems.append(f"{at}: not a string raters read (GET …/rater-texts)")
            elif placeholders(source) != placeholders(own):
                missing = sorted(placeholders(source) - placeholders(own))
                extra = sorted(placeholders(own) - placeholders(source))
                said = ", ".join(
                    [f"keep %({name})s" for name in missing]
                    + [f"%({name})s is not one of the string's" for name in extra]
                )
                problems.append(f"{at}: {said}")
    return problems
