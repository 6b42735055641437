"""Rank: pick the `picks` items most like a reference among `shown`, most alike first.
Every pick is closer to the reference than every item left unpicked, and each pick
closer than the picks after it: k(n-k) + k(k-1)/2 triplets a screen (13 for 2 of 8).

Its screen key is the reference and the smallest and largest of the other items: two
screens that differ only in their middle items share a key, and a rater is served one
of them, which costs a study nothing but screens it would rarely draw. Its check shows
the reference itself among the items: it is the first pick."""

from __future__ import annotations

import random
from collections.abc import Iterator

import numpy as np

from app.core.i18n import ENGLISH, N_, Wording
from app.formats.base import PickedScreen, Screen, ScreenKey, SimulatedRater, StudyShape
from app.formats.registry import register
from app.learn.choices import Choices, rank_choices
from app.learn.judgements import rank_triplets

# A rank screen shows at most this many items beside its reference.
MOST_SHOWN = 12


class Rank(PickedScreen):
    name = "rank"
    label = (
        "Rank: pick the items most like a reference among several, most alike first. "
        "Many triplets a screen."
    )
    default_question = N_("Pick the ones most like the one on top, most alike first.")
    has_reference = True
    read_when_undeclared = True
    noun = "rank screen"
    learned_whole = True

    def items_per_screen(self, study: StudyShape) -> int:
        return study.shown + 1

    def picks_of(self, study: StudyShape) -> int:
        return study.picks

    def draw(self, study: StudyShape, ids: np.ndarray, rng: random.Random, check: bool) -> Screen:
        size = study.shown + (0 if check else 1)
        picked = [int(ids[at]) for at in rng.sample(range(len(ids)), size)]
        reference, shown = picked[0], picked[1:]
        if check:
            shown.insert(rng.randrange(len(shown) + 1), reference)
        return Screen(self, reference, tuple(shown), study.picks)

    def key_count(self, study: StudyShape, n: int) -> int:
        return n * n * (n - 1) // 2

    def every_key(self, study: StudyShape, ids: np.ndarray) -> Iterator[ScreenKey]:
        """(reference, lo, hi) with room between lo and hi for the middle items."""
        n = len(ids)
        middle = study.shown - 2
        for reference in range(n):
            for lo in range(n):
                for hi in range(lo + middle + 1, n):
                    between = hi - lo - 1 - (lo < reference < hi)
                    if lo != reference and hi != reference and between >= middle:
                        yield reference, lo, hi

    def from_key(
        self, study: StudyShape, ids: np.ndarray, key: ScreenKey, rng: random.Random
    ) -> Screen:
        reference, lo, hi = key
        between = [at for at in range(lo + 1, hi) if at != reference]
        shown = [int(ids[at]) for at in [lo, hi, *rng.sample(between, study.shown - 2)]]
        rng.shuffle(shown)
        return Screen(self, int(ids[reference]), tuple(shown), study.picks)

    def around(self, study, ids, triplet, rng) -> Screen | None:
        """The anchor as reference, lo and hi among the items, the rest drawn."""
        anchor, lo, hi = triplet
        others = [int(item) for item in ids if item not in triplet]
        if len(others) < study.shown - 2:
            return None
        shown = [lo, hi, *rng.sample(others, study.shown - 2)]
        rng.shuffle(shown)
        return Screen(self, anchor, tuple(shown), study.picks)

    def expected_answer(self, picks: int, allow_cant_tell: bool = True) -> str:
        return (
            f'this query is a rank screen: answer with "picks", the keys of {picks} of the '
            "items shown, most alike first"
        )

    def problem(self, picks: int, wording: Wording = ENGLISH) -> str:
        if picks == 1:
            return wording.gettext(N_("Pick 1 of the items, then press Submit."))
        return wording.gettext(
            N_("Pick %(picks)s of the items, most alike first, then press Submit.")
        ) % {"picks": wording.number(picks)}

    def check_passed(self, reference: int | None, shown: list, picked: list) -> bool:
        return picked[0] == reference

    def implied_triplets(self, reference, shown: list[int], picked: list[int]) -> np.ndarray:
        return rank_triplets([reference], [shown], [picked])[0]

    def implied_choices(self, references, shown, picked) -> Choices:
        return rank_choices(references, shown, picked)

    def file_row_problem(self, reference, items: list, picks: list):
        if reference is None:
            return "reference", "a rank judgement needs its reference"
        if not 3 <= len(items) <= MOST_SHOWN or not 1 <= len(picks) < len(items):
            return None, (
                f"a rank judgement shows 3 to {MOST_SHOWN} items and picks fewer than it "
                f"shows; got {len(items)} and {len(picks)}"
            )
        return None

    def simulated_answer(self, comparison: dict, rater: SimulatedRater) -> dict:
        """Each pick with the oracle's noise; a check (the reference among the items)
        answered right, but for the lapses of the uniform noise model."""
        keys = [item["key"] for item in comparison["items"]]
        shown = [rater.index[key] for key in keys]
        lapse = rater.rng.random() < rater.noise
        reference, picks = comparison["reference"]["key"], comparison["picks"]
        if reference in keys:
            if lapse:
                return {"picks": rater.rng.sample(keys, picks)}
            rest = [key for key in keys if key != reference]
            ids = [rater.index[key] for key in rest]
            more = rater.oracle.rank(rater.index[reference], ids, picks - 1) if picks > 1 else ()
            return {"picks": [reference, *(rest[ids.index(item)] for item in more)]}
        picked = rater.oracle.rank(rater.index[reference], shown, picks)
        return {"picks": [keys[shown.index(item)] for item in picked]}


RANK = register(Rank())
