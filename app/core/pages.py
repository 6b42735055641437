"""Rendering the workspace's pages and the parts of them that htmx refreshes."""

from __future__ import annotations

from fastapi import Request
from fastapi.responses import HTMLResponse


def render(request: Request, name: str, context: dict, status_code: int = 200) -> HTMLResponse:
    templates = request.app.state.templates
    return templates.TemplateResponse(request, name, context, status_code=status_code)


def render_page_or_part(
    request: Request, page: str, part: str, context: dict, status_code: int = 200
) -> HTMLResponse:
    """The whole page, or only its live part when htmx polls for it."""
    if request.headers.get("HX-Request") and request.method == "GET":
        return render(request, part, context)
    return render(request, page, context, status_code)
