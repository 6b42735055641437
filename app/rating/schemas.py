from __future__ import annotations

from typing import Annotated

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    TypeAdapter,
    model_validator,
)

from app.core.fields import RequestModel
from app.formats import TRIPLET
from app.models import Choice, LinkState
from app.projects.schemas import Questionnaire
from app.rating.path import Step
from app.scheduling.service import MAX_QUERY_ID, MAX_RESPONSE_MS


class JoinIn(RequestModel):
    """The recruiting platform's ids, as its link would pass them (all optional)."""

    model_config = ConfigDict(extra="forbid")

    participant: str | None = Field(default=None, max_length=200)
    PROLIFIC_PID: str | None = Field(default=None, max_length=200)
    STUDY_ID: str | None = Field(default=None, max_length=200)
    SESSION_ID: str | None = Field(default=None, max_length=200)
    workerId: str | None = Field(default=None, max_length=200)
    assignmentId: str | None = Field(default=None, max_length=200)
    hitId: str | None = Field(default=None, max_length=200)


class ShownItem(BaseModel):
    key: str
    text: str | None
    image_url: str | None
    clip_url: str | None = Field(
        default=None, description="A sound or video to play (served with range requests)"
    )
    clip_type: str | None = Field(default=None, description='Its type ("audio/mpeg", "video/mp4")')
    clip_seconds: float | None = Field(default=None, description="Its length")
    alt: str = Field(
        default="",
        description="What a screen reader says for its image or clip (the uploaded alt, else "
        "its text, else its key)",
    )


class ComparisonOut(BaseModel):
    query_id: int = Field(
        description="Send it back with the answer: it makes the answer idempotent"
    )
    format: str = Field(
        default=TRIPLET.name,
        description="What the screen asks: triplet (anchor, left, right; answer with "
        "`choice`), odd_one_out (three `items`; answer with `picks`: the key of the one "
        "least like the other two), rank (`reference` and `items`; answer with `picks`: "
        "the keys of `picks` items, most like the reference first) or sort (two `pivots` "
        "and `items`; answer with `sides`: each item's side, that of the pivot it is more "
        "like)",
    )
    anchor: ShownItem | None = Field(default=None, description="triplet: the item on top")
    left: ShownItem | None = Field(default=None, description="triplet: the left candidate")
    right: ShownItem | None = Field(default=None, description="triplet: the right candidate")
    items: list[ShownItem] | None = Field(
        default=None,
        description="odd_one_out, rank: the items to pick among; sort: the items to put "
        "with a pivot; in display order",
    )
    reference: ShownItem | None = Field(
        default=None, description="rank: the item the picks must be most like"
    )
    picks: int | None = Field(
        default=None, description="odd_one_out, rank: how many keys the answer's picks hold"
    )
    pivots: list[ShownItem] | None = Field(
        default=None, description="sort: the two pivots, left then right as shown"
    )
    practice: bool = Field(
        default=False,
        description="A practice screen (step practice): answered like any, its answer is "
        "kept apart and never counted, and the response carries its `feedback`",
    )


class FeedbackOut(BaseModel):
    correct: bool = Field(description="Whether the practice answer was the one expected")
    expected: list[str] = Field(
        description="The keys a right answer picks (triplet: the closer candidate; odd one "
        "out: the odd one; rank: the picks, most alike first)"
    )
    given: list[str] = Field(description='The keys the answer picked (["cant_tell"]: can\'t tell)')
    message: str = Field(
        description='What to tell the participant: "Correct!" or the answer expected'
    )


class ConsentOut(BaseModel):
    text: str = Field(description="The lab's text, in Markdown")
    statements: list[str] = Field(description="Each to be ticked before agreeing")
    version: int = Field(description="The version agreed to (it rises with each change)")


class RaterStateOut(BaseModel):
    step: Step = Field(
        default=Step.task,
        description="Where the participant is on the study's path: consent (answer with "
        "POST …/consent before anything is asked), instructions (a join's state when the "
        "study has them), questionnaire (answer with POST …/questionnaire), task "
        "(comparisons), practice (practice screens with feedback, answered like comparisons and "
        "never counted), break (a block ended: show a break before the comparison), debrief (the session is over: show "
        "`debrief` with the code), done (over, no debrief)",
    )
    consent: ConsentOut | None = Field(
        default=None, description="At the consent step: what the participant agrees to"
    )
    debrief: str | None = Field(
        default=None, description="At the debrief step: the lab's text (Markdown)"
    )
    questionnaire: Questionnaire | None = Field(
        default=None,
        description="At the questionnaire step: its questions (answer with POST "
        "…/questionnaire); after the task, the completion code comes once it is answered",
    )
    block: int = Field(default=1, description="The block the next answer is in (1-based)")
    blocks: int = Field(default=1, description="How many blocks a session has")
    break_seconds: int = Field(
        default=0,
        description="At a break (step break: a block just ended; the comparison comes "
        "after it): how many seconds the break lasts at least",
    )
    timed_out: bool = Field(
        default=False,
        description="The session ran longer than the study's limit (max_session_minutes) "
        "and ended there, with the timeout code (if set) as completion_code",
    )
    declined: bool = Field(
        default=False,
        description="The participant declined the consent: the session ended there, with "
        "the no-consent code (if set) as completion_code, never the completion code",
    )
    comparison: ComparisonOut | None = Field(
        description="The next comparison; null once the session is over"
    )
    upcoming: list[ShownItem] = Field(
        default_factory=list,
        description="The items of the comparison likely to come after this one (an "
        "attention check or a random question, drawn as this one was served): fetch their "
        "images while the rater answers, and the next screen can show whole at once. Empty "
        "where the next comes from the study's queue (its build's questions are chosen at "
        "the answer), or nothing is drawn ahead",
    )
    answered: int
    target: int = Field(description="Answers that complete a session (0: no limit)")
    complete: bool = Field(description="The session is over: show the completion code")
    out_of_work: bool = Field(
        default=False,
        description="The session ended before the target: the rater was served every "
        "query the study has; completion_code is then the no-more-work code if one is set",
    )
    screened_out: bool = Field(
        default=False,
        description="The session ended because the rater fell below the attention-check "
        "accuracy in a project with a code for that; completion_code is then that code, "
        "completion_url its redirect, and nothing more is recorded from them",
    )
    completion_code: str | None
    completion_url: str | None
    replayed: bool = Field(default=False, description="This answer had been stored before")
    link: LinkState = Field(
        default=LinkState.open,
        description="The study link's state: while closed or paused nothing new is asked "
        "(an answer to the comparison already shown still counts) and no code is given",
    )
    arm: str | None = Field(
        default=None,
        description="The study's arm (condition) the participant was allocated on joining; "
        "null in a study without arms",
    )
    version: int = Field(
        default=1,
        description="The study's design version asking now: every answer records it",
    )
    feedback: FeedbackOut | None = Field(
        default=None,
        description="The answer to a practice screen: how it went (show it before the next "
        "screen); null otherwise",
    )
    practice_screen: int = Field(
        default=0, description="At the practice step: the practice screen shown (from 1)"
    )
    practice_screens: int = Field(default=0, description="How many practice screens the study has")
    failed_practice: bool = Field(
        default=False,
        description="The session ended because fewer practice screens were answered right "
        "than the study's pass mark; completion_code is then the screened-out code (if set)",
    )


class ConsentIn(RequestModel):
    model_config = ConfigDict(extra="forbid")

    agree: bool = Field(
        description="true: the participant agreed (each statement ticked); false: they "
        "declined, and the session ends"
    )


QuestionAnswer = (
    Annotated[str, StringConstraints(max_length=2_000)]
    | int
    | float
    | Annotated[list[Annotated[str, StringConstraints(max_length=200)]], Field(max_length=20)]
    | None
)


class QuestionnaireIn(RequestModel):
    model_config = ConfigDict(extra="forbid")

    answers: dict[Annotated[str, StringConstraints(max_length=40)], QuestionAnswer] = Field(
        max_length=30,
        description="By question name: text, a number, an option (choice, likert), a list "
        "of options (choices); an optional question may be left out or null",
    )


class JoinOut(RaterStateOut):
    rater_token: str = Field(description="Send as X-Rater-Token on the next calls")


# A screen shows at most 12 items; item keys are at most 200 characters.
MOST_PICKS, LONGEST_KEY = 12, 200
ItemKey = Annotated[str, StringConstraints(min_length=1, max_length=LONGEST_KEY)]


class SideIn(RequestModel):
    """Where a sorting screen's item goes: with the left or the right pivot."""

    model_config = ConfigDict(extra="forbid")

    key: ItemKey
    side: Choice = Field(
        strict=False,
        description='"left" or "right": the pivot the item is more like; "cant_tell" '
        "where the study offers it",
    )


MOST_PLAYS = 1_000  # plays of one item on one screen, at most
# How often each item of a screen (by key) was played before the answer: the API's
# `plays`, and the page's form field read with the same rule (PLAYS).
Plays = Annotated[
    dict[ItemKey, Annotated[int, Field(ge=0, le=MOST_PLAYS)]], Field(max_length=MOST_PICKS + 2)
]
PLAYS: TypeAdapter[dict[str, int]] = TypeAdapter(Plays)


class AnswerIn(RequestModel):
    """An answer: `choice` for a triplet ("cant_tell" for any screen, where the study
    offers it), `picks` for an odd-one-out or rank screen, `sides` for a sorting
    screen."""

    model_config = ConfigDict(extra="forbid")

    query_id: int = Field(ge=1, le=MAX_QUERY_ID)
    choice: Choice | None = Field(default=None, strict=False)
    picks: list[ItemKey] | None = Field(
        default=None,
        min_length=1,
        max_length=MOST_PICKS,
        description="The keys picked: the odd one (odd_one_out), or the comparison's "
        "`picks` items most like the reference, most alike first (rank)",
    )
    sides: list[SideIn] | None = Field(
        default=None,
        min_length=1,
        max_length=MOST_PICKS,
        description="A sorting screen's answer: one side per item shown",
    )
    response_time_ms: int | None = Field(default=None, ge=0, le=MAX_RESPONSE_MS)
    plays: Plays | None = Field(
        default=None,
        description="A screen of sounds or videos: how often each item (by key) was played "
        "before the answer (stored with it)",
    )

    @model_validator(mode="after")
    def _one_answer(self) -> AnswerIn:
        if sum(answer is not None for answer in (self.choice, self.picks, self.sides)) != 1:
            raise ValueError(
                'send one of "choice" (a triplet: "left" or "right"), "picks" (an '
                'odd-one-out or rank screen: item keys) or "sides" (a sorting screen: '
                '{"key", "side"} per item)'
            )
        return self

    @property
    def side_pairs(self) -> list[tuple[str, str]] | None:
        """The sides as (item key, side) pairs."""
        return None if self.sides is None else [(s.key, s.side.value) for s in self.sides]
