"""A judgement format written the way a new one is, to show the protocol holds: "which
of three is the middle one?". The two items the rater leaves are the ends: the middle
one is closer to each end than the other end is (two triplets a screen). Its check
shows one item twice beside another: either copy of the repeated one is the middle.

Nothing else in the service knows it: this module and its template
(tests/support/templates/formats/middle.html) are all there is."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from app.core.i18n import ENGLISH, Wording
from app.formats.base import ThreeItems


class MiddleOne(ThreeItems):
    name = "middle"
    label = "Middle one: which of three lies between the other two? Two triplets a screen."
    default_question = "Which one lies between the other two?"
    noun = "middle-one screen"
    template_folder = Path(__file__).parent / "templates"

    def expected_answer(self, picks: int, allow_cant_tell: bool = True) -> str:
        return 'this query is a middle-one screen: answer with "picks", the key of the middle one'

    def problem(self, picks: int, wording: Wording = ENGLISH) -> str:
        return wording.gettext("Tap the one between the other two.")  # (its own words)

    def check_passed(self, reference, shown: list, picked: list) -> bool:
        return shown.count(picked[0]) == 2

    def implied_triplets(self, reference, shown: list[int], picked: list[int]) -> np.ndarray:
        middle = picked[0]
        first, second = (item for item in shown if item != middle)
        return np.array([[first, middle, second], [second, middle, first]], dtype=np.int64)

    def file_row_problem(self, reference, items: list, picks: list):
        if reference is not None:
            return "reference", "a middle-one screen has no reference"
        if len(items) != 3 or len(picks) != 1:
            return (
                None,
                f"a middle-one screen shows 3 items and picks 1; got {len(items)} and {len(picks)}",
            )
        return None

    def simulated_answer(self, comparison: dict, rater) -> dict:
        keys = [item["key"] for item in comparison["items"]]
        repeated = [key for key in keys if keys.count(key) == 2]
        if repeated:
            return {"picks": [repeated[0]]}
        at = [rater.index[key] for key in keys]
        # The two farthest apart are the ends; the third is the middle.
        spans = [
            rater.oracle.distance(np.array([at[j]]), np.array([at[k]]))[0]
            for j, k in ((1, 2), (0, 2), (0, 1))
        ]
        return {"picks": [keys[int(np.argmax(spans))]]}


MIDDLE = MiddleOne()
