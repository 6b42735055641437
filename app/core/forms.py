"""Workspace forms checked by the same pydantic models as the JSON API, so a form takes
exactly what the API takes; errors come back per field, for the page to show inline."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

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
            errors.setdefault(field, error["msg"])
        return None, errors
