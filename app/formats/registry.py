"""The judgement formats, registered once by their modules; every other part of the
service reads them here."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TypeVar

from app.formats.base import JudgementFormat, PickedScreen

_FORMATS: dict[str, JudgementFormat] = {}
F = TypeVar("F", bound=JudgementFormat)


class UnknownFormat(ValueError):
    pass


def register(format: F) -> F:
    """Make `format` known by its name (its module does, once, at import)."""
    known = _FORMATS.get(format.name)
    if known is not None and known is not format:
        raise ValueError(f"a judgement format named {format.name!r} is registered already")
    _FORMATS[format.name] = format
    return format


@contextmanager
def registered(format: F) -> Iterator[F]:
    """`format` known for the block only (a format tried out, as in a test)."""
    register(format)
    try:
        yield format
    finally:
        _FORMATS.pop(format.name, None)


def named(name: str | JudgementFormat) -> JudgementFormat:
    """The format of this name (a format is its own name)."""
    if isinstance(name, JudgementFormat):
        return name
    found = _FORMATS.get(name)
    if found is None:
        raise UnknownFormat(f"'{name}' is not a judgement format (known: {', '.join(_FORMATS)})")
    return found


def template_source(template: str) -> str | None:
    """The text of a format's template kept in its own `template_folder` (None: the
    app's templates/ hold it, or it is no format's)."""
    folder, _, file = template.partition("/")
    found = _FORMATS.get(file.removesuffix(".html")) if folder == "formats" else None
    if found is None or found.template_folder is None:
        return None
    path = found.template_folder / template
    return path.read_text() if path.is_file() else None


def every() -> list[JudgementFormat]:
    return list(_FORMATS.values())


def asked_by_studies() -> list[JudgementFormat]:
    """The formats a study may ask its screens in, in the order the settings offer them."""
    return [format for format in _FORMATS.values() if format.asked_by_studies]


def study_format(name: str | JudgementFormat) -> JudgementFormat:
    """The format a study's setting names, or UnknownFormat naming the choices."""
    found = _FORMATS.get(str(name))
    if found is None or not found.asked_by_studies:
        choices = ", ".join(format.name for format in asked_by_studies())
        raise UnknownFormat(f"judgement must be one of {choices}; got '{name}'")
    return found


def uploaded() -> list[PickedScreen]:
    """The formats judgement files may hold."""
    return [f for f in _FORMATS.values() if isinstance(f, PickedScreen) and f.uploaded]
