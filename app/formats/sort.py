"""The sorting screen: a CompRF node's items beside its two pivots, each item to be put
with the pivot it resembles more (app/scheduling/sorting.py serves them). Each item
sorted implies one triplet (item, its pivot, the other pivot); "can't tell" implies
none. Studies do not choose it, and judgement files export it but do not take it in
(its triplets are uploaded instead)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from app.core.i18n import ENGLISH, N_, Wording
from app.formats.base import (
    Choice,
    FileRow,
    JudgementFormat,
    Screen,
    ScreenKey,
    SimulatedRater,
)
from app.formats.registry import register

SIDES = (Choice.left.value, Choice.right.value, Choice.cant_tell.value)


class SortingScreen(JudgementFormat):
    name = "sort"
    answered_with = "sides"
    has_pivots = True
    cant_tell_button = False  # each item has its own
    noun = "sorting screen"

    def question(self, project_question: str) -> str:
        return N_("Which of these two is each item below more like?")

    def key(self, screen: Screen) -> ScreenKey:
        """Its first item's query."""
        assert screen.pivots is not None
        return screen.shown[0], min(screen.pivots), max(screen.pivots)

    def served(
        self, anchor: int, left: int, right: int, shown: Sequence[int], picks: int
    ) -> Screen:
        return Screen(self, None, tuple(shown), 0, (left, right))

    def expected_answer(self, picks: int, allow_cant_tell: bool = True) -> str:
        sides = '"left" or "right"' + (', or "cant_tell"' if allow_cant_tell else "")
        return (
            'this query is a sorting screen: answer with "sides", one {"key", "side"} per '
            f"item shown, the side of the pivot it is more like ({sides})"
        )

    def problem(self, picks: int, wording: Wording = ENGLISH) -> str:
        return wording.gettext(
            N_("Put every item with the one of the two it is more like, then press Submit.")
        )

    def sides_of(
        self,
        shown: list[int],
        keys: dict[int, str],
        sent: list[tuple[str, str]],
        allow_cant_tell: bool,
    ) -> list[str] | str:
        """The side each shown item was put on, in display order, or what is wrong with
        `sent` (pairs of item key and side)."""
        wrong = self.expected_answer(0, allow_cant_tell)
        by_key = {keys[item]: at for at, item in enumerate(shown) if item in keys}
        sides: list[str | None] = [None] * len(shown)
        for key, side in sent:
            at = by_key.get(key)
            if at is None:
                return f"{wrong}; {key!r} is not one of the items shown"
            if sides[at] is not None:
                return f"{wrong}; {key!r} was sent twice"
            if side not in SIDES:
                return f"{wrong}; no side for {key!r}" if not side else f"{wrong}; got {side!r}"
            if side == Choice.cant_tell.value and not allow_cant_tell:
                return f'{wrong}; this project does not offer "can\'t tell" ({key!r})'
            sides[at] = side
        missing = [
            keys.get(item, str(item))
            for item, side in zip(shown, sides, strict=True)
            if side is None
        ]
        if missing:
            return f"{wrong}; no side for {missing[0]!r}" + (
                f" and {len(missing) - 1} more" if len(missing) > 1 else ""
            )
        return [side for side in sides if side is not None]  # (every one is set)

    def sorted_triplets(
        self, pivots: tuple[int, int], shown: list[int], sides: list[str]
    ) -> list[tuple[int, int, int]]:
        """The triplets (item, its pivot, the other pivot) of the items told."""
        return [
            (item, *(pivots if side == Choice.left.value else pivots[::-1]))
            for item, side in zip(shown, sides, strict=True)
            if side != Choice.cant_tell.value
        ]

    def exported(self, context: list, shown: list, chosen: list, keys: dict[int, str]) -> FileRow:
        """Its pivots, and as its picks the side each item was put on."""
        left, right = (keys.get(pivot) for pivot in context)
        return FileRow(None, left, right, list(chosen))

    def simulated_answer(self, comparison: dict, rater: SimulatedRater) -> dict:
        """Each item a triplet decision of its own, with the oracle's noise."""
        left, right = (rater.index[pivot["key"]] for pivot in comparison["pivots"])
        keys = [item["key"] for item in comparison["items"]]
        answered = rater.oracle.answer(np.array([[rater.index[k], left, right] for k in keys]))
        return {
            "sides": [
                {"key": key, "side": "left" if row[1] == left else "right"}
                for key, row in zip(keys, answered.tolist(), strict=True)
            ]
        }


SORT = register(SortingScreen())
