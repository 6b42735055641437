"""Projects belong to one researcher; admins see all. Others' projects do not exist (404)."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime, timedelta
from statistics import median

from pydantic import ValidationError
from sqlalchemy import delete, func, select, update
from sqlalchemy.orm import Session

from app.core import i18n
from app.core.db import on_commit
from app.core.errors import Conflict, Forbidden, NotFound, ServiceError
from app.designs import versions
from app.formats import JudgementFormat, ScreenShape, UnknownFormat, study_format
from app.items.images import ImageStore
from app.members import service as members
from app.models import (
    Item,
    Judgement,
    LabelType,
    LinkState,
    Project,
    Rater,
    Researcher,
    Triplet,
    TripletSource,
)
from app.models._types import utcnow
from app.projects import arm_settings, practice_settings
from app.projects.schemas import (
    NULLABLE_RATING_SETTINGS,
    QUALITY_SETTINGS,
    RATER_DESTINATIONS,
    Arm,
    Consent,
    LanguageOut,
    Practice,
    Questionnaire,
    RaterTextOut,
    RaterTextsOut,
    RatingSettingsUpdate,
)
from app.triplets.service import count_triplets
from app.triplets.tally import answers_per_hour

# The overview's median response time is over the newest answers only: it describes
# the study as it runs now, and reads a bounded number of rows.
RECENT_ANSWERS = 1000
ANSWER_RATE_HOURS = 7 * 24


def create_project(
    *,
    session: Session,
    owner: Researcher,
    name: str,
    description: str,
    label_type: LabelType,
    importing: bool = False,
    import_key: str | None = None,
    import_digest: str | None = None,
) -> Project:
    """A new project; `importing`: one made from an archive, hidden until it is done."""
    project = Project(
        owner_id=owner.id,
        name=name,
        description=description,
        label_type=label_type,
        importing=importing,
        import_key=import_key,
        import_digest=import_digest,
    )
    session.add(project)
    session.flush()
    return project


def list_projects(
    *, session: Session, researcher: Researcher, only: Collection[int] | None = None
) -> list[Project]:
    """The researcher's projects, their own and those shared with them (an admin's:
    all), or those of them in `only`."""
    query = select(Project).where(Project.importing.is_(False)).order_by(Project.id)
    if not researcher.is_admin:
        shared = members.shared_project_ids(session=session, researcher=researcher)
        query = query.where((Project.owner_id == researcher.id) | Project.id.in_(shared))
    if only is not None:
        query = query.where(Project.id.in_(only))
    return list(session.scalars(query))


def get_project(
    *, session: Session, researcher: Researcher, project_id: int, to_delete: bool = False
) -> Project:
    """The researcher's project (404 for another's or none). A request that writes holds
    a key-share lock on its row (on SQLite the database's write lock), and one that
    deletes it an update lock: a deletion waits for the writes under way, and a
    write that comes during a deletion waits for it and finds no project."""
    lock: bool | dict | None = None
    if to_delete:
        lock = True
    elif session.info.get("writes"):
        lock = {"key_share": True}
    if lock is not None and session.get_bind().dialect.name == "sqlite":
        # SQLite locks the whole database, for writing only: take it before reading, as
        # PostgreSQL's row lock below does.
        session.execute(
            update(Project)
            .where(Project.id == project_id)
            .values(settings_version=Project.settings_version)
            .execution_options(synchronize_session=False)
        )
    project = session.get(Project, project_id, with_for_update=lock)
    if (
        project is None
        or project.importing
        or not (
            researcher.is_admin
            or project.owner_id == researcher.id
            or members.is_member(session=session, project_id=project_id, researcher=researcher)
        )
    ):
        raise NotFound(f"no project {project_id}")
    return project


def count_items(*, session: Session, project: Project) -> int:
    return session.scalar(select(func.count()).where(Item.project_id == project.id)) or 0


def project_counts(*, session: Session, project: Project) -> dict[str, int]:
    return {
        "item_count": count_items(session=session, project=project),
        "triplet_count": count_triplets(session=session, project=project),
    }


def rename(*, session: Session, project: Project, changes: dict) -> Project:
    """A new name or description (what raters never see: the study's question and
    instructions are rating settings)."""
    if "name" in changes and changes["name"] is None:
        raise ServiceError("name: a project keeps a name; leave it out to keep this one")
    for field in ("name", "description"):
        if changes.get(field) is not None:
            setattr(project, field, changes[field])
    session.flush()
    return project


def delete_project(*, session: Session, store: ImageStore, project: Project) -> None:
    """Remove the project with its items, judgements, triplets and images.

    Judgements and triplets carry no foreign keys (see app/models/triplet.py), so they go
    explicitly; the rest cascades. Images go only once the deletion is committed.
    """
    project_id = project.id
    session.execute(delete(Triplet).where(Triplet.project_id == project_id))
    session.execute(delete(Judgement).where(Judgement.project_id == project_id))
    session.delete(project)
    session.flush()
    on_commit(session, lambda: store.remove_project(project_id))


def rater_texts(project: Project) -> RaterTextsOut:
    """What the rater pages say, in every language they speak, and the study's words."""
    spoken = i18n.languages()
    wordings = {code: i18n.Wording(code) for code in spoken}
    own = project.texts or {}
    return RaterTextsOut(
        languages=[
            LanguageOut(
                code=code,
                name=i18n.language_name(code),
                direction=i18n.direction(code),
                asked=code in project.languages,
            )
            for code in spoken
        ],
        texts=[
            RaterTextOut(
                source=source,
                plural=plural,
                translations={
                    code: wording.gettext(source)
                    if plural is None
                    else wording.ngettext(source, plural, 5)
                    for code, wording in wordings.items()
                },
                own={
                    code: own[code][text]
                    for code in own
                    for text in (source, plural)
                    if text and text in own[code]
                },
            )
            for source, plural in i18n.source_messages()
        ],
    )


def update_rating(
    *, session: Session, project: Project, changes: dict, may_redirect_raters: bool = True
) -> Project:
    """Apply rating settings; the shares of random and attention queries must leave room,
    a rank screen's picks must leave items unpicked, and an open study must hold the
    items its screens show. A question still worded as the old format's default follows
    the new format. Where raters are sent changes only with `may_redirect_raters`: a
    token that could point them elsewhere could send every finishing rater to any site."""
    redirected = sorted(
        name
        for name in RATER_DESTINATIONS
        if name in changes and changes[name] != getattr(project, name)
    )
    if redirected and not may_redirect_raters:
        raise Forbidden(
            f"{', '.join(redirected)}: where raters are sent changes only with the whole "
            "account's power (signed in with a password, or an 'admin' token)"
        )
    for name, value in changes.items():
        if value is None and name not in NULLABLE_RATING_SETTINGS:
            raise ServiceError(f"{name} cannot be null")
    random_share = changes.get("random_share", project.random_share)
    attention_rate = changes.get("attention_rate", project.attention_rate)
    if random_share + attention_rate > 1:
        raise ServiceError(
            f"random_share + attention_rate must be at most 1; got {random_share} + "
            f"{attention_rate}"
        )
    blocks = changes.get("blocks", project.blocks)
    target = changes.get("answers_per_rater", project.answers_per_rater)
    if blocks > 1 and not 0 < blocks <= target:
        raise ServiceError(
            f"blocks split a session's answers_per_rater: {blocks} blocks need at least "
            f"{blocks} answers a session (answers_per_rater is {target})"
        )
    if "languages" in changes or "texts" in changes:
        worded = i18n.text_problems(
            changes.get("texts", project.texts), changes.get("languages", project.languages)
        )
        if worded:
            raise ServiceError("; ".join(worded))
    judgement = study_format(changes.get("judgement", project.judgement))
    shown = changes.get("shown", project.shown)
    picks = changes.get("picks", project.picks)
    _refuse_a_bad_shape(shown, picks)
    needed = judgement.items_per_screen(ScreenShape(shown, picks))
    if project.link_state is LinkState.open and (
        (items := count_items(session=session, project=project)) < needed
    ):
        raise Conflict(
            f"this study's link is open with {items} items, and a {judgement.name} screen "
            f"of these settings shows {needed}: upload items or show fewer"
        )
    if judgement is not project.judgement and "question" not in changes:
        project.question = _question_asking(project, judgement)
    changes = {**changes, "judgement": judgement} if "judgement" in changes else changes
    # Stored whole: a request's nested objects come without the defaults left unsaid.
    for name, whole in (("consent", Consent), ("questionnaire", Questionnaire)):
        if changes.get(name) is not None:
            changes = {**changes, name: whole.model_validate(changes[name]).model_dump()}
    if changes.get("arms") is not None:
        asked = ScreenShape(shown, picks)
        changes = {
            **changes,
            "arms": _checked_arms(session, project, changes["arms"], judgement, asked),
        }
    changes = _checked_practice(session, project, changes, judgement, ScreenShape(shown, picks))
    versions.before_change(session=session, project=project)
    if "consent" in changes and changes["consent"] != project.consent:
        project.consent_version += 1  # a consent given records the version it agreed to
    if any(getattr(project, name) != changes[name] for name in QUALITY_SETTINGS & set(changes)):
        project.agreement_cursor = 0  # the workers apply the new thresholds within a minute
    for name, value in changes.items():
        setattr(project, name, value)
    project.settings_version += 1
    session.flush()
    versions.record(session=session, project=project)
    return project


def _checked_arms(
    session: Session, project: Project, sent: list, judgement: JudgementFormat, shape: ScreenShape
) -> list[dict]:
    """The arms as stored (each whole, what it leaves unset left out), or a 400 naming
    the arm and field at fault."""
    arms = [
        {
            name: value.name if isinstance(value, JudgementFormat) else value
            for name, value in Arm.model_validate(arm).model_dump().items()
            if value is not None or name in ("target",)
        }
        for arm in sent
    ]
    names = [arm["name"] for arm in arms]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise ServiceError(f"arms: two arms are named {twice[0]!r}; each needs its own name")
    problems = arm_settings.problems(
        session=session, project=project, arms=arms, judgement=judgement, shape=shape
    )
    if problems:
        raise ServiceError("; ".join(problems))
    return arms


def _checked_practice(
    session: Session,
    project: Project,
    changes: dict,
    judgement: JudgementFormat,
    shape: ScreenShape,
) -> dict:
    """The changes with the practice stored whole, or a 400 naming each practice screen
    (the study's or an arm's) that does not fit the format and items it would ask."""
    if (
        judgement is not project.judgement
        and project.practice is not None
        and "practice" not in changes
    ):
        raise ServiceError(
            f"practice: its screens were set for {project.judgement.name} screens; set a "
            f"practice for {judgement.name} screens (or null: none) in the same change"
        )
    if changes.get("practice") is not None:
        changes = {**changes, "practice": Practice.model_validate(changes["practice"]).model_dump()}
    practice = changes["practice"] if "practice" in changes else project.practice
    arms = (changes["arms"] if "arms" in changes else project.arms) or []
    if practice is None and not any(arm.get("practice") for arm in arms):
        return changes
    problems = practice_settings.problems(
        session=session,
        project=project,
        practice=practice,
        judgement=judgement,
        shape=shape,
        arms=arms,
    )
    if problems:
        raise ServiceError("; ".join(problems))
    return changes


def previewed_as(project: Project, *, judgement: str | None, shown: int | None, picks: int | None):
    """A copy of the project, in no session, asking another format (or shape) than it
    does: what the settings page previews before a format is switched. Nothing of it is
    stored. A format a study cannot ask, or a shape it refuses, is a 400."""
    asked = {
        name: value for name, value in (("shown", shown), ("picks", picks)) if value is not None
    }
    try:
        RatingSettingsUpdate.model_validate(asked)  # the settings' own ranges
    except ValidationError as error:
        problem = error.errors(include_url=False)[0]
        raise ServiceError(f"{problem['loc'][0]}: {problem['msg']}") from None
    names = [column.key for column in Project.__mapper__.column_attrs]
    copy = Project(**{name: getattr(project, name) for name in names})
    if judgement is not None:
        try:
            copy.judgement = study_format(judgement)
        except UnknownFormat as error:
            raise ServiceError(str(error)) from None
        copy.question = _question_asking(project, copy.judgement)
    copy.shown, copy.picks = asked.get("shown", project.shown), asked.get("picks", project.picks)
    _refuse_a_bad_shape(copy.shown, copy.picks)
    return copy


def _refuse_a_bad_shape(shown: int, picks: int) -> None:
    if picks >= shown:
        raise ServiceError(
            f"picks must be fewer than shown (a rank screen leaves items unpicked); got "
            f"picks {picks} of shown {shown}"
        )


def _question_asking(project: Project, judgement: JudgementFormat) -> str:
    """The question a study switched to `judgement` asks: the new format's own, unless
    the researcher worded the old one otherwise (then theirs stays)."""
    if project.question == project.judgement.default_question:
        return judgement.default_question
    return project.question


def set_link(*, session: Session, project: Project, state: LinkState) -> Project:
    """Open, pause or close the study's public link. It opens only once there is
    something to ask (the items one screen shows: three for a triplet); while it is not
    open raters see a page saying so and no completion code, and answers to comparisons
    already shown count."""
    if state is LinkState.open and project.link_state is not LinkState.open:
        items = count_items(session=session, project=project)
        needed = project.judgement.items_per_screen(project)
        if items < needed:
            raise Conflict(
                f"the study link cannot open yet: project {project.id} has {items} item"
                f"{'' if items == 1 else 's'}, and a {project.judgement.name} screen shows "
                f"{needed}; upload items first"
            )
        if project.link_opened_at is None:
            project.link_opened_at = utcnow()
    if state is not project.link_state:
        project.link_state = state
        # Processes that keep a copy of the study's settings read it again.
        project.settings_version += 1
    session.flush()
    return project


@dataclass(frozen=True)
class ProjectSummary:
    """A line of the projects list."""

    project: Project
    item_count: int
    triplet_count: int
    rater_count: int
    last_activity: datetime | None
    owner_name: str
    attention_checks: int = 0  # answered by raters: in their counts, not among the answers


def _last_activity(session: Session, project: Project) -> datetime | None:
    newest = session.scalar(select(func.max(Triplet.id)).where(Triplet.project_id == project.id))
    if newest is None:
        return None
    return session.scalar(select(Triplet.created_at).where(Triplet.id == newest))


def summarize(*, session: Session, project: Project) -> ProjectSummary:
    counts = project_counts(session=session, project=project)
    raters, checks = session.execute(
        select(
            func.count(),
            func.coalesce(func.sum(Rater.attention_passed + Rater.attention_failed), 0),
        ).where(Rater.project_id == project.id)
    ).one()
    return ProjectSummary(
        project=project,
        item_count=counts["item_count"],
        triplet_count=counts["triplet_count"],
        rater_count=raters,
        last_activity=_last_activity(session, project) or project.created_at,
        owner_name=session.get_one(Researcher, project.owner_id).name,
        attention_checks=int(checks),
    )


def list_summaries(
    *, session: Session, researcher: Researcher, only: Collection[int] | None = None
) -> list[ProjectSummary]:
    return [
        summarize(session=session, project=project)
        for project in list_projects(session=session, researcher=researcher, only=only)
    ]


@dataclass(frozen=True)
class AnswerRate:
    """Raters' answers per hour over the last week (hour starts, UTC), and the median
    response time of the newest answers."""

    hours: list[datetime]
    answers: list[int]
    median_response_ms: float | None
    timed_answers: int


def answer_rate(*, session: Session, project: Project, now: datetime | None = None) -> AnswerRate:
    now = now or utcnow()
    first_hour = (now - timedelta(hours=ANSWER_RATE_HOURS - 1)).replace(
        minute=0, second=0, microsecond=0
    )
    hours = [first_hour + timedelta(hours=step) for step in range(ANSWER_RATE_HOURS)]
    counts = answers_per_hour(
        session, project.id, first_hour, ANSWER_RATE_HOURS, TripletSource.rater
    )
    times: list[int] = list(
        session.scalars(
            select(Triplet.response_time_ms)
            .where(
                Triplet.project_id == project.id,
                Triplet.source == TripletSource.rater,
                Triplet.response_time_ms.is_not(None),
            )
            .order_by(Triplet.id.desc())
            .limit(RECENT_ANSWERS)
        )
    )
    return AnswerRate(
        hours=hours,
        answers=counts,
        median_response_ms=median(times) if times else None,
        timed_answers=len(times),
    )


RATE_WINDOW_ANSWERS = 500


def recent_answers_per_hour(*, session: Session, project: Project) -> float | None:
    """Raters' answers per hour lately: over the newest answers (up to 500, within the
    last hour when there are that many), None when too few to tell."""
    since = utcnow() - timedelta(hours=1)
    stamps = list(
        session.scalars(
            select(Triplet.created_at)
            .where(Triplet.project_id == project.id, Triplet.source == TripletSource.rater)
            .order_by(Triplet.id.desc())
            .limit(RATE_WINDOW_ANSWERS)
        )
    )
    stamps = [s if s.tzinfo else s.replace(tzinfo=since.tzinfo) for s in stamps]
    recent = [stamp for stamp in stamps if stamp >= since] or stamps
    if len(recent) < 2:
        return None
    span = (utcnow() - min(recent)).total_seconds()
    return len(recent) * 3600 / span if span > 0 else None
