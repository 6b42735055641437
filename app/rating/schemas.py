from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from app.core.fields import RequestModel
from app.models import Choice, LinkState
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


class ComparisonOut(BaseModel):
    query_id: int = Field(
        description="Send it back with the answer: it makes the answer idempotent"
    )
    anchor: ShownItem
    left: ShownItem
    right: ShownItem


class RaterStateOut(BaseModel):
    comparison: ComparisonOut | None = Field(
        description="The next comparison; null once the session is over"
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


class JoinOut(RaterStateOut):
    rater_token: str = Field(description="Send as X-Rater-Token on the next calls")


class AnswerIn(RequestModel):
    model_config = ConfigDict(extra="forbid")

    query_id: int = Field(ge=1, le=MAX_QUERY_ID)
    choice: Choice = Field(strict=False)
    response_time_ms: int | None = Field(default=None, ge=0, le=MAX_RESPONSE_MS)
