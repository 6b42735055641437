"""What the workspace's pages need to show items beside a chart: each item's label, a
short text and its thumbnail, in one compact answer (the embedding page hovers 10,000)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from sqlalchemy import func, select

from app.auth.deps import WorkspaceResearcher
from app.core.deps import SessionDep
from app.core.fields import RowId
from app.core.routes import StrictJSONRoute
from app.models import Item
from app.projects.service import get_project
from app.rating.deps import media_folder

router = APIRouter(include_in_schema=False, route_class=StrictJSONRoute)
CARD_TEXT = 160


@router.get("/projects/{project_id}/item-cards.json", name="item_cards")
def item_cards(
    project_id: RowId, request: Request, session: SessionDep, researcher: WorkspaceResearcher
) -> JSONResponse:
    """{key: [label, text (cut short), image URL]} for every item of the project."""
    project = get_project(session=session, researcher=researcher, project_id=project_id)
    media = media_folder(project.public_slug)
    rows = session.execute(
        select(Item.key, Item.label, func.substr(Item.text, 1, CARD_TEXT), Item.image_file).where(
            Item.project_id == project.id
        )
    )
    cards = {
        key: [label, text, f"{media}/{image}" if image else None]
        for key, label, text, image in rows
    }
    return JSONResponse(cards, headers={"Cache-Control": "private, max-age=60"})
