"""What a judgement format is: the protocol every format module implements.

A format is one object, made once in its module (app/formats/<name>.py) and registered
there (app/formats/registry.py). It knows what a screen of it shows and how one is drawn
from a study's items, its attention check, what a valid answer is, the triplets an
answer implies (through app/learn/judgements.py), its row in the judgement files, the
template that draws it (templates/formats/<name>.html), the words raters and
researchers read, and how a simulated rater answers it. The scheduler, the rating pages
and API, the uploads, exports, the workspace and `closer simulate` ask the object; none
of them names a format.

Two kinds of format exist:
- `JudgementFormat`: the base every format is; the triplet (answered with a `choice`)
  and CompRF's sorting screen (answered with `sides`) are drawn by the scheduler itself.
- `PickedScreen`: a screen drawn at random from a study's items and answered with
  `picks`, the keys of the items picked (rank; `ThreeItems`: odd-one-out). A new format
  of this kind is its module and its template, nothing else.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from enum import StrEnum
from itertools import combinations
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol

import numpy as np

from app.core.i18n import ENGLISH, Wording

if TYPE_CHECKING:
    from app.learn.choices import Choices

ScreenKey = tuple[int, int, int]  # (anchor_id, lo_id, hi_id) of the assignment


class Choice(StrEnum):
    """A side of a two-way choice (a triplet's answer, a sorted item's side)."""

    left = "left"
    right = "right"
    cant_tell = "cant_tell"


class StudyShape(Protocol):
    """The settings of a study that shape its screens (a Project has them)."""

    @property
    def shown(self) -> int: ...

    @property
    def picks(self) -> int: ...


@dataclass(frozen=True)
class ScreenShape:
    """A study's screen settings before they are saved."""

    shown: int
    picks: int


class SimulatedRater(Protocol):
    """What a format's simulated answer reads: item positions by key, the feature
    oracle (app/learn/oracles.py), a random source and the lapse rate of checks."""

    index: dict[str, int]
    oracle: Any
    rng: random.Random
    noise: float


@dataclass(frozen=True)
class Screen:
    """A screen as served: its format, the reference (a format with one), the items in
    display order, how many the rater picks, and a sorting screen's pivots (left, right
    as shown)."""

    format: JudgementFormat
    reference: int | None
    shown: tuple[int, ...]
    picks: int
    pivots: tuple[int, int] | None = None

    @property
    def key(self) -> ScreenKey:
        """What a rater is never served twice (stored in the assignment's anchor, lo, hi)."""
        return self.format.key(self)


@dataclass(frozen=True)
class FileRow:
    """A judgement as the judgement files hold it (item keys): what `exported` gives."""

    reference: str | None
    pivot_left: str | None
    pivot_right: str | None
    picks: list


class JudgementFormat:
    """One judgement format. Subclasses set the class attributes and implement what
    their kind needs; `name` is stored in the database and sent in the API."""

    name: ClassVar[str]
    # The settings page's sentence for it (None: a study cannot choose it).
    label: ClassVar[str | None] = None
    # The question raters read unless the researcher words it otherwise.
    default_question: ClassVar[str] = ""
    # What an answer sends: "choice" (left/right), "picks" (item keys), "sides".
    answered_with: ClassVar[Literal["choice", "picks", "sides"]] = "picks"
    # A reference the items are compared with (kept in the assignment's anchor and as
    # a judgement's context), or two pivots shown before the items.
    has_reference: ClassVar[bool] = False
    has_pivots: ClassVar[bool] = False
    # Whether it is served as a screen of items (else as a triplet: anchor, left, right).
    served_as_screen: ClassVar[bool] = True
    # Whether the page offers one "Can't tell" for the whole screen.
    cant_tell_button: ClassVar[bool] = True
    # What raters answer, counted: "There are 20 screens".
    answers_word: ClassVar[str] = "screens"
    # How the raters' pages and the workspace call one of it.
    noun: ClassVar[str] = "screen"
    # Where its template (formats/<name>.html) lies when not in the app's templates/: a
    # format kept outside the app (registry.template_source reads it from there).
    template_folder: ClassVar[Path | None] = None
    # A learner of choices (the choice model) learns its screens as the choices the
    # person made (`implied_choices`), not as their triplets: an odd-one-out is one
    # choice among three pairs. Where False its triplets are its choices, two-way each.
    learned_whole: ClassVar[bool] = False

    @property
    def template(self) -> str:
        """The template whose macros draw it: `screen(shown)`, `instructions(project)`
        and `how(project)`."""
        return f"formats/{self.name}.html"

    @property
    def asked_by_studies(self) -> bool:
        return self.label is not None

    @property
    def drawn_at_random(self) -> bool:
        """Whether the scheduler draws its screens from the study's items (`PickedScreen`)."""
        return False

    def __repr__(self) -> str:
        return f"<judgement format {self.name}>"

    def __str__(self) -> str:
        return self.name

    # A format equals its name (rows and JSON hold names): `row.format == "rank"`.
    def __eq__(self, other: object) -> bool:
        if isinstance(other, str):
            return other == self.name
        return self is other

    def __hash__(self) -> int:
        return hash(self.name)

    def question(self, project_question: str) -> str:
        """The question its screen asks, given the study's."""
        return project_question

    def items_per_screen(self, study: StudyShape) -> int:
        """Distinct items one screen shows, a reference included."""
        return 3

    def picks_of(self, study: StudyShape) -> int:
        """How many items a rater picks on one of its screens."""
        return 1

    def key(self, screen: Screen) -> ScreenKey:
        if screen.reference is None:
            low, middle, high = sorted(screen.shown)
            return low, middle, high
        return screen.reference, min(screen.shown), max(screen.shown)

    def served(
        self, anchor: int, left: int, right: int, shown: Sequence[int], picks: int
    ) -> Screen:
        """The screen an assignment holds (its anchor, its items on the left and right,
        the items it showed and how many to pick)."""
        reference = anchor if self.has_reference else None
        return Screen(self, reference, tuple(shown), picks)

    def expected_answer(self, picks: int, allow_cant_tell: bool = True) -> str:
        """What an answer to its screen must send, in words (for a refused one)."""
        raise NotImplementedError

    def problem(self, picks: int, wording: Wording = ENGLISH) -> str:
        """What the page says when an answer was sent incomplete (in its language)."""
        return self.expected_answer(picks)

    def check_passed(self, reference: int | None, shown: list, picked: list) -> bool:
        """Whether an attention check was answered as it must be."""
        raise NotImplementedError(f"a {self.name} screen is never a check")

    def implied_triplets(
        self, reference: int | None, shown: list[int], picked: list[int]
    ) -> np.ndarray:
        """The triplets (anchor, closer, farther) one answered screen implies."""
        raise NotImplementedError

    def screen_of(self, context: Sequence[int], shown: Sequence[int]) -> int:
        """A number naming one screen of it (its format, context and items, the order
        they were shown in aside): the judgements of people who answered the same screen
        share it (`judgements.screen`), so that they can be set against each other."""
        return screen_number(self.name, context, shown)

    def implied_choices(
        self, references: np.ndarray | None, shown: np.ndarray, picked: np.ndarray
    ) -> Choices:
        """The choices answered screens of it imply (`learned_whole`), a batch of
        screens alike at once: their references (or None), shown items (m, n) and picks
        (m, k), as the person made them; each choice's `judgement` is its row."""
        raise NotImplementedError(f"a {self.name} screen is learned as its triplets")

    # A client may ask a choice model how likely each choice on a screen of it is.
    predicted_by_choice_models: ClassVar[bool] = False

    def choice_pairs(self, reference: int | None, shown: Sequence[int]) -> list[tuple[int, int]]:
        """Per shown item, the pair whose likeness choosing it stands for: the
        alternatives a choice model weighs (app/learn/choices.py)."""
        raise NotImplementedError(f"a {self.name} screen is not predicted as a choice")

    def screen_problem(self, reference: object | None, items: list, picks: int) -> str | None:
        """What is wrong with the shape of a screen of it a client describes (to
        predict its choices); None when it fits."""
        raise NotImplementedError(f"a {self.name} screen is not predicted as a choice")

    def exported(self, context: list, shown: list, chosen: list, keys: dict[int, str]) -> FileRow:
        """Its judgement's cells in the judgement files, as item keys."""
        reference = keys.get(context[0]) if self.has_reference and context else None
        return FileRow(reference, None, None, [keys.get(item) for item in chosen])

    def simulated_answer(self, comparison: dict, rater: SimulatedRater) -> dict:
        """The body a simulated rater sends for `comparison` (the API's JSON)."""
        raise NotImplementedError

    def practice_candidates(self, items: Sequence[str]) -> list[str]:
        """The keys a practice screen's answer picks among (its items in screen order):
        all of them, or those after its reference."""
        return list(items[1:]) if self.has_reference else list(items)

    def practice_problem(
        self, study: StudyShape, items: Sequence[str], answer: Sequence[str]
    ) -> str | None:
        """What is wrong with a practice screen of it for `study` (its item keys in screen
        order, the keys a right answer picks), or None when it fits."""
        needed = self.items_per_screen(study)
        if len(items) != needed:
            return f"a {self.noun} of this study shows {needed} items; got {len(items)}"
        if len(set(items)) != len(items):
            return "an item is shown twice"
        picks = self.picks_of(study)
        if len(answer) != picks:
            return f"its answer picks {picks} item{'' if picks == 1 else 's'}; got {len(answer)}"
        if len(set(answer)) != len(answer):
            return "its answer picks an item twice"
        candidates = self.practice_candidates(items)
        stray = [key for key in answer if key not in candidates]
        if stray:
            return f"its answer {stray[0]!r} is not one of the items to choose among"
        return None

    def practice_given(
        self, items: Sequence[str], choice: str | None, picks: Sequence[str] | None
    ) -> list[str] | str:
        """The keys a practice answer picked (["cant_tell"] for "can't tell"), or what is
        wrong with it."""
        if choice == Choice.cant_tell.value:
            return [choice]
        if picks is None:
            return self.expected_answer(len(items))
        candidates = self.practice_candidates(items)
        stray = [key for key in picks if key not in candidates]
        if stray or len(set(picks)) != len(picks):
            return self.expected_answer(len(picks))
        return list(picks)


def screen_number(format_name: str, context: Sequence[int], shown: Sequence[int]) -> int:
    """63 bits of a hash of the screen: a signed BIGINT on both databases."""
    named = f"{format_name}|{','.join(map(str, context))}|{','.join(map(str, sorted(shown)))}"
    return int.from_bytes(hashlib.blake2b(named.encode(), digest_size=8).digest(), "big") >> 1


def reference_pairs(reference: int | None, shown: Sequence[int]) -> list[tuple[int, int]]:
    """Choosing an item is choosing its pair with the reference as the likest."""
    if reference is None:
        raise ValueError("a screen with a reference needs one")
    return [(int(reference), int(item)) for item in shown]


# Of a screen study's random screens, the share that repeat a screen other raters had.
# The study's repeated screens are drawn in a fixed order (`PickedScreen.repeated`), the
# same for every rater, and fill in turn: each until REPEAT_RATERS raters answered it, so
# that the others' majority is a steady guess of a screen's likeliest choice; at most
# MOST_REPEATED of them.
REPEAT_SHARE = 0.1
REPEAT_RATERS = 10
MOST_REPEATED = 1000


def repeat_source(salt: int, number: int) -> random.Random:
    """The source a study's repeated screen or triplet question `number` is drawn from:
    seeded by `salt` (the project) and the number, so the same for every rater."""
    return random.Random(f"repeat:{salt}:{number}")


class PickedScreen(JudgementFormat):
    """A screen drawn at random from the study's items, answered with `picks`."""

    def repeated(self, study: StudyShape, ids: np.ndarray, number: int, salt: int) -> Screen:
        """The study's repeated screen `number`: the same for every rater (drawn from a
        source seeded by `salt`, the project, and the number) while the study's items
        stay the same."""
        return self.draw(study, ids, repeat_source(salt, number), False)

    # Judgement files: it is uploaded, and a row that declares no format is read as it
    # when the row's reference (or its absence) matches `has_reference`.
    uploaded: ClassVar[bool] = True
    read_when_undeclared: ClassVar[bool] = False

    @property
    def drawn_at_random(self) -> bool:
        return True

    def draw(self, study: StudyShape, ids: np.ndarray, rng: random.Random, check: bool) -> Screen:
        """A random screen (or attention check) of the study's items `ids`."""
        raise NotImplementedError

    def key_count(self, study: StudyShape, n: int) -> int:
        """How many screen keys a study of `n` items has."""
        raise NotImplementedError

    def every_key(self, study: StudyShape, ids: np.ndarray) -> Iterator[ScreenKey]:
        """Every random screen's key, as positions in `ids`."""
        raise NotImplementedError

    def from_key(
        self, study: StudyShape, ids: np.ndarray, key: ScreenKey, rng: random.Random
    ) -> Screen:
        """A random screen with this key (positions in `ids`)."""
        raise NotImplementedError

    def around(
        self,
        study: StudyShape,
        ids: np.ndarray,
        triplet: tuple[int, int, int],
        rng: random.Random,
    ) -> Screen | None:
        """A screen that asks a proposed triplet (anchor, lo, hi); None if the study has
        too few items for one."""
        raise NotImplementedError

    def picked_ids(
        self, shown: list[int], picks: int, keys: dict[int, str], sent: list[str]
    ) -> list[int] | str:
        """The item ids the rater picked, or what is wrong with `sent` (the keys sent)."""
        wrong = self.expected_answer(picks)
        if len(sent) != picks:
            return f"{wrong}; got {len(sent)} key{'' if len(sent) == 1 else 's'}"
        if len(set(sent)) != len(sent):
            return f"{wrong}; a key was sent twice"
        by_key = {keys[item]: item for item in shown if item in keys}
        stray = [key for key in sent if key not in by_key]
        if stray:
            return f"{wrong}; {stray[0]!r} is not one of the items shown"
        return [by_key[key] for key in sent]

    def file_row_problem(
        self, reference: object | None, items: list, picks: list
    ) -> tuple[str | None, str] | None:
        """What is wrong with the shape of an uploaded row of it (the column at fault,
        or None for the row, and the message); None when it fits."""
        raise NotImplementedError

    predicted_by_choice_models: ClassVar[bool] = True

    def choice_pairs(self, reference: int | None, shown: Sequence[int]) -> list[tuple[int, int]]:
        return reference_pairs(reference, shown)

    def screen_problem(self, reference: object | None, items: list, picks: int) -> str | None:
        found = self.file_row_problem(reference, items, [None] * picks)
        return None if found is None else found[1]


class ThreeItems(PickedScreen):
    """A screen of three items and no reference, one of them picked (the odd one out,
    …); its key is the three items. Its check shows one item twice beside another."""

    def draw(self, study: StudyShape, ids: np.ndarray, rng: random.Random, check: bool) -> Screen:
        if check:
            twice, once = (int(ids[at]) for at in rng.sample(range(len(ids)), 2))
            shown = [twice, twice, once]
            rng.shuffle(shown)
            return Screen(self, None, tuple(shown), 1)
        picked = rng.sample(range(len(ids)), 3)
        return Screen(self, None, tuple(int(ids[at]) for at in picked), 1)

    def key_count(self, study: StudyShape, n: int) -> int:
        return n * (n - 1) * (n - 2) // 6

    def every_key(self, study: StudyShape, ids: np.ndarray) -> Iterator[ScreenKey]:
        yield from combinations(range(len(ids)), 3)

    def from_key(
        self, study: StudyShape, ids: np.ndarray, key: ScreenKey, rng: random.Random
    ) -> Screen:
        shown = [int(ids[at]) for at in key]
        rng.shuffle(shown)
        return Screen(self, None, tuple(shown), 1)

    def around(
        self,
        study: StudyShape,
        ids: np.ndarray,
        triplet: tuple[int, int, int],
        rng: random.Random,
    ) -> Screen | None:
        shown = list(triplet)
        rng.shuffle(shown)
        return Screen(self, None, tuple(shown), 1)
