from __future__ import annotations

import secrets
from datetime import datetime
from enum import StrEnum

from sqlalchemy import BigInteger, Float, ForeignKey, Index, String, Text, false, text, true
from sqlalchemy.orm import Mapped, mapped_column

from app.core.db import Base
from app.formats import REPEAT_SHARE, TRIPLET, JudgementFormat
from app.models._types import FormatName, JsonValue, Timestamp, string_enum, utcnow


class LabelType(StrEnum):
    """What an item's label is: a class name or a number (regression target)."""

    classification = "class"
    regression = "number"


class LinkState(StrEnum):
    """Whether the study's public link takes raters: closed (a new study, until the
    researcher opens it; or ended), open, or paused for a while. Raters of a link that
    is not open see a page saying so, and no completion code."""

    closed = "closed"
    open = "open"
    paused = "paused"


def new_public_slug() -> str:
    """The unguessable part of a project's rating link."""
    return secrets.token_urlsafe(12)


def new_completion_code() -> str:
    return secrets.token_hex(4).upper()


class Project(Base):
    """A set of items and the answers about them.

    The rating columns are what the researcher decides about the public rating link:
    the instructions raters read, how many answers make a finished session (then the
    completion code, and a redirect back to the recruiting platform if set), whether
    "can't tell" is offered, the shares of random and attention-check queries mixed in,
    how long a served query stays reserved, and the quality thresholds below which a
    rater's answers stop counting.
    """

    __tablename__ = "projects"
    # Not columns: what a copy of the settings made for one arm shows (app/raters/arms.py).
    __allow_unmapped__ = True
    arm_shown: str | None = None
    arm_items: tuple[str, ...] | None = None
    __table_args__ = (
        Index(
            "uq_projects_owner_id_import_key",
            "owner_id",
            "import_key",
            unique=True,
            postgresql_where=text("import_key IS NOT NULL"),
            sqlite_where=text("import_key IS NOT NULL"),
        ),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    owner_id: Mapped[int] = mapped_column(ForeignKey("researchers.id"), index=True)
    name: Mapped[str] = mapped_column(String(200))
    description: Mapped[str] = mapped_column(Text, default="")
    label_type: Mapped[LabelType] = mapped_column(
        string_enum(LabelType, "label_type"), default=LabelType.classification
    )
    # Set by the first upload that carries feature vectors; later uploads must match it.
    feature_dim: Mapped[int | None] = mapped_column()
    created_at: Mapped[datetime] = mapped_column(Timestamp, default=utcnow)

    public_slug: Mapped[str] = mapped_column(String(32), unique=True, default=new_public_slug)
    link_state: Mapped[LinkState] = mapped_column(
        string_enum(LinkState, "link_state"), default=LinkState.closed, server_default="closed"
    )
    link_opened_at: Mapped[datetime | None] = mapped_column(Timestamp)  # first opened
    instructions: Mapped[str] = mapped_column(Text, default="")
    question: Mapped[str] = mapped_column(
        String(300), default="Which of the two is closer to the one on top?"
    )
    allow_cant_tell: Mapped[bool] = mapped_column(default=False)
    # The format its screens ask (app/formats: one a study may choose).
    judgement: Mapped[JudgementFormat] = mapped_column(
        FormatName(), default=TRIPLET, server_default=TRIPLET.name
    )
    # A rank screen: `shown` items beside the reference, of which the rater picks `picks`.
    shown: Mapped[int] = mapped_column(default=8, server_default="8")
    picks: Mapped[int] = mapped_column(default=2, server_default="2")
    answers_per_rater: Mapped[int] = mapped_column(default=40)
    # The places a recruiting platform sold: no one new joins once this many sessions
    # ended with a code or are still live (app/raters/places.py); null: no limit.
    quota: Mapped[int | None] = mapped_column()
    # The participant's path around the task (app/rating/path.py): the consent to give
    # first ({"text", "statements"}; null: none asked), its version (rises with each
    # change of it: a consent records the version it agreed to), where a participant who
    # declines is sent, and the debrief shown with the code at the end.
    consent: Mapped[dict | None] = mapped_column(JsonValue)
    consent_version: Mapped[int] = mapped_column(default=0, server_default="0")
    no_consent_code: Mapped[str | None] = mapped_column(String(64))
    no_consent_url: Mapped[str | None] = mapped_column(String(500))
    debrief: Mapped[str] = mapped_column(Text, default="", server_default="")
    # The languages its rater pages speak (app/core/i18n.py; the rater's browser chooses
    # among them, else the first), and its own wording of any string they show, by
    # language and English source string ({"de": {"Start": "Los geht's"}}).
    languages: Mapped[list[str]] = mapped_column(
        JsonValue, default=lambda: ["en"], server_default='["en"]'
    )
    texts: Mapped[dict[str, dict[str, str]]] = mapped_column(
        JsonValue, default=dict, server_default="{}"
    )
    # The items' texts are (inline) Markdown, rendered and sanitised on the rater pages.
    text_markdown: Mapped[bool] = mapped_column(default=False, server_default=false())
    # A screen of sounds or videos is answered once each was played to its end.
    play_to_end: Mapped[bool] = mapped_column(default=True, server_default=true())
    # A session longer than this (from joining) ends with the timeout code and redirect.
    max_session_minutes: Mapped[int | None] = mapped_column()
    timeout_code: Mapped[str | None] = mapped_column(String(64))
    timeout_url: Mapped[str | None] = mapped_column(String(500))
    # The session's answers in blocks, with a break of at least break_seconds between.
    blocks: Mapped[int] = mapped_column(default=1, server_default="1")
    break_seconds: Mapped[int] = mapped_column(default=0, server_default="0")
    # A short form before or after the task ({"when", "questions"}; null: none).
    questionnaire: Mapped[dict | None] = mapped_column(JsonValue)
    # Practice screens before the task ({"trials": [{"items", "answer"}], "pass_at_least"};
    # null: none): answered with feedback, stored apart (PracticeAnswer), never counted.
    practice: Mapped[dict | None] = mapped_column(JsonValue)
    # The study's conditions (app/raters/arms.py): each participant is allocated one,
    # which may ask its own format, question, instructions and items. Null: one arm.
    arms: Mapped[list | None] = mapped_column(JsonValue)
    # What raters see is locked once it collects an answer (design_locked_at): a change
    # after that makes version design_version + 1 (app/projects/versions.py).
    design_version: Mapped[int] = mapped_column(default=1, server_default="1")
    design_locked_at: Mapped[datetime | None] = mapped_column(Timestamp)
    completion_code: Mapped[str] = mapped_column(String(64), default=new_completion_code)
    completion_url: Mapped[str | None] = mapped_column(String(500))
    # A rater who has seen every query there is ends there: this code and redirect if
    # set, else the completion code and URL (a paid participant never hits a dead end).
    no_more_work_code: Mapped[str | None] = mapped_column(String(64))
    no_more_work_url: Mapped[str | None] = mapped_column(String(500))
    random_share: Mapped[float] = mapped_column(Float, default=0.1)
    # Of a screen study's random screens, the share drawn from its pool of repeated ones
    # (app/scheduling/screens.py): the noise ceiling's answers. 0 for studies made before
    # it (migration 0046).
    repeat_share: Mapped[float] = mapped_column(Float, default=REPEAT_SHARE)
    attention_rate: Mapped[float] = mapped_column(Float, default=0.05)
    lease_seconds: Mapped[int] = mapped_column(default=120)
    min_attention_accuracy: Mapped[float | None] = mapped_column(Float)
    # A rater who falls below min_attention_accuracy: with this code set, their session
    # ends there with it (and this redirect, if set); else they carry on, excluded.
    screened_out_code: Mapped[str | None] = mapped_column(String(64))
    screened_out_url: Mapped[str | None] = mapped_column(String(500))
    min_majority_agreement: Mapped[float | None] = mapped_column(Float)
    # Speeders: a rater whose median time per answer is below this is excluded.
    min_median_response_ms: Mapped[int | None] = mapped_column()
    quality_min_answers: Mapped[int] = mapped_column(default=5)
    # The newest answer the raters' agreement with the majority includes, and when it was
    # computed: the workers recompute it once answers come after it.
    agreement_cursor: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    agreement_updated_at: Mapped[datetime | None] = mapped_column(Timestamp)
    # How the questions the samplers propose are split by purpose (relative shares;
    # all null: chosen from the project's models and items, see app/adaptive/proposals.py).
    labelling_share: Mapped[float | None] = mapped_column(Float)
    embedding_share: Mapped[float | None] = mapped_column(Float)
    placement_share: Mapped[float | None] = mapped_column(Float)
    # Rises with every change of the rating settings, so processes that keep a copy of
    # them know when it is stale.
    settings_version: Mapped[int] = mapped_column(default=0)
    # The settings' version the open proposals were made under (null: none made yet).
    proposals_settings_version: Mapped[int | None] = mapped_column()
    # A project being made from an archive: hidden from everyone until the import ends;
    # one whose importer died (its claim let go) is removed whole. `import_key` is the
    # import request's Idempotency-Key: a retry finds the project it made, if it sends
    # the same archive (`import_digest`, its SHA-256).
    importing: Mapped[bool] = mapped_column(default=False, server_default=false())
    import_key: Mapped[str | None] = mapped_column(String(100))
    import_digest: Mapped[str | None] = mapped_column(String(64))


class DesignVersion(Base):
    """One numbered version of what a study's raters see: its path, texts, formats, arms
    and items (`design`), and what changed from the version before (`changes`). A
    version is locked by its first answer; every answer records the version it came
    from."""

    __tablename__ = "design_versions"
    __table_args__ = (
        Index("uq_design_versions_project_id_number", "project_id", "number", unique=True),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    project_id: Mapped[int] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"))
    number: Mapped[int] = mapped_column()
    design: Mapped[dict] = mapped_column(JsonValue)
    changes: Mapped[list] = mapped_column(JsonValue, default=list)
    created_at: Mapped[datetime] = mapped_column(Timestamp, default=utcnow)
    # When its first answer came (stamped once a later version replaces it).
    locked_at: Mapped[datetime | None] = mapped_column(Timestamp)
