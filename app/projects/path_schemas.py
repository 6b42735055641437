"""The settings of the participant's path and the study's conditions as a request
sends them: the consent, the questionnaire, the practice screens and the arms
(app/projects/schemas.py holds them in the rating settings)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
    model_validator,
)

from app.core.fields import INT4_MAX
from app.formats import JudgementFormat, study_format


def _study_format(value: Any) -> str:
    """A study's judgement format by name (app/formats: one a study may choose)."""
    if isinstance(value, JudgementFormat):
        return value.name
    if not isinstance(value, str):
        raise ValueError("judgement must be a format's name")
    return study_format(value).name


StudyFormatName = Annotated[str, BeforeValidator(_study_format)]

Statement = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=500)]


QUESTION_KINDS = ("text", "number", "choice", "choices", "likert")
QuestionName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z][A-Za-z0-9_]{0,39}$")]
Option = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=200)]


class Question(BaseModel):
    """One question of the questionnaire: `name` keys its answers in the exports."""

    model_config = ConfigDict(extra="forbid")

    name: QuestionName = Field(description="Letters, digits and _, starting with a letter")
    kind: Literal["text", "number", "choice", "choices", "likert"] = Field(
        description="text (up to 2,000 characters), number, choice (one option), choices "
        "(any of the options), likert (one point of the options' scale, in order)"
    )
    prompt: str = Field(min_length=1, max_length=500)
    options: list[Option] = Field(
        default_factory=list,
        max_length=20,
        description="choice, choices, likert: the options in the order shown (2 to 20)",
    )
    required: bool = True

    @model_validator(mode="after")
    def _options_fit_the_kind(self) -> Question:
        if self.kind in ("choice", "choices", "likert"):
            if len(self.options) < 2:
                raise ValueError(f"question '{self.name}': a {self.kind} question needs 2 options")
            if len(set(self.options)) != len(self.options):
                raise ValueError(f"question '{self.name}': an option appears twice")
        elif self.options:
            raise ValueError(f"question '{self.name}': a {self.kind} question has no options")
        return self


class Questionnaire(BaseModel):
    """A short form before or after the task; its answers are stored per participant."""

    model_config = ConfigDict(extra="forbid")

    when: Literal["before", "after"] = Field(
        description="before: after the consent, before the first comparison; after: once "
        "the task is done, before the completion code"
    )
    questions: list[Question] = Field(min_length=1, max_length=30)

    @model_validator(mode="after")
    def _names_differ(self) -> Questionnaire:
        names = [question.name for question in self.questions]
        if len(set(names)) != len(names):
            raise ValueError("two questions have the same name")
        return self


class Consent(BaseModel):
    """What a participant agrees to before anything they answer is recorded: the lab's
    text (Markdown: raw HTML is shown as text) and the statements each to be ticked."""

    model_config = ConfigDict(extra="forbid")

    text: str = Field(min_length=1, max_length=20_000, description="Markdown")
    statements: list[Statement] = Field(
        min_length=1,
        max_length=10,
        description="Each one ticked before the participant can go on, e.g. "
        "'I have read the information above' and 'I agree to take part'",
    )


ItemKey = Annotated[str, StringConstraints(min_length=1, max_length=200)]
MOST_PRACTICE_TRIALS = 20


class PracticeTrial(BaseModel):
    """One practice screen: the study's items it shows, by key, in the screen's order
    (triplet: the one on top, left, right; odd one out: the three; rank: the reference,
    then the items), and the answer expected: the keys a right answer picks (triplet:
    the candidate closer to the one on top; odd one out: the odd one; rank: the picks,
    most alike first)."""

    model_config = ConfigDict(extra="forbid")

    items: list[ItemKey] = Field(min_length=3, max_length=13)
    answer: list[ItemKey] = Field(min_length=1, max_length=12)


class Practice(BaseModel):
    """Screens with a known answer before the task, each followed by feedback; their
    answers are stored apart and never counted. With `pass_at_least`, a participant who
    answers fewer right ends the session on the screened-out path."""

    model_config = ConfigDict(extra="forbid")

    trials: list[PracticeTrial] = Field(min_length=1, max_length=MOST_PRACTICE_TRIALS)
    pass_at_least: int | None = Field(
        default=None,
        ge=1,
        description="Practice screens to answer right to go on to the task; null: no gate",
    )

    @model_validator(mode="after")
    def _a_mark_that_can_be_reached(self) -> Practice:
        if self.pass_at_least is not None and self.pass_at_least > len(self.trials):
            raise ValueError(
                f"pass_at_least is {self.pass_at_least}, but the practice has "
                f"{len(self.trials)} screens"
            )
        return self


ArmName = Annotated[
    str,
    StringConstraints(strip_whitespace=True, pattern=r"^[A-Za-z0-9][A-Za-z0-9 _.-]{0,63}$"),
]
MAX_ARMS = 20
MAX_ARM_ITEMS = 100_000


class Arm(BaseModel):
    """One condition of the study: its participants see the study with the settings it
    sets (the rest are the study's), and its target caps how many it takes."""

    model_config = ConfigDict(extra="forbid")

    name: ArmName = Field(description="Recorded on the rater, every answer and the exports")
    target: int | None = Field(
        default=None,
        ge=1,
        le=INT4_MAX,
        description="Completions wanted: once completed plus live sessions reach it, the arm "
        "takes nobody new (a session quiet for longer than a lease stops counting); null: "
        "no cap, the arms balanced by count",
    )
    open: bool = Field(default=True, description="false: the arm takes nobody new (a stop)")
    judgement: StudyFormatName | None = Field(default=None, description="Its own format")
    shown: int | None = Field(default=None, ge=3, le=12, description="Its rank screens' size")
    picks: int | None = Field(default=None, ge=1, le=11, description="Its rank screens' picks")
    question: str | None = Field(default=None, min_length=1, max_length=300)
    instructions: str | None = Field(default=None, max_length=20_000)
    random_share: float | None = Field(
        default=None,
        ge=0,
        le=1,
        description="Its own share of random questions; 1: it asks only at random (the "
        "baseline the Models page measures an active arm's gain against); null: the study's",
    )
    items: list[Annotated[str, StringConstraints(min_length=1, max_length=200)]] | None = Field(
        default=None,
        max_length=MAX_ARM_ITEMS,
        description="The keys of the items its participants are asked about (random "
        "questions and checks drawn from them; a build's queries, over every item, go to "
        "the arms without items of their own); null: all the study's items",
    )
    practice: Practice | None = Field(
        default=None,
        description="Its own practice screens (of its format); null: the study's, unless "
        "the arm asks another format (then none)",
    )
