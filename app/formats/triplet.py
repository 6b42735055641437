"""The triplet: is the item on top closer to the left or the right one? One triplet a
screen. The scheduler draws triplets itself (and closer_answer() answers them in one
call on PostgreSQL); a triplet is stored as its triplet, not as a judgement."""

from __future__ import annotations

import numpy as np

from app.core.i18n import N_
from app.formats.base import Choice, JudgementFormat, SimulatedRater, reference_pairs
from app.formats.registry import register


class TripletComparison(JudgementFormat):
    name = "triplet"
    label = "Triplet: is the item on top closer to the left or the right one? One triplet a screen."
    default_question = N_("Which of the two is closer to the one on top?")
    answered_with = "choice"
    served_as_screen = False
    answers_word = "comparisons"
    noun = "comparison"
    predicted_by_choice_models = True

    def expected_answer(self, picks: int, allow_cant_tell: bool = True) -> str:
        return 'this query is a triplet: answer with "choice" ("left" or "right")'

    def choice_pairs(self, reference, shown) -> list[tuple[int, int]]:
        return reference_pairs(reference, shown)

    def screen_problem(self, reference, items: list, picks: int) -> str | None:
        if reference is None:
            return "a triplet needs its reference (the item on top)"
        if len(items) != 2 or picks != 1:
            return f"a triplet shows 2 items and picks 1; got {len(items)} and {picks}"
        return None

    def practice_candidates(self, items) -> list[str]:
        return list(items[1:])  # the one on top is not a candidate

    def practice_given(self, items, choice, picks) -> list[str] | str:
        """The candidate chosen: left is the screen's second item, right its third."""
        if choice in (Choice.left.value, Choice.right.value):
            return [items[1] if choice == Choice.left.value else items[2]]
        if choice == Choice.cant_tell.value:
            return [choice]
        return self.expected_answer(1)

    def simulated_answer(self, comparison: dict, rater: SimulatedRater) -> dict:
        a, left, right = (
            rater.index[comparison[role]["key"]] for role in ("anchor", "left", "right")
        )
        if a in (left, right):  # an attention check: the anchor itself is a candidate
            right_answer = "left" if a == left else "right"
            if rater.rng.random() < rater.noise:
                right_answer = "right" if right_answer == "left" else "left"
            return {"choice": right_answer}
        answered = rater.oracle.answer(np.array([[a, left, right]]))
        return {"choice": "left" if answered[0, 1] == left else "right"}


TRIPLET = register(TripletComparison())
