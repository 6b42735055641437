from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, get_args

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    create_model,
)

from app.core import i18n
from app.core.fields import INT4_MAX, RequestModel
from app.formats import REPEAT_RATERS, REPEAT_SHARE, TRIPLET, asked_by_studies
from app.models import LabelType, LinkState
from app.projects.path_schemas import (
    MAX_ARMS,
    Arm,
    Consent,
    Practice,
    Questionnaire,
    StudyFormatName,
)


class ProjectCreate(RequestModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=200)
    description: str = Field(default="", max_length=10_000)
    label_type: LabelType = Field(
        default=LabelType.classification,
        strict=False,
        description="'class' when labels name classes, 'number' when they are numeric targets.",
    )


class ProjectUpdate(RequestModel):
    model_config = ConfigDict(extra="forbid")

    name: str | None = Field(default=None, min_length=1, max_length=200)
    description: str | None = Field(default=None, max_length=10_000)


class ProjectOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    name: str
    description: str
    label_type: LabelType
    feature_dim: int | None
    created_at: datetime


class ProjectDetail(ProjectOut):
    item_count: int
    triplet_count: int


def _shown(section: str, widget: str) -> dict[str, Any]:
    """Where the workspace's settings page shows a setting, and with what kind of field."""
    return {"x-section": section, "x-widget": widget}


READ = "What raters read"
SESSIONS = "Sessions and completion"
ASKED = "What is asked"
QUALITY = "Quality"


def _offered_formats(schema: dict[str, Any]) -> None:
    """The formats as the settings page offers them, each in a sentence (read when the
    schema is made, so a format registered since is offered)."""
    schema.update(_shown(ASKED, "choice"))
    schema["enum"] = [format.name for format in asked_by_studies()]
    schema["x-choices"] = {format.name: format.label for format in asked_by_studies()}


PATH = "The participant's path"
MOST_LANGUAGES = 20
LONGEST_OWN_TEXT = 2_000


def _known_languages(codes: list[str]) -> list[str]:
    """The study's languages, each one the rater pages speak, each once."""
    offered = i18n.languages()
    for code in codes:
        if code not in offered:
            raise ValueError(
                f"{code!r} is not a language the rater pages speak; they speak "
                f"{', '.join(offered)} (README: how to add one)"
            )
    if len(set(codes)) != len(codes):
        raise ValueError("each language once")
    return codes


def _own_texts(texts: dict[str, dict[str, str]]) -> dict[str, dict[str, str]]:
    for code, wording in texts.items():
        for source, own in wording.items():
            if not own.strip():
                raise ValueError(f"texts.{code}[{source[:60]!r}]: empty (leave it out instead)")
            if len(own) > LONGEST_OWN_TEXT:
                raise ValueError(
                    f"texts.{code}[{source[:60]!r}]: at most {LONGEST_OWN_TEXT:,} characters"
                )
    return texts


Languages = Annotated[list[str], AfterValidator(_known_languages)]
OwnTexts = Annotated[dict[str, dict[str, str]], AfterValidator(_own_texts)]


class RatingSettings(BaseModel):
    """How the project's public rating link behaves. The one list of the rating settings:
    the update schema, which of them may be null and the settings page's sections derive
    from it, and a test holds the projects table's columns to it."""

    model_config = ConfigDict(from_attributes=True, extra="forbid")

    question: str = Field(
        default="Which of the two is closer to the one on top?",
        min_length=1,
        max_length=300,
        title="Question",
        json_schema_extra=_shown(READ, "text"),
    )
    instructions: str = Field(
        default="",
        max_length=20_000,
        title="Instructions",
        description="Shown before rating",
        json_schema_extra=_shown(READ, "textarea"),
    )
    languages: Languages = Field(
        default_factory=lambda: [i18n.SOURCE_LANGUAGE],
        min_length=1,
        max_length=MOST_LANGUAGES,
        title="Languages of the rater pages",
        description="The languages the rater pages speak (English, Deutsch, español, "
        "français, 日本語, العربية: GET …/rater-texts lists them): each rater's "
        "browser chooses among them, and one who prefers none of them reads the first. "
        "Your own question and instructions are shown as you wrote them",
        json_schema_extra=_shown(READ, "languages"),
    )
    texts: OwnTexts = Field(
        default_factory=dict,
        title="Your own wording of the rater pages",
        description="Any string the rater pages show, worded your way, by language and the "
        'English string (GET …/rater-texts lists them): {"de": {"Start": '
        '"Los geht\'s"}}; a string left out reads as translated',
        json_schema_extra=_shown(READ, "texts"),
    )
    text_markdown: bool = Field(
        default=False,
        title="Items' texts are Markdown (*emphasis*, **strong**, `code`)",
        description="Raters see each item's text with its inline Markdown marks (*emphasis*, "
        "**strong**, `code`, ~~struck~~, a new line for each line); no HTML, link or image. "
        "Off: the text is shown as it is",
        json_schema_extra=_shown(READ, "checkbox"),
    )
    play_to_end: bool = Field(
        default=True,
        title="Sounds and videos: answer once each was played to its end",
        description="On a screen of sounds or videos, the answer is taken once every item "
        "was played to its end at least once (each play is counted and stored with the answer)",
        json_schema_extra=_shown(READ, "checkbox"),
    )
    allow_cant_tell: bool = Field(
        default=False,
        title="Offer “Can’t tell”",
        description='Offer a "can\'t tell" answer',
        json_schema_extra=_shown(READ, "checkbox"),
    )
    answers_per_rater: int = Field(
        default=40,
        ge=0,
        le=100_000,
        title="Answers per rater (0: no limit)",
        description="Answers that complete a session (0: no limit)",
        json_schema_extra=_shown(SESSIONS, "integer"),
    )
    quota: int | None = Field(
        default=None,
        ge=1,
        le=INT4_MAX,
        title="Places (nobody new joins once they are taken; empty: no limit)",
        description="The places the recruiting platform sold: once this many sessions ended "
        "with a completion or no-more-work code, or are still answering (seen within a "
        "lease), the link takes nobody new and says the study is full; a session gone "
        "quiet for longer than a lease gives its place back; null: no limit",
        json_schema_extra=_shown(SESSIONS, "integer"),
    )
    consent: Consent | None = Field(
        default=None,
        title="Consent (empty: none asked)",
        description="Asked first, before anything the participant answers is recorded: the "
        "text (Markdown) and the statements each to be ticked; a participant who declines "
        "ends there with the no-consent code, never the completion code; null: none asked",
        json_schema_extra=_shown(PATH, "consent"),
    )
    questionnaire: Questionnaire | None = Field(
        default=None,
        title="Questionnaire (empty: none)",
        description="A short form before or after the task (age, handedness, vision, free "
        "text): text, number, one choice, several choices or a Likert scale, each required "
        "or optional; answers are stored per participant and exported; null: none",
        json_schema_extra=_shown(PATH, "questionnaire"),
    )
    practice: Practice | None = Field(
        default=None,
        title="Practice screens",
        description="Screens of the study's format with a known answer, shown before the "
        'task with feedback after each ("correct" or the answer expected); their answers '
        "are kept apart and never counted. pass_at_least: a participant with fewer right "
        "ends on the screened-out path",
        json_schema_extra=_shown(PATH, "practice"),
    )
    blocks: int = Field(
        default=1,
        ge=1,
        le=100,
        title="Blocks a session is split into (1: none)",
        description="The session's answers (answers_per_rater) in this many blocks, with a "
        "break between blocks and progress shown as block and screen",
        json_schema_extra=_shown(PATH, "integer"),
    )
    break_seconds: int = Field(
        default=0,
        ge=0,
        le=3_600,
        title="Shortest break between blocks (seconds)",
        description="How long a break lasts at least before the next block can start",
        json_schema_extra=_shown(PATH, "integer"),
    )
    max_session_minutes: int | None = Field(
        default=None,
        ge=1,
        le=1_440,
        title="Longest session (minutes; empty: no limit)",
        description="A session that runs longer (from joining) ends there with the timeout "
        "code and redirect: nothing more is asked, and nothing sent after it is recorded; "
        "null: no limit",
        json_schema_extra=_shown(PATH, "integer"),
    )
    timeout_code: str | None = Field(
        default=None,
        min_length=1,
        max_length=64,
        title="Code when the session runs out of time",
        description="Shown to a participant whose session ran longer than its limit; null: "
        "no code, only the redirect if set",
        json_schema_extra=_shown(PATH, "text"),
    )
    timeout_url: str | None = Field(
        default=None,
        max_length=500,
        pattern=r"^https?://",
        title="Redirect when the session runs out of time",
        description="Where such a participant is sent; null: no redirect",
        json_schema_extra=_shown(PATH, "url"),
    )
    no_consent_code: str | None = Field(
        default=None,
        min_length=1,
        max_length=64,
        title="Code when consent is declined",
        description="Shown to a participant who declines (the recruiting platform's code "
        "for a returned study); null: no code, only the redirect if set",
        json_schema_extra=_shown(PATH, "text"),
    )
    no_consent_url: str | None = Field(
        default=None,
        max_length=500,
        pattern=r"^https?://",
        title="Redirect when consent is declined",
        description="Where a participant who declines is sent; null: no redirect",
        json_schema_extra=_shown(PATH, "url"),
    )
    debrief: str = Field(
        default="",
        max_length=20_000,
        title="Debrief (shown with the completion code)",
        description="The lab's text at the end (Markdown), shown with the code and before "
        "the redirect: what the study was about, whom to contact",
        json_schema_extra=_shown(PATH, "textarea"),
    )
    arms: list[Arm] | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_ARMS,
        title="Arms (conditions; empty: one)",
        description="The study's conditions: each newcomer joins the open arm with the fewest "
        "places taken for its target (completed plus live sessions) and sees the study with "
        "the arm's own format, question, instructions and items where it sets them; the arm "
        "is recorded on the rater, every answer and the exports; null: one arm",
        json_schema_extra=_shown(PATH, "arms"),
    )
    completion_code: str = Field(
        min_length=1,
        max_length=64,
        title="Completion code",
        description="Shown when done",
        json_schema_extra=_shown(SESSIONS, "text"),
    )
    completion_url: str | None = Field(
        default=None,
        max_length=500,
        pattern=r"^https?://",
        title="Redirect when done (recruiting platform URL)",
        description="Where a finished rater is sent back to (the recruiting platform)",
        json_schema_extra=_shown(SESSIONS, "url"),
    )
    no_more_work_code: str | None = Field(
        default=None,
        min_length=1,
        max_length=64,
        title="Code when nothing is left to ask",
        description="Shown to a rater who ends early because nothing is left to ask them "
        "(they have seen every query the study has); null: the completion code",
        json_schema_extra=_shown(SESSIONS, "text"),
    )
    no_more_work_url: str | None = Field(
        default=None,
        max_length=500,
        pattern=r"^https?://",
        title="Redirect when nothing is left to ask",
        description="Where such a rater is sent; null: completion_url",
        json_schema_extra=_shown(SESSIONS, "url"),
    )
    judgement: StudyFormatName = Field(
        default=TRIPLET.name,
        title="What each screen asks",
        description="triplet: which of two items is closer to a third (one triplet a "
        "screen); odd_one_out: which of three is least like the other two (two triplets a "
        "screen, one tap); rank: pick the `picks` items most like a reference among "
        "`shown`, most alike first (k(n-k) + k(k-1)/2 triplets a screen: 13 for 2 of 8). "
        "The samplers' questions are asked on screens too; a CompRF build's own queries "
        "stay triplets",
        json_schema_extra=_offered_formats,
    )
    shown: int = Field(
        default=8,
        ge=3,
        le=12,
        title="Rank screens: items shown beside the reference",
        description="How many items a rank screen shows beside its reference (3 to 12)",
        json_schema_extra=_shown(ASKED, "integer"),
    )
    picks: int = Field(
        default=2,
        ge=1,
        le=11,
        title="Rank screens: items to pick",
        description="How many of them the rater picks, most alike first (fewer than shown)",
        json_schema_extra=_shown(ASKED, "integer"),
    )
    random_share: float = Field(
        default=0.1,
        ge=0,
        le=1,
        title="Share of random questions",
        description="Share of random questions (triplets, or screens in the study's format) "
        "for the passive learners",
        json_schema_extra=_shown(ASKED, "share"),
    )
    repeat_share: float = Field(
        default=REPEAT_SHARE,
        ge=0,
        le=0.5,
        title="Share of repeated questions (for the noise ceiling)",
        description="Of the random questions (triplets, or odd-one-out and rank screens), "
        f"the share that repeat one other raters had (each repeated one until {REPEAT_RATERS} "
        "raters answered it, then the next), so that the answers tell how well people "
        "agree: the noise ceiling no model can beat (GET …/ceiling)",
        json_schema_extra=_shown(ASKED, "share"),
    )
    attention_rate: float = Field(
        default=0.05,
        ge=0,
        le=1,
        title="Share of attention checks",
        description="Share of attention checks (known answers)",
        json_schema_extra=_shown(ASKED, "share"),
    )
    lease_seconds: int = Field(
        default=120,
        ge=5,
        le=86_400,
        title="Seconds a served query stays reserved",
        description="How long a served query stays reserved",
        json_schema_extra=_shown(ASKED, "integer"),
    )
    labelling_share: float | None = Field(
        default=None,
        ge=0,
        le=1,
        title="Proposed questions: share for labelling (all empty: automatic)",
        description="Of the questions the samplers propose (after CompRF's needs), the share "
        "that decides wanted labels; all three shares null: chosen from the project's models "
        "and items",
        json_schema_extra=_shown(ASKED, "share"),
    )
    embedding_share: float | None = Field(
        default=None,
        ge=0,
        le=1,
        title="Proposed questions: share for the embedding",
        description="Of the samplers' questions, the share asked where the embedding is least sure",
        json_schema_extra=_shown(ASKED, "share"),
    )
    placement_share: float | None = Field(
        default=None,
        ge=0,
        le=1,
        title="Proposed questions: share for placing new items",
        description="Of the samplers' questions, the share that places items new to the embedding",
        json_schema_extra=_shown(ASKED, "share"),
    )
    min_attention_accuracy: float | None = Field(
        default=None,
        ge=0,
        le=1,
        title="Exclude below this attention-check accuracy",
        description="Exclude raters passing fewer checks than this",
        json_schema_extra=_shown(QUALITY, "share"),
    )
    screened_out_code: str | None = Field(
        default=None,
        min_length=1,
        max_length=64,
        title="Code when attention checks fail (empty: they carry on)",
        description="Shown to a rater who falls below the attention-check accuracy: their "
        "session ends there with this code (e.g. the recruiting platform's code for a "
        "failed attention check); null: they carry on, their answers excluded, and get "
        "the completion code",
        json_schema_extra=_shown(QUALITY, "text"),
    )
    screened_out_url: str | None = Field(
        default=None,
        max_length=500,
        pattern=r"^https?://",
        title="Redirect when attention checks fail",
        description="Where a rater whose session ended on failed attention checks is sent; "
        "null: no redirect",
        json_schema_extra=_shown(QUALITY, "url"),
    )
    min_majority_agreement: float | None = Field(
        default=None,
        ge=0,
        le=1,
        title="Exclude below this agreement with the majority",
        description="Exclude raters agreeing less with the majority",
        json_schema_extra=_shown(QUALITY, "share"),
    )
    min_median_response_ms: int | None = Field(
        default=None,
        ge=1,
        le=600_000,
        title="Exclude below this median time per answer (milliseconds)",
        description="Exclude speeders: raters whose median time per answer is below this "
        "(measured with the agreement, about once a minute; bots answer in 0-100 ms)",
        json_schema_extra=_shown(QUALITY, "integer"),
    )
    quality_min_answers: int = Field(
        default=5,
        ge=1,
        le=INT4_MAX,
        title="Checks, compared or timed answers before a threshold applies",
        description="Attention checks (or answers compared with the majority, or timed "
        "answers) a rater gives before that threshold applies to them",
        json_schema_extra=_shown(QUALITY, "integer"),
    )


# Settings a researcher may set to null ("not set"); the others always hold a value.
NULLABLE_RATING_SETTINGS = frozenset(
    name
    for name, info in RatingSettings.model_fields.items()
    if type(None) in get_args(info.annotation)
)

# Settings the raters' exclusions follow from: a change has the workers measure again.
QUALITY_SETTINGS = frozenset(
    name
    for name, info in RatingSettings.model_fields.items()
    if isinstance(info.json_schema_extra, dict) and info.json_schema_extra["x-section"] == QUALITY
)

# Where a rater is sent when their session ends: changing one needs the whole account
# (app/auth/access.py, Action.redirect_raters).
RATER_DESTINATIONS = frozenset(
    {"completion_url", "no_more_work_url", "screened_out_url", "no_consent_url", "timeout_url"}
)


def _any_subset(model: type[BaseModel]) -> dict:
    """`model`'s fields, each optional (absent: unchanged) with the same checks."""
    annotations: dict[str, Any] = {
        name: info.annotation for name, info in model.model_fields.items()
    }
    return {
        name: (
            Annotated[annotations[name] | None, *info.metadata]
            if info.metadata
            else annotations[name] | None,
            Field(default=None, title=info.title, description=info.description),
        )
        for name, info in model.model_fields.items()
    }


class _StrictUpdate(RequestModel):
    model_config = ConfigDict(strict=True, extra="forbid")


RatingSettingsUpdate = create_model(
    "RatingSettingsUpdate",
    __base__=_StrictUpdate,
    __doc__="Any subset of the rating settings (null clears a setting that may be unset).",
    **_any_subset(RatingSettings),
)


def rating_setting_sections() -> list[tuple[str, list[tuple[str, str, str]]]]:
    """The settings page's sections in order: each a title and its (name, label, kind of
    field) rows."""
    sections: dict[str, list[tuple[str, str, str]]] = {}
    for name, info in RatingSettings.model_fields.items():
        shown = setting_display(name)
        sections.setdefault(shown["x-section"], []).append(
            (name, info.title or name, shown["x-widget"])
        )
    return list(sections.items())


def setting_display(name: str) -> dict[str, Any]:
    """How the settings page shows a rating setting: its section, kind of field and, for a
    choice, the words for each value."""
    shown = RatingSettings.model_fields[name].json_schema_extra
    if callable(shown):  # made when read (the judgement formats)
        made: dict[str, Any] = {}
        shown(made)
        return made
    assert isinstance(shown, dict)  # every setting declares one (_shown)
    return shown


class RatingOut(RatingSettings):
    public_slug: str
    public_url: str = Field(description="The link to share with raters (add ?PROLIFIC_PID=… etc.)")
    link_state: LinkState = Field(
        description="closed (a new study, until opened; or ended), open, or paused: only an "
        "open link takes raters and asks them anything (PUT …/link changes it)"
    )
    link_opened_at: datetime | None = Field(description="When the link first opened")


class LanguageOut(BaseModel):
    code: str = Field(description='The language\'s code, as "languages" names it')
    name: str = Field(description="Its name in its own words")
    direction: str = Field(description='"rtl" for a right-to-left script, else "ltr"')
    asked: bool = Field(description="Whether this study's pages speak it")


class RaterTextOut(BaseModel):
    source: str = Field(description="The English string, as `texts` names it")
    plural: str | None = Field(description="Its plural (a count above one), as `texts` names it")
    translations: dict[str, str] = Field(
        description="By language: the catalog's translation (of the plural, for a count of 5)"
    )
    own: dict[str, str] = Field(description="By language: the study's own wording, where set")


class RaterTextsOut(BaseModel):
    languages: list[LanguageOut]
    texts: list[RaterTextOut]


class LinkChange(RequestModel):
    model_config = ConfigDict(extra="forbid")

    state: LinkState = Field(
        strict=False,
        description="open (needs at least three items), paused (for a while) or closed",
    )
