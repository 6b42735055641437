"""Filters the pages use to show figures and times the same way everywhere, and their
URLs as paths on this site."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import nh3
from jinja2 import Environment, pass_context
from markdown_it import MarkdownIt
from markupsafe import Markup
from starlette.datastructures import URL

from app.core.clock import utcnow
from app.core.forms import form_once
from app.core.i18n import ENGLISH, Wording


def number(value: float | None) -> str:
    """12,345 (thin digits grouping for figures in tables)."""
    if value is None:
        return "—"
    return f"{value:,}" if isinstance(value, int) else f"{value:,.3g}"


def when(value: datetime | None, now: datetime | None = None) -> str:
    """'3 min ago', '5 h ago', or the date for anything older than a day (UTC)."""
    if value is None:
        return "—"
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    seconds = ((now or utcnow()) - value).total_seconds()
    if seconds < 0:
        return value.strftime("%Y-%m-%d %H:%M UTC")
    if seconds < 60:
        return "just now"
    if seconds < 3600:
        return f"{int(seconds // 60)} min ago"
    if seconds < 86_400:
        return f"{int(seconds // 3600)} h ago"
    return value.strftime("%Y-%m-%d %H:%M UTC")


def duration(hours: float | None) -> str:
    """'about 3 h 20 min', for an estimate given in hours."""
    if hours is None:
        return "—"
    minutes = round(hours * 60)
    if minutes < 1:
        return "under a minute"
    if minutes < 60:
        return f"about {minutes} min"
    if minutes < 48 * 60:
        return f"about {minutes // 60} h {minutes % 60:02d} min"
    return f"about {minutes / 1440:.0f} days"


def iso(value: datetime) -> str:
    return value.isoformat()


@pass_context
def url_for(context: dict[str, Any], name: str, /, **path_params: Any) -> URL:
    """A route's URL as a path on this site. Starlette's own is absolute, built from the
    request's Host header, which a client chooses: `Host: evil.example` would have the
    page load its script from there."""
    return URL(path=context["request"].url_for(name, **path_params).path)


# CommonMark with raw HTML shown as text, and markdown-it's own check of link targets
# (no javascript:, vbscript:, file: or data: links): a lab's text cannot run script.
_MARKDOWN = MarkdownIt("commonmark", {"html": False})


def markdown(text: str | None) -> Markup:
    """A researcher's Markdown (a consent, a debrief) as safe HTML."""
    return Markup(_MARKDOWN.render(text or ""))


# An item's text, in a study whose texts are Markdown: inline marks only (it may stand in a
# button, which holds no paragraph), a line break for each new line; no raw HTML, no
# link (a rater stays on the study) and no image (nothing remote), and then Ammonia's
# sanitiser (nh3) keeps the few tags this makes, with no attribute at all.
_ITEM_MARKDOWN = (
    MarkdownIt("commonmark", {"html": False, "breaks": True})
    .enable("strikethrough")
    .disable(["image", "link", "autolink"])
)
ITEM_TAGS = {"em", "strong", "code", "s", "br"}


def item_markdown(text: str | None) -> Markup:
    """An item's Markdown text (*emphasis*, **strong**, `code`, ~~struck~~, lines) as safe
    HTML."""
    rendered = _ITEM_MARKDOWN.renderInline(text or "")
    return Markup(nh3.clean(rendered, tags=ITEM_TAGS, attributes={}, url_schemes=set()))


def _wording(context) -> Wording:
    """The page's language and the study's words (a rater page's context holds them;
    every other page is English)."""
    return context.get("wording") or ENGLISH


@pass_context
def _gettext(context, message: str) -> str:
    return _wording(context).gettext(message)


@pass_context
def _ngettext(context, singular: str, plural: str, count: int) -> str:
    return _wording(context).ngettext(singular, plural, count)


@pass_context
def translated(context, text: str | None) -> str:
    """A string made elsewhere (a notice, a default question; marked N_ where it is
    written) in the page's language; any other text as it is."""
    return _wording(context).gettext(text or "")


@pass_context
def counted(context, value: int | float) -> str:
    """A count as the page's language writes its numbers."""
    return _wording(context).number(value)


def install_filters(env: Environment) -> None:
    env.filters.update(
        number=number,
        when=when,
        iso=iso,
        duration=duration,
        markdown=markdown,
        item_markdown=item_markdown,
        counted=counted,
        translated=translated,
    )
    # Jinja's i18n extension, the "new style": _() and {% trans %} escape what they
    # insert, and a translation's placeholders are named (%(count)s).
    env.add_extension("jinja2.ext.i18n")
    env.policies["ext.i18n.trimmed"] = True
    env.install_gettext_callables(_gettext, _ngettext, newstyle=True)  # type: ignore[attr-defined]
    env.globals["url_for"] = url_for
    env.globals["form_once"] = form_once
