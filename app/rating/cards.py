"""What raters see of the items: each item's card (its key, text and image), and a
served query drawn as the comparison a rater answers (a triplet, or a screen of
another format). The cards are kept per process: every answer shows a few items."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.core import caches
from app.formats import TRIPLET, JudgementFormat
from app.items.media import AUDIO, VIDEO, kind_of
from app.models import Item, Project
from app.scheduling import service as scheduling


@dataclass(frozen=True)
class Shown:
    """One item as a rater sees it: its text, and an image or a clip (a sound or video)."""

    key: str
    text: str | None
    image: str | None  # an image's file name under the project's media
    clip: str | None = None  # a sound's or video's file name there
    clip_type: str | None = None  # its type ("audio/mpeg")
    seconds: float | None = None  # its length
    alt: str | None = None  # what a screen reader says for the file (else its text)

    @classmethod
    def of(cls, row) -> Shown:
        """An item's card from its row (key, text, image_file, image_type, clip_seconds,
        alt)."""
        if kind_of(row.image_type) in (AUDIO, VIDEO):
            return cls(
                row.key, row.text, None, row.image_file, row.image_type, row.clip_seconds, row.alt
            )
        return cls(row.key, row.text, row.image_file, alt=row.alt)

    @property
    def said(self) -> str:
        """Its name for a screen reader: its alternative text, else its text, else its key."""
        return self.alt or self.text or self.key

    @property
    def clip_kind(self) -> str | None:
        """ "audio" or "video" for a clip; None for an image or a text."""
        return kind_of(self.clip_type)


# What a card is read from.
CARD_COLUMNS = (Item.key, Item.text, Item.image_file, Item.image_type, Item.clip_seconds, Item.alt)


@dataclass(frozen=True)
class Comparison:
    """A triplet (anchor, left, right), or a screen of another format: its items in
    display order, its reference (a format with one), how many to pick, its pivots (a
    sorting screen)."""

    assignment_id: int
    anchor: Shown | None
    left: Shown | None
    right: Shown | None
    format: JudgementFormat = TRIPLET
    items: tuple[Shown, ...] = ()
    reference: Shown | None = None
    picks: int = 0
    pivots: tuple[Shown, Shown] | None = None
    practice: bool = False  # a practice screen (app/rating/practice.py): never counted

    @classmethod
    def triplet(cls, assignment_id: int, cards: Sequence[Shown]) -> Comparison:
        """A triplet from its cards in the order anchor, left, right."""
        anchor, left, right = cards
        return cls(assignment_id, anchor, left, right)

    @property
    def has_clips(self) -> bool:
        """Whether a sound or video is among what it shows (the page plays them)."""
        cards = (self.anchor, self.left, self.right, self.reference, *self.items)
        return any(card is not None and card.clip for card in (*cards, *(self.pivots or ())))

    def triplet_cards(self) -> tuple[Shown, Shown, Shown]:
        """A triplet's anchor, left and right."""
        if self.anchor is None or self.left is None or self.right is None:
            raise ValueError(f"a {self.format.name} screen has no anchor and sides")
        return self.anchor, self.left, self.right


class _Cards:
    """How items look to raters, kept per process for about a minute: every answer shows
    a few items, and reading them each time would be a query per answer. Keyed by the
    project's public slug too, which is never reused. Each card is kept for a length
    drawn between half and one and a half `seconds`: cards read together (a study's
    first minute reads most of its items) then run out at different times, not all in
    the same second, when every answer would read its items again."""

    def __init__(self, seconds: float = 60.0, most: int = 200_000) -> None:
        self.seconds, self.most = seconds, most
        self._cards: dict[tuple[str, int], tuple[float, Shown]] = {}  # (runs out at, card)
        self._lock = threading.Lock()
        self._lengths = random.Random()

    def _lookup(self, project: Project, ids: tuple[int, ...]):
        now = time.monotonic()
        slug = project.public_slug
        with self._lock:
            hits = {i: self._cards.get((slug, i)) for i in ids}
        missing = {i for i, hit in hits.items() if hit is None or now > hit[0]}
        return now, hits, missing

    def cached(self, project: Project, ids: tuple[int, ...]) -> list[Shown] | None:
        """The items' cards if this process holds them all, fresh; None otherwise."""
        _, hits, missing = self._lookup(project, ids)
        return None if missing else [hits[i][1] for i in ids]

    def missing(self, project: Project, ids: tuple[int, ...]) -> set[int]:
        """Those of the items whose cards this process does not hold fresh."""
        return self._lookup(project, ids)[2]

    def keep(self, project: Project, rows) -> None:
        """Hold the cards of these items' rows (id and CARD_COLUMNS), read elsewhere."""
        self._keep(project, rows, time.monotonic(), {})

    def _keep(self, project: Project, rows, now: float, hits: dict) -> None:
        slug = project.public_slug
        with self._lock:
            if len(self._cards) > self.most:
                self._cards.clear()
            for row in rows:
                runs_out = now + self.seconds * (0.5 + self._lengths.random())
                card = (runs_out, Shown.of(row))
                hits[row.id] = self._cards[(slug, row.id)] = card

    def get(self, session: Session, project: Project, ids: tuple[int, ...]) -> list[Shown] | None:
        """The items' cards; None if one of them no longer exists (deleted while a
        query naming it was drawn)."""
        now, hits, missing = self._lookup(project, ids)
        if missing:
            rows = session.execute(
                select(Item.id, *CARD_COLUMNS).where(
                    Item.id.in_(missing), Item.project_id == project.id
                )
            ).all()
            self._keep(project, rows, now, hits)
            if len(rows) < len(missing):
                return None
        return [hits[i][1] for i in ids]


def card_cache() -> _Cards:
    return caches.current().get("rating.cards", _Cards)


def keys_of(session: Session, project: Project, item_ids: list[int]) -> dict[int, str]:
    """The items' keys from this process's cards (the screen just shown holds them)."""
    cards = card_cache().get(session, project, tuple(item_ids))
    return {} if cards is None else {i: card.key for i, card in zip(item_ids, cards, strict=True)}


def comparison_of(
    session: Session, project: Project, served: scheduling.ServedQuery
) -> Comparison | None:
    screen = served.screen
    if screen is None:
        ids = (served.anchor_id, served.left_id, served.right_id)
        cards = card_cache().get(session, project, ids)
        return None if cards is None else Comparison.triplet(served.assignment_id, cards)
    reference = () if screen.reference is None else (screen.reference,)
    cards = card_cache().get(session, project, (*(screen.pivots or ()), *reference, *screen.shown))
    if cards is None:
        return None
    return screen_of(served.assignment_id, screen.format, cards, screen.picks)


def screen_of(
    assignment_id: int, format: JudgementFormat, cards: list[Shown], picks: int
) -> Comparison:
    """A screen as shown: its cards start with its pivots or its reference, if it has
    them."""
    pivots = (cards[0], cards[1]) if format.has_pivots else None
    reference = cards[0] if format.has_reference else None
    first = 2 if pivots else int(reference is not None)
    return Comparison(
        assignment_id,
        None,
        None,
        None,
        format=format,
        items=tuple(cards[first:]),
        reference=reference,
        picks=picks,
        pivots=pivots,
    )


def by_key(session: Session, project: Project, keys: Sequence[str]) -> list[Shown] | None:
    """The items' cards by key, in that order; None if one of them no longer exists."""
    rows = session.execute(
        select(*CARD_COLUMNS).where(Item.project_id == project.id, Item.key.in_(set(keys)))
    ).all()
    found = {row.key: Shown.of(row) for row in rows}
    return None if len(found) < len(set(keys)) else [found[key] for key in keys]
