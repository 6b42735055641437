"""project.json as one schema: what an archive may say, held to the API's own limits.

An archive is a request like any other, only bigger: its project goes through the
project schema, its rating settings through the rating schema, its builds' parameters
through the build schema and its models through the model schema, so an archive can
store nothing the API would refuse. Its JSON is read with the API's strict parser, at
most `max_json_bytes` of it, after the size in the ZIP's directory was checked.
"""

from __future__ import annotations

import base64
import binascii
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import AfterValidator, ConfigDict, Field, ValidationError, model_validator

from app.builds.schemas import BuildCreate
from app.core.errors import InvalidUpload, Problem
from app.core.fields import INT4_MAX, INT8_MAX, RequestModel, RowId
from app.core.routes import parse_strict_json
from app.models import BuildStatus, Item, Rater
from app.projects.schemas import ProjectCreate, RatingSettings
from app.training.schemas import ModelCreate
from app.uploads.files import SafeZip

FORMAT = "closer-project"
# 1 carried build states and SMERF matrices inside project.json (base64); 2 carries them
# as entries of their own (builds/<ref>.state, models/<ref>.matrix), so that the JSON
# stays small whatever the size of the builds.
FORMAT_VERSION = 2
READABLE_VERSIONS = (1, 2)
DESCRIPTION = "project.json"
# The range a stored time may take: its conversion to UTC cannot overflow inside it.
EARLIEST, LATEST = 1970, 2999


def _bounded_time(value: datetime) -> datetime:
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    try:
        value = value.astimezone(UTC)
    except OverflowError:
        raise ValueError("a time out of range") from None
    if not EARLIEST <= value.year <= LATEST:
        raise ValueError(f"a time between the years {EARLIEST} and {LATEST}")
    return value


Time = Annotated[datetime, Field(strict=False), AfterValidator(_bounded_time)]
Count = Annotated[int, Field(ge=0, le=INT4_MAX)]


def _blob(value: str | None) -> bytes | None:
    if value is None:
        return None
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("not base64") from None


if TYPE_CHECKING:
    Base64 = bytes | None  # what the validator makes of the base64 text
else:
    Base64 = Annotated[str | None, AfterValidator(_blob)]


def _longest(column: Any) -> int:
    """The length of a text column, which its field may not exceed."""
    return column.type.length


class ArchivedProject(ProjectCreate):
    created_at: Time | None = None
    # The consent's version, which the raters' consents name (absent: the first).
    consent_version: Count | None = None
    # When the current design version took its first answer (null: still open to edits).
    design_locked_at: Time | None = None


class ArchivedRater(RequestModel):
    model_config = ConfigDict(extra="forbid")

    external_id: str = Field(min_length=1, max_length=_longest(Rater.__table__.c.external_id))
    platform: str | None = Field(default=None, max_length=_longest(Rater.__table__.c.platform))
    platform_ids: dict[Annotated[str, Field(max_length=40)], Annotated[str, Field(max_length=200)]]
    answers: Count = 0
    attention_passed: Count = 0
    attention_failed: Count = 0
    majority_compared: Count = 0
    majority_agreement: float | None = Field(default=None, ge=0, le=1, strict=False)
    excluded: bool = False
    exclusion_reason: str = Field(default="", max_length=2000)
    exclusion_override: bool | None = None
    created_at: Time | None = None
    completed_at: Time | None = None
    last_seen_at: Time | None = None
    out_of_work_at: Time | None = None
    screened_out_at: Time | None = None
    median_response_ms: float | None = Field(default=None, ge=0, strict=False)
    timed_answers: Count = 0
    consented_at: Time | None = None
    consent_version: Count | None = None
    consent_declined_at: Time | None = None
    questionnaire_answers: (
        dict[
            Annotated[str, Field(max_length=40)],
            Annotated[str, Field(max_length=2_000)]
            | int
            | float
            | Annotated[list[Annotated[str, Field(max_length=200)]], Field(max_length=20)]
            | None,
        ]
        | None
    ) = Field(default=None, max_length=30)
    questionnaire_at: Time | None = None
    timed_out_at: Time | None = None
    arm: str | None = Field(default=None, max_length=64)
    design_version: Count | None = None
    practice_answered: Count = 0
    practice_correct: Count = 0
    practice_failed_at: Time | None = None

    @model_validator(mode="after")
    def _few_platform_ids(self) -> ArchivedRater:
        if len(self.platform_ids) > 10:
            raise ValueError("platform_ids: at most 10")
        return self


class ArchivedBuildParams(BuildCreate):
    task: Literal["classification", "regression"]


class ArchivedBuild(RequestModel):
    model_config = ConfigDict(extra="forbid")

    ref: RowId
    status: BuildStatus = Field(strict=False)
    params: ArchivedBuildParams
    # Recomputed from the state on import; what the archive says is not stored.
    progress: dict[str, Any] = Field(default_factory=dict)
    message: str = Field(default="", max_length=2000)
    items: list[Annotated[str, Field(max_length=_longest(Item.__table__.c.key))]] = Field(
        min_length=2
    )
    answers_read: int = Field(ge=0, le=INT8_MAX)
    state: Base64 = Field(default=None, description="format 1 only")
    created_at: Time | None = None


class ArchivedModel(ModelCreate):
    ref: RowId | None = None
    build_ref: RowId | None = None
    inputs: Base64 = Field(default=None, description="format 1 only")


ItemKey = Annotated[str, Field(min_length=1, max_length=200)]


class ArchivedItem(RequestModel):
    """An item among a judgement's choices (other choices are words: a sorting screen's
    "left", "right" or "cant_tell")."""

    model_config = ConfigDict(extra="forbid")

    item: ItemKey


class ArchivedJudgement(RequestModel):
    """One entry of judgements.json: a screen as shown and answered, its items by key.
    `ref` is its id in the exporting project, which the answers' `judgement` column
    names (a screen's triplets)."""

    model_config = ConfigDict(extra="forbid")

    ref: int = Field(ge=1, le=INT8_MAX)
    format: str = Field(min_length=1, max_length=32)
    context: list[ItemKey] = Field(default_factory=list, max_length=2)
    shown: list[ItemKey] = Field(min_length=1, max_length=12)
    chosen: list[ArchivedItem | Annotated[str, Field(max_length=16)]] = Field(max_length=12)
    rater: str | None = Field(default=None, min_length=1, max_length=200)
    response_time_ms: int | None = Field(default=None, ge=0, le=INT4_MAX)
    created_at: Time
    # The study's arm and design version it was answered in (archives before them: none).
    arm: str | None = Field(default=None, max_length=64)
    design_version: Count | None = None


class ArchivedDesignVersion(RequestModel):
    """One design version of the study as it was recorded (GET …/versions)."""

    model_config = ConfigDict(extra="forbid")

    number: int = Field(ge=1, le=INT4_MAX)
    design: dict[str, Any]
    changes: list[str] = Field(default_factory=list, max_length=1_000)
    created_at: Time
    locked_at: Time | None = None


class ProjectArchive(RequestModel):
    model_config = ConfigDict(extra="forbid")

    format: Literal["closer-project"]
    format_version: Literal[1, 2]
    project: ArchivedProject
    rating: RatingSettings
    raters: list[ArchivedRater] = Field(default_factory=list)
    builds: list[ArchivedBuild] = Field(default_factory=list)
    models: list[ArchivedModel] = Field(default_factory=list)
    design_versions: list[ArchivedDesignVersion] = Field(default_factory=list, max_length=10_000)

    @model_validator(mode="after")
    def _references_resolve(self) -> ProjectArchive:
        numbers = [version.number for version in self.design_versions]
        if numbers != sorted(set(numbers)):
            raise ValueError("design_versions: the numbers must rise, each once")
        build_refs = [build.ref for build in self.builds]
        if len(set(build_refs)) != len(build_refs):
            raise ValueError("builds: two builds have the same ref")
        external_ids = [rater.external_id for rater in self.raters]
        if len(set(external_ids)) != len(external_ids):
            raise ValueError("raters: two raters have the same external_id")
        earlier_models: set[int] = set()
        for model in self.models:
            if model.build_ref is not None and model.build_ref not in build_refs:
                raise ValueError(f"model '{model.name}' names build {model.build_ref}: none")
            source = model.params.get("embedding_model_id")
            if source is not None and source not in earlier_models:
                raise ValueError(
                    f"model '{model.name}' names model {source!r} as its embedding: "
                    "no model before it has that ref"
                )
            if model.ref is not None:
                earlier_models.add(model.ref)
        return self


def _problem(message: str, where: str | None = None) -> Problem:
    return Problem(file=DESCRIPTION, message=message, column=where)


def _where(location: tuple) -> str:
    return ".".join(str(part) for part in location)


def read_description(archive: SafeZip, max_bytes: int) -> ProjectArchive:
    """project.json of `archive`, checked whole, or a 422 listing what is wrong where."""
    if DESCRIPTION not in archive.entries:
        raise InvalidUpload(
            [Problem(file=archive.name, message="no project.json: not a Closer project archive")]
        )
    size = archive.size(DESCRIPTION)
    if size > max_bytes:
        raise InvalidUpload(
            [_problem(f"{size:,} bytes, over the limit of {max_bytes:,} (max_json_bytes)")]
        )
    try:
        document = parse_strict_json(archive.read(DESCRIPTION))
    except (ValueError, UnicodeDecodeError) as error:  # JSONDecodeError is a ValueError
        raise InvalidUpload([_problem(f"not JSON this server reads: {error}")]) from None
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise InvalidUpload([_problem(f"not a Closer project archive (format is not '{FORMAT}')")])
    version = document.get("format_version")
    if version not in READABLE_VERSIONS:
        shown = repr(version)[:40]
        raise InvalidUpload(
            [_problem(f"format_version {shown}: this server reads {list(READABLE_VERSIONS)}")]
        )
    try:
        return ProjectArchive.model_validate(document)
    except ValidationError as error:
        raise InvalidUpload(
            [
                _problem(entry["msg"].removeprefix("Value error, "), _where(entry["loc"]))
                for entry in error.errors(include_url=False)[:50]
            ]
        ) from None


def as_model_request(entry: ArchivedModel, **overrides: Any) -> ModelCreate:
    """The model request an archived model stands for (the API's own schema)."""
    fields = entry.model_dump(exclude={"ref", "build_ref", "inputs"})
    return ModelCreate.model_validate({**fields, **overrides}, strict=False)
