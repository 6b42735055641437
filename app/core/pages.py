"""Rendering the workspace's pages and the parts of them that htmx refreshes."""

from __future__ import annotations

import hashlib

from fastapi import Request, Response
from fastapi.responses import HTMLResponse
from jinja2 import pass_context
from markupsafe import Markup

from app.core import caches

# Where a live part names the copy the browser holds; replaced by the digest of the part
# as rendered with this very text in it, so the digest does not depend on itself.
STAMP_PLACEHOLDER = "live-part-stamp"


@pass_context
def path_for(context, name: str, **params) -> str:
    """`url_for(name, **params).path` for a template's loops: url_for tries every route
    in turn, an exception at each that does not match (a page of 50 items' forms spent
    40 ms on it), so each route's path is found once with stand-ins for its parameters,
    then filled in."""
    request = context["request"]
    shapes: dict = caches.current().get("pages.path_shapes", dict)
    key = (request.scope.get("root_path", ""), name, tuple(sorted(params)))
    shape = shapes.get(key)
    if shape is None:
        stand_ins = {param: f"__closer_{param}__" for param in params}
        shape = shapes[key] = request.url_for(name, **stand_ins).path
    for param, value in params.items():
        shape = shape.replace(f"__closer_{param}__", str(value))
    return shape


def render(request: Request, name: str, context: dict, status_code: int = 200) -> HTMLResponse:
    templates = request.app.state.templates
    return templates.TemplateResponse(request, name, context, status_code=status_code)


def render_page_or_part(
    request: Request, page: str, part: str, context: dict, status_code: int = 200
) -> Response:
    """The whole page, or only its live part when htmx polls for it. The part polls even
    when nothing runs (what a worker does by itself, such as an automatic refit, shows up
    without a reload); a poll that finds the part as the browser already shows it gets
    204, which htmx leaves alone, so an open detail or a chart is not redrawn for
    nothing."""
    rendered = bytes(render(request, part, {**context, "stamp": STAMP_PLACEHOLDER}).body).decode()
    stamp = hashlib.sha256(rendered.encode()).hexdigest()[:16]
    live_part = rendered.replace(STAMP_PLACEHOLDER, stamp)
    if request.headers.get("HX-Request") and request.method == "GET":
        if request.query_params.get("seen") == stamp:
            return Response(status_code=204)
        return HTMLResponse(live_part)
    # The page shows the part as rendered here (autoescaped there), not rendered again.
    return render(request, page, {**context, "live_part": Markup(live_part)}, status_code)
