"""The rater's next query, decided as the one before it is served, so that the rating
page loads its items while the rater answers and the next screen shows whole at once.

When a query is served, the draws of the serving after it (`Draws.ahead`) decide what
the next one is: an attention check, a random question, a repeated one (the noise
ceiling's) or the queue's. For a check or a random question they also pick which one:
the first of the drawn candidates (triplets or screens) the rater was never served;
the full search, where all of them were seen, waits for the answer (it is not run twice).
So they do for the queue's turn where the queue has nothing for the rater (no build,
routing or sampler waits for answers: most studies), since that turn then asks a random
question: as the lease of the query being served found, or where it leased nothing, as
a look at the queue's open slots finds. The assignment stores the decision (`upcoming_*`), and the answer serves the
stored query if the rater was not served it since.

The queue's slots are leased at the answer, never ahead: a slot held for a rater who has
yet to answer is held from the raters who could answer it now (and walking past the
slots raters hold made every lease slower: the look-ahead leases that were backed out
in 5f471f1). A repeated question is chosen at the answer too, since its last places are
counted by the raters who hold it; the one it would be as the query before it is served
is stored all the same, so that the page loads its items: only where other raters filled
its places meanwhile does the rater wait for another. The answer function hands such an
answer to the Python path (app/rating/service.py: answer_quickly), which draws it.

closer_answer() makes the same decision from the same draws; the differential test
(tests/test_answer_paths.py) holds the two to it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime

import numpy as np
from sqlalchemy.orm import Session

from app.formats import Screen, ScreenKey, named
from app.models import FROM_QUEUE, Project, Purpose
from app.scheduling import screens, unseen
from app.scheduling.draws import Draws
from app.scheduling.statements import OPEN_SLOT

# The purposes whose query is drawn ahead (the queue's, while it has no open slot).
DRAWN_AHEAD = (Purpose.attention, Purpose.random, FROM_QUEUE)


@dataclass(frozen=True)
class Upcoming:
    """What a rater's next query is to be: its `purpose` (a Purpose, or FROM_QUEUE), and
    for a check or a random question the query drawn (`key`; a screen study's `screen`),
    None where every drawn candidate was seen."""

    purpose: int
    key: ScreenKey | None = None  # a repeated question's: the one to load, chosen again
    screen: Screen | None = None

    @property
    def items(self) -> tuple[int, ...]:
        """The ids of the items it shows, each once (what the page loads ahead)."""
        if self.screen is not None:
            reference = () if self.screen.reference is None else (self.screen.reference,)
            return tuple(dict.fromkeys((*reference, *self.screen.shown)))
        return () if self.key is None else tuple(dict.fromkeys(self.key))

    def columns(self) -> dict:
        """The assignment's `upcoming_*` values, as the serving statements bind them."""
        anchor, lo, hi = self.key if self.key is not None else (None, None, None)
        screen = None
        if self.screen is not None:
            screen = {
                "format": self.screen.format.name,
                "reference": self.screen.reference,
                "shown": list(self.screen.shown),
                "picks": self.screen.picks,
            }
        return {
            "upcoming_purpose": self.purpose,
            "upcoming_anchor": anchor,
            "upcoming_lo": lo,
            "upcoming_hi": hi,
            "upcoming_screen": screen,
        }

    @classmethod
    def of(cls, row) -> Upcoming | None:
        """The decision an assignment's row holds (its `upcoming_*` columns); None where
        it holds none (served before they existed, or a sorting screen)."""
        if row.upcoming_purpose is None:
            return None
        key = None
        if row.upcoming_anchor_id is not None:
            key = (row.upcoming_anchor_id, row.upcoming_lo_id, row.upcoming_hi_id)
        drawn = row.upcoming_screen
        if isinstance(drawn, str):  # SQLite's driver gives JSON as text
            drawn = json.loads(drawn)
        screen = None
        if drawn is not None:
            screen = Screen(
                named(drawn["format"]), drawn["reference"], tuple(drawn["shown"]), drawn["picks"]
            )
        return cls(row.upcoming_purpose, key, screen)


NOTHING_AHEAD = {
    "upcoming_purpose": None,
    "upcoming_anchor": None,
    "upcoming_lo": None,
    "upcoming_hi": None,
    "upcoming_screen": None,
}


def columns(upcoming: Upcoming | None) -> dict:
    """The `upcoming_*` values of a serving: none where nothing was decided."""
    return NOTHING_AHEAD if upcoming is None else upcoming.columns()


def decide(project: Project, draws: Draws) -> int:
    """What the serving with these draws asks: a check below the study's attention
    rate, a random question (or, at a triplet study's repeat share, a repeated one)
    below that plus its random share, else the queue's."""
    if draws.kind < project.attention_rate:
        return Purpose.attention
    if draws.kind < project.attention_rate + project.random_share:
        if screens.screen_format(project) is None and unseen.repeats_now(project, draws):
            return Purpose.repeat
        return Purpose.random
    return FROM_QUEUE


def still_asked(project: Project, purpose: int) -> bool:
    """Whether the study's settings still ask queries of this kind at all: a decision
    made before checks, random questions or the queue's turns were switched off is
    made again."""
    if purpose == Purpose.attention:
        return project.attention_rate > 0
    if purpose == Purpose.random:
        return project.random_share > 0
    if purpose == Purpose.repeat:
        return project.random_share > 0 and project.repeat_share > 0
    return project.attention_rate + project.random_share < 1


def draw(
    session: Session,
    project: Project,
    rater_id: int,
    ids: np.ndarray,
    draws: Draws | None,
    served: ScreenKey,
    queue_free: bool | None,
    now: datetime,
) -> Upcoming | None:
    """The next query, decided from `draws` (a serving's `ahead`) as the query `served`
    is served: never that one, nor one the rater had. `queue_free`: whether this
    serving's lease found a slot (None: it leased none)."""
    if draws is None:
        return None
    purpose = decide(project, draws)
    if purpose == Purpose.repeat:
        return Upcoming(
            purpose, unseen.repeated_triplet(session, project, rater_id, ids, now, served)
        )
    if purpose not in DRAWN_AHEAD:
        return Upcoming(purpose)
    if purpose == FROM_QUEUE and project.arm_items is None:
        if queue_free if queue_free is not None else _queue_open(session, project.id):
            return Upcoming(purpose)
    check = purpose == Purpose.attention
    if screens.screen_format(project) is not None:
        screen = unseen.screen(
            session, project, rater_id, ids, check, draws, taken=served, whole=False
        )
        return Upcoming(purpose, None if screen is None else screen.key, screen)
    return Upcoming(purpose, unseen.drawn_triplet(session, rater_id, ids, check, draws, served))


def still_unseen(
    session: Session, project: Project, rater_id: int, upcoming: Upcoming | None, check: bool
) -> Screen | tuple[int, int, int] | None:
    """The query drawn ahead, where it is of the kind now asked (`check`) and of the
    study's kind (a screen or a triplet), and the rater was not served it since (the
    answer to a lease that ran out comes after another query was served)."""
    if upcoming is None or upcoming.key is None or upcoming.purpose == Purpose.repeat:
        return None
    if (upcoming.purpose == Purpose.attention) != check:
        return None
    if (upcoming.screen is None) != (screens.screen_format(project) is None):
        return None
    if unseen.was_served(session, rater_id, upcoming.key):
        return None
    return upcoming.screen if upcoming.screen is not None else upcoming.key


def _queue_open(session: Session, project_id: int) -> bool:
    """Whether the study's queue has an open slot (as closer_answer() asks it)."""
    return OPEN_SLOT.run(session, {"project": project_id}) is not None
