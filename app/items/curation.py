"""Looking after a project's items once they are in: find them (by key, text or label),
see how often raters were asked about each, and fix a label or a split. The items page
and the JSON API both come here, so a fix follows the rules an upload follows."""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, literal, or_, select, union_all
from sqlalchemy.orm import Session

from app.core.errors import ServiceError
from app.items.parsing import label_problem, split_problem, unknown_split
from app.models import Item, Project, Split, Triplet
from app.triplets.log import published

MAX_SEARCH = 200


def _like(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def search_items(
    *,
    session: Session,
    project: Project,
    search: str | None,
    split: Split | None,
    limit: int,
    offset: int,
    key: str | None = None,
) -> tuple[list[Item], int]:
    """A page of the project's items in upload order, those whose key, text or label
    contains `search` (any case), in `split` and (if given) with exactly this `key`, with
    how many there are in all."""
    query = select(Item).where(Item.project_id == project.id)
    if key is not None:
        query = query.where(Item.key == key)
    if split is not None:
        query = query.where(Item.split == split)
    if search:
        pattern = _like(search[:MAX_SEARCH].lower())
        query = query.where(
            or_(
                *(
                    func.lower(column).like(pattern, escape="\\")
                    for column in (Item.key, Item.text, Item.label)
                )
            )
        )
    total = session.scalar(query.with_only_columns(func.count(Item.id))) or 0
    # The page's ids first, from the (project_id, id) index alone, then their rows: an
    # OFFSET over whole rows read every row before the page.
    page = query.with_only_columns(Item.id).order_by(Item.id).limit(limit).offset(offset)
    items = session.scalars(select(Item).where(Item.id.in_(page)).order_by(Item.id)).all()
    return list(items), total


def times_asked(*, session: Session, project: Project, item_ids: list[int]) -> dict[int, int]:
    """How many answers name each of these items (as anchor or candidate)."""
    if not item_ids:
        return {}
    mine = (Triplet.project_id == project.id, published(project.id))
    named = union_all(
        *(
            select(column.label("item_id"), literal(1).label("one")).where(
                *mine, column.in_(item_ids)
            )
            for column in (Triplet.anchor_id, Triplet.closer_id, Triplet.farther_id)
        )
    ).subquery()
    counted = session.execute(select(named.c.item_id, func.count()).group_by(named.c.item_id)).all()
    return {item_id: 0 for item_id in item_ids} | {int(i): int(n) for i, n in counted}


def fix_item(*, session: Session, project: Project, item: Item, changes: dict[str, Any]) -> Item:
    """A new label or split, checked as an upload's row is. Taking the label away makes an
    item unlabelled, and labelling an unlabelled one makes it a training item, unless the
    change names the split. Models use the fix from their next fit; a build already
    running keeps the labels it started with."""
    label = changes["label"] if "label" in changes else item.label
    if label is not None:
        label = label.strip()
        problem = label_problem(project.label_type, label)
        if not label or problem is not None:
            raise ServiceError(f"label: {problem or 'empty; send null to take the label away'}")
    if "split" in changes and changes["split"] is not None:
        try:
            split = Split(changes["split"])
        except ValueError:
            raise ServiceError(f"split: {unknown_split(changes['split'])}") from None
    elif label is None:
        split = Split.unlabelled
    elif item.split is Split.unlabelled:
        split = Split.train
    else:
        split = item.split
    problem = split_problem(split, label)
    if problem is not None:
        raise ServiceError(f"split: {problem}")
    item.label, item.split = label, split
    session.flush()
    return item
