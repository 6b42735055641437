"""The workspace's items: the items page (browse, search, fix a label or a split), and
what other pages need to show items beside a chart: each item's label, a short text and
its thumbnail, in one compact answer (the embedding page hovers 10,000)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Form, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse
from sqlalchemy import func, select

from app.auth.deps import ChangingPage, ViewingPage
from app.core.db import roll_back
from app.core.deps import SessionDep
from app.core.errors import NotFound, ServiceError
from app.core.fields import RowId
from app.core.pages import render
from app.core.routes import StrictJSONRoute
from app.items import curation, removal
from app.items.media import kind_of
from app.models import Item, Split
from app.projects.service import get_project
from app.rating.deps import media_folder

router = APIRouter(include_in_schema=False, route_class=StrictJSONRoute)
CARD_TEXT = 160


@router.get("/projects/{project_id}/item-cards.json", name="item_cards")
def item_cards(
    project_id: RowId, request: Request, session: SessionDep, researcher: ViewingPage
) -> JSONResponse:
    """{key: [label, text (cut short), file URL, its kind: "image", "audio" or "video"]}
    for every item of the project."""
    project = get_project(session=session, researcher=researcher, project_id=project_id)
    media = media_folder(project.public_slug)
    rows = session.execute(
        select(
            Item.key,
            Item.label,
            func.substr(Item.text, 1, CARD_TEXT),
            Item.image_file,
            Item.image_type,
        ).where(Item.project_id == project.id)
    )
    cards = {
        key: [label, text, f"{media}/{file}" if file else None, kind_of(content_type)]
        for key, label, text, file, content_type in rows
    }
    return JSONResponse(cards, headers={"Cache-Control": "private, max-age=60"})


ITEMS_PER_PAGE = 50


@router.get("/projects/{project_id}/items", response_class=HTMLResponse, name="items_page")
def items_page(
    project_id: RowId,
    request: Request,
    session: SessionDep,
    researcher: ViewingPage,
    q: Annotated[str, Query(max_length=200)] = "",
    split: Annotated[str, Query(max_length=20)] = "",
    page: Annotated[int, Query(ge=1, le=1_000_000)] = 1,
    key: Annotated[str | None, Query(max_length=200)] = None,
):
    """Browse and search the items (thumbnail, text, label, split, how often asked) and
    fix a label or a split in place, as PATCH /projects/{id}/items/{key} does."""
    project = get_project(session=session, researcher=researcher, project_id=project_id)
    chosen = Split(split) if split in {s.value for s in Split} else None
    items, total = curation.search_items(
        session=session,
        project=project,
        search=q.strip() or None,
        split=chosen,
        key=key,
        limit=ITEMS_PER_PAGE,
        offset=(page - 1) * ITEMS_PER_PAGE,
    )
    return render(
        request,
        "items/items.html",
        {
            "researcher": researcher,
            "project": project,
            "tab": "items",
            "items": items,
            "asked_counts": curation.times_asked(
                session=session, project=project, item_ids=[i.id for i in items]
            ),
            "total": total,
            "q": q or (key or ""),
            "split": chosen.value if chosen else "",
            "splits": [s.value for s in Split],
            "page": page,
            "pages": max(1, -(-total // ITEMS_PER_PAGE)),
            "media": media_folder(project.public_slug),
        },
    )


def _item_of(session, project, item_id: int) -> Item:
    """The page's item by its row id (the form posts ids: keys may hold any character)."""
    item = session.get(Item, item_id)
    if item is None or item.project_id != project.id:
        raise NotFound(f"no item {item_id} in project {project.id}")
    return item


def _row(request: Request, session, project, item: Item, error: str | None) -> HTMLResponse:
    """One row of the items table as it stands, saying what failed or that it saved."""
    asked = curation.times_asked(session=session, project=project, item_ids=[item.id])
    context = {
        "project": project,
        "item": item,
        "asked": asked[item.id],
        "error": error,
        "saved": error is None,
        "media": media_folder(project.public_slug),
    }
    return render(request, "items/_row.html", context)


@router.post(
    "/projects/{project_id}/items/{item_id}/fix", response_class=HTMLResponse, name="fix_item_form"
)
def fix_item_form(
    project_id: RowId,
    item_id: RowId,
    request: Request,
    session: SessionDep,
    researcher: ChangingPage,
    label: Annotated[str, Form(max_length=300)] = "",
    split: Annotated[str, Form(max_length=20)] = "",
):
    """The row's label and split, saved; an empty label takes it away."""
    project = get_project(session=session, researcher=researcher, project_id=project_id)
    item = _item_of(session, project, item_id)
    changes = {"label": label.strip() or None}
    if split and split != item.split.value:  # an unchanged select leaves the rule to decide
        changes["split"] = split
    error = None
    try:
        curation.fix_item(session=session, project=project, item=item, changes=changes)
    except ServiceError as refused:
        if not request.headers.get("HX-Request"):
            raise  # shown on the app's error page, as any refused form is
        roll_back(session)
        item = session.get_one(Item, item_id)
        error = str(refused.detail)
    if request.headers.get("HX-Request"):  # htmx swaps a 2xx only: the row says what failed
        return _row(request, session, project, item, error)
    return RedirectResponse(request.url_for("items_page", project_id=project_id).path, 303)


@router.post(
    "/projects/{project_id}/items/{item_id}/delete",
    response_class=HTMLResponse,
    name="delete_item_form",
)
def delete_item_form(
    project_id: RowId,
    item_id: RowId,
    request: Request,
    session: SessionDep,
    researcher: ChangingPage,
):
    """The item deleted with its answers, as DELETE /projects/{id}/items/{key} does; the
    row says what went, or why it stays."""
    project = get_project(session=session, researcher=researcher, project_id=project_id)
    item = _item_of(session, project, item_id)
    try:
        deleted = removal.delete_item(
            session=session, store=request.app.state.images, project=project, item=item
        )
    except ServiceError as refused:
        if not request.headers.get("HX-Request"):
            raise
        roll_back(session)
        return _row(request, session, project, session.get_one(Item, item_id), str(refused.detail))
    if request.headers.get("HX-Request"):
        return render(request, "items/_deleted_row.html", {"item_id": item_id, "deleted": deleted})
    return RedirectResponse(request.url_for("items_page", project_id=project_id).path, 303)
