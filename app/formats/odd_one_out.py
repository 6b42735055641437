"""Odd one out: which of three items is least like the other two? One tap, two
triplets (each of the other two is closer to its partner than to the odd one). Its
check (see ThreeItems) shows one item twice beside another: the other is the odd one."""

from __future__ import annotations

import numpy as np

from app.core.i18n import ENGLISH, N_, Wording
from app.formats.base import SimulatedRater, ThreeItems
from app.formats.registry import register
from app.learn.choices import Choices, odd_one_out_choices
from app.learn.judgements import odd_one_out_triplets


class OddOneOut(ThreeItems):
    name = "odd_one_out"
    label = "Odd one out: which of three items is least like the other two? One tap, two triplets."
    default_question = N_("Which one is least like the other two?")
    read_when_undeclared = True
    noun = "odd-one-out screen"
    learned_whole = True

    def expected_answer(self, picks: int, allow_cant_tell: bool = True) -> str:
        return 'this query is an odd-one-out: answer with "picks", the key of the odd one'

    def problem(self, picks: int, wording: Wording = ENGLISH) -> str:
        return wording.gettext(N_("Tap the one least like the other two."))

    def check_passed(self, reference: int | None, shown: list, picked: list) -> bool:
        return shown.count(picked[0]) == 1

    def implied_triplets(self, reference, shown: list[int], picked: list[int]) -> np.ndarray:
        return odd_one_out_triplets([shown], [picked[0]])[0]

    def choice_pairs(self, reference, shown) -> list[tuple[int, int]]:
        # The odd one is chosen by choosing the other two as the likest pair.
        first, second, third = (int(item) for item in shown)
        return [(second, third), (first, third), (first, second)]

    def implied_choices(self, references, shown, picked) -> Choices:
        return odd_one_out_choices(shown, picked[:, 0])

    def file_row_problem(self, reference, items: list, picks: list):
        if reference is not None:
            return "reference", "an odd-one-out has no reference"
        if len(items) != 3 or len(picks) != 1:
            return (
                None,
                f"an odd-one-out shows 3 items and picks 1; got {len(items)} and {len(picks)}",
            )
        return None

    def simulated_answer(self, comparison: dict, rater: SimulatedRater) -> dict:
        keys = [item["key"] for item in comparison["items"]]
        lapse = rater.rng.random() < rater.noise
        once = [key for key in keys if keys.count(key) == 1]
        if len(once) == 1:  # a check, answered right but for the uniform model's lapses
            return {"picks": [rater.rng.choice(keys) if lapse else once[0]]}
        shown = [rater.index[key] for key in keys]
        return {"picks": [keys[shown.index(rater.oracle.odd_one_out(shown))]]}


ODD_ONE_OUT = register(OddOneOut())
