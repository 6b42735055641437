"""The rater pages' languages and the study's own wording as the settings page's form
sends them: read into the API's shape, with what to show back and what is wrong, named
so that a researcher can fix it."""

from __future__ import annotations

import re

TEXT_LINE = " | "  # a wording line: language | the English string | the study's words
MOST_TEXT_LINES = 500


def languages_from(form) -> tuple[list[str] | None, str, str | None]:
    """The languages typed into the form ("en, de, ar": the first for browsers that
    prefer none of them), what to show back, and what is wrong."""
    typed = str(form.get("languages") or "").strip()
    codes = [code for code in re.split(r"[\s,;]+", typed) if code]
    if "languages" not in form:
        return None, typed, None
    if not codes:
        return None, typed, "Name at least one language (for example: en)"
    return codes, typed, None  # (which languages the pages speak: the settings' schema)


def texts_from(form) -> tuple[dict[str, dict[str, str]] | None, str, str | None]:
    """The study's own wording, a line each ("de | Start | Los geht's"), what to show
    back, and what is wrong (naming the line)."""
    typed = str(form.get("texts") or "").replace("\r\n", "\n")
    texts: dict[str, dict[str, str]] = {}
    lines = [line for line in typed.split("\n") if line.strip()]
    if len(lines) > MOST_TEXT_LINES:
        return None, typed, f"At most {MOST_TEXT_LINES} lines"
    for number, line in enumerate(typed.split("\n"), start=1):
        if not line.strip():
            continue
        parts = [part.strip() for part in line.split(TEXT_LINE.strip(), 2)]
        if len(parts) != 3 or not all(parts):
            return (
                None,
                typed,
                (
                    f"Line {number}: write the language, the English string and your words, "
                    f"separated by “|” (for example: de | Start | Los geht’s)"
                ),
            )
        code, source, own = parts
        texts.setdefault(code, {})[source] = own
    return texts, typed, None


def texts_as_lines(texts: dict[str, dict[str, str]] | str | None) -> str:
    """The study's own wording as the form shows it, a line each."""
    if isinstance(texts, str):
        return texts
    return "\n".join(
        f"{code}{TEXT_LINE}{source}{TEXT_LINE}{own}"
        for code, wording in (texts or {}).items()
        for source, own in wording.items()
    )
