"""Each project's item ids, kept per process: random triplets and attention checks
draw from them on every rater request."""

from __future__ import annotations

import threading
import time

import numpy as np
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.core import caches
from app.models import Item, Project

ITEM_CACHE_SECONDS = 30.0


class _ItemIds:
    """Each project's item ids, read at most every few seconds per process: random
    triplets and attention checks draw from them on every request. Keyed by the public
    slug, which no other project ever gets (SQLite may give a deleted project's id to a
    new one), and held while the study's settings version stands: deleting an item
    raises it, so no process draws a deleted item (a new item may wait a few seconds)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._cache: dict[str, tuple[float, int, np.ndarray]] = {}

    def cached(self, project: Project) -> np.ndarray | None:
        """The ids if this process read them in the last few seconds."""
        with self._lock:
            hit = self._cache.get(_key(project))
        if hit is None or hit[1] != project.settings_version:
            return None
        return hit[2] if time.monotonic() - hit[0] < ITEM_CACHE_SECONDS else None

    def get(self, session: Session, project: Project) -> np.ndarray:
        hit = self.cached(project)
        if hit is not None:
            return hit
        if project.arm_items is not None:
            return self._arm_items(session, project)
        now = time.monotonic()
        with self._lock:
            held = self._cache.get(project.public_slug)
        if (
            held is not None
            and held[1] == project.settings_version
            and _same_items(session, project, held[2])
        ):
            ids = held[2]
        else:
            ids = np.array(
                session.scalars(
                    select(Item.id).where(Item.project_id == project.id).order_by(Item.id)
                ).all(),
                dtype=np.int64,
            )
        with self._lock:
            self._cache[project.public_slug] = (now, project.settings_version, ids)
        return ids

    def _arm_items(self, session: Session, project: Project) -> np.ndarray:
        """The ids of the items an arm asks about (by key, read against the study's)."""
        wanted = set(project.arm_items or ())
        ids = np.array(
            [
                item_id
                for item_id, key in session.execute(
                    select(Item.id, Item.key).where(Item.project_id == project.id).order_by(Item.id)
                )
                if key in wanted
            ],
            dtype=np.int64,
        )
        with self._lock:
            self._cache[_key(project)] = (time.monotonic(), project.settings_version, ids)
        return ids


def _key(project: Project) -> str:
    """The slug, and the arm of an arm that asks about items of its own."""
    return (
        project.public_slug
        if project.arm_items is None
        else f"{project.public_slug}/{project.arm_shown}"
    )


def _same_items(session: Session, project: Project, ids: np.ndarray) -> bool:
    """Whether the project still holds exactly `ids` (sorted): the same count and newest
    id, as deleting an item raises the settings version. Re-reading 50,000 ids held a web
    process for most of a second every half minute (raters' p99 showed it)."""
    count, newest = session.execute(
        select(func.count(Item.id), func.max(Item.id)).where(Item.project_id == project.id)
    ).one()
    return count == len(ids) and (count == 0 or newest == ids[-1])


def item_ids() -> _ItemIds:
    return caches.current().get("scheduling.item_ids", _ItemIds)
