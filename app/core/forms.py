"""Workspace forms checked by the same pydantic models as the JSON API, so a form takes
exactly what the API takes; errors come back per field, for the page to show inline."""

from __future__ import annotations

import json
import secrets
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ValidationError
from starlette.requests import Request
from starlette.responses import Response

from app.core.deps import hand_cookie
from app.core.routes import parse_strict_json

Model = TypeVar("Model", bound=BaseModel)


def read_form(model: type[Model], data: Mapping[str, Any]) -> tuple[Model | None, dict[str, str]]:
    """The form as `model`, or None and a message per field. Form fields arrive as text,
    so numbers and flags are converted here (strict=False) where JSON must be typed."""
    try:
        return model.model_validate(dict(data), strict=False), {}
    except ValidationError as invalid:
        errors: dict[str, str] = {}
        for error in invalid.errors(include_url=False, include_input=False):
            field = str(error["loc"][0]) if error["loc"] else "form"
            errors.setdefault(field, plain_message(error))
        return None, errors


# What a pattern asks for, in words.
PATTERN_WORDS = {r"^https?://": "must be a web address starting with http:// or https://"}


def plain_message(error: Mapping[str, Any]) -> str:
    """A field's problem as a form shows it: in words, not pydantic's wording ("String
    should match pattern '^https?://'"); pydantic's where no plainer one is known."""
    ctx = error.get("ctx") or {}
    kind = error.get("type")
    if kind == "string_pattern_mismatch":
        return PATTERN_WORDS.get(str(ctx.get("pattern")), "is not in the form this field takes")
    if kind in ("int_parsing", "int_from_float", "int_type"):
        return "must be a whole number"
    if kind in ("float_parsing", "float_type", "finite_number"):
        return "must be a number"
    if kind in ("greater_than_equal", "less_than_equal", "greater_than", "less_than"):
        words = {
            "greater_than_equal": ("ge", "at least"),
            "less_than_equal": ("le", "at most"),
            "greater_than": ("gt", "more than"),
            "less_than": ("lt", "less than"),
        }[kind]
        bound = ctx.get(words[0])
        if isinstance(bound, float) and bound.is_integer():
            bound = int(bound)  # "at most 1", not "at most 1.0"
        return f"must be {words[1]} {bound}"
    if kind == "string_too_short":
        least = ctx.get("min_length", 1)
        return "must not be empty" if least == 1 else f"needs at least {least} characters"
    if kind == "string_too_long":
        return f"must be at most {ctx.get('max_length')} characters"
    if kind == "missing":
        return "is required"
    message = str(error.get("msg", ""))
    return message.removeprefix("Value error, ")


@dataclass
class SubmittedForm(Generic[Model]):
    """A workspace form read as the API's model: `body` when it holds, else `errors` per
    field; `shown` is what the page shows back in its fields."""

    body: Model | None
    shown: dict[str, Any]
    errors: dict[str, str]


async def read_model_form(
    request,
    model: type[Model],
    *,
    fields: Collection[str] | None = None,
    checkboxes: Collection[str] = (),
    json_fields: Collection[str] = (),
    unstripped: Collection[str] = (),
    nullable: Collection[str] = (),
    blank_is_missing: bool = True,
) -> SubmittedForm[Model]:
    """Read `model` (its `fields`, by default all of them) from the request's form, the
    one way every workspace form is read. A checkbox is true when sent; text is stripped
    (but `unstripped` fields: a textarea's lines); a blank field is None where `nullable`,
    else left out (`blank_is_missing`, so the model's default applies) or kept for the
    model to refuse; a `json_fields` field is parsed as the API parses a body (depth,
    number and NUL limits), so a form takes no input its JSON twin refuses."""
    form = await request.form()
    shown: dict[str, Any] = {}
    values: dict[str, Any] = {}
    errors: dict[str, str] = {}
    for name in model.model_fields if fields is None else fields:
        if name in checkboxes:
            shown[name] = values[name] = name in form
            continue
        text = form.get(name)
        if not isinstance(text, str):
            continue
        if name not in unstripped:
            text = text.strip()
        shown[name] = text
        if text == "" and name in nullable:
            values[name] = None
        elif text == "" and blank_is_missing:
            continue
        elif name in json_fields:
            try:
                values[name] = parse_strict_json(text.encode())
            except json.JSONDecodeError as error:
                where = f" (line {error.lineno}, column {error.colno})" if error.doc else ""
                errors[name] = f"not JSON: {error.msg}{where}"
        else:
            values[name] = text
    body, invalid = read_form(model, values)
    errors.update(invalid)
    return SubmittedForm(None if errors else body, shown, errors)


# Forms whose sending makes something shown once (a token, a webhook's secret, an
# invitation link) carry an id of their own: a reload of the page that answered them
# sends the same form again, and the browser's cookie of ids sent says so, so the reload
# makes nothing twice. A cookie, not a table: it is the browser's own protection, the same
# on every web process, and a forged one only lets its holder make a second of their own.
SENT_FORMS_COOKIE = "closer_sent_forms"
SENT_FORMS_KEPT = 20
SENT_AGAIN = (
    "This form was sent already (the page was reloaded?): what it made is listed below, "
    "and its secret was shown once then. Nothing more was made; the form below makes another."
)


def form_once() -> str:
    """A fresh id for a form that makes something (a Jinja global)."""
    return secrets.token_urlsafe(12)


def _sent_ids(request: Request) -> list[str]:
    return [sent for sent in request.cookies.get(SENT_FORMS_COOKIE, "").split(".") if sent]


def sent_before(request: Request, form_id: str) -> bool:
    """Whether this browser sent the form with this id already (and it made something)."""
    return bool(form_id) and form_id in _sent_ids(request)


def remember_sent(request: Request, response: Response, form_id: str) -> None:
    """Keep this form's id among the browser's last ones sent."""
    if not form_id:
        return
    kept = [sent for sent in _sent_ids(request) if sent != form_id][-(SENT_FORMS_KEPT - 1) :]
    hand_cookie(request, response, SENT_FORMS_COOKIE, ".".join([*kept, form_id]), 86_400)
