"""What a rater does, end to end: join through the public link, get the next query,
answer it. Each use case is one call for the routes (pages and JSON alike)."""

from __future__ import annotations

import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session, sessionmaker
from starlette.concurrency import run_in_threadpool

from app.auth.service import hash_token
from app.builds import jobs as build_jobs
from app.core.db import unit_of_work
from app.models import (
    Assignment,
    Choice,
    Item,
    LinkState,
    Project,
    Rater,
)
from app.models._types import utcnow
from app.raters import arms, quality
from app.raters import service as raters
from app.rating import path, practice
from app.rating.cards import (
    Comparison,
    Shown,
    by_key,
    card_cache,
    comparison_of,
    keys_of,
    screen_of,
)
from app.rating.path import Step
from app.scheduling import screens, study_items, unseen
from app.scheduling import service as scheduling
from app.scheduling.answer_function import Answered, AnswerFunction
from app.scheduling.draws import Draws
from app.scheduling.service import ActiveRater
from app.scheduling.upcoming import Upcoming
from app.triplets.log import LOG_LOCK


@dataclass(frozen=True)
class RaterState:
    """Where a rater stands: the comparison to answer (None once the session is over),
    how many answered of how many, and the code (and redirect) that ends the session:
    the completion code once done, the no-more-work code if the study ran out of
    queries for them first, the screened-out code if they failed the attention checks
    in a project with one."""

    comparison: Comparison | None
    answered: int
    target: int
    completion_code: str | None
    completion_url: str | None
    replayed: bool = False
    out_of_work: bool = False
    screened_out: bool = False
    link: LinkState = LinkState.open  # not open: nothing to answer, and no code
    notice: str | None = None  # what a rater of a link that is not open reads
    step: Step = Step.task  # where they are on the study's path (app/rating/path.py)
    declined: bool = False  # declined the consent: the session ended there
    timed_out: bool = False  # ran longer than the study's limit: the session ended there
    consent: dict | None = None  # at the consent step: its text, statements and version
    questionnaire: dict | None = None  # at the questionnaire step: its questions
    block: int = 1  # the block the next answer is in, of `blocks`
    blocks: int = 1
    break_seconds: int = 0  # at a break: how long it lasts at least
    debrief: str | None = None  # at the debrief step: the lab's text, with the code
    arm: str | None = None  # the study's arm they are in (None: a study without arms)
    version: int = 1  # the design version that asks them now
    feedback: practice.Feedback | None = None  # on the practice screen just answered
    feedback_names: dict[str, str] | None = None  # its items' words, by key
    feedback_shown: tuple[Shown, ...] = ()  # the items a right answer picks, as shown
    practice_screen: int = 0  # at the practice step: the screen shown (from 1), of
    practice_screens: int = 0
    failed_practice: bool = False  # too few practice screens right: the session ended
    # The items of the comparison after this one, as far as it is drawn ahead
    # (app/scheduling/upcoming.py): the page loads them while the rater answers.
    upcoming: tuple[Shown, ...] = ()


def roll(request) -> Draws:
    """The random choices of one rater request, drawn once from the app's source: the
    answer function and the Python path it may hand the request to take the same."""
    return Draws.roll(request.app.state.scheduler_random)


def join(
    *,
    session: Session,
    project: Project,
    params: Mapping[str, str],
    admit: Callable[[bool], None] | None = None,
) -> tuple[ActiveRater, str]:
    joined = raters.join(session=session, project=project, params=params, admit=admit)
    # This process's copy of the study's settings: the rater's first answer can then
    # take the one-call path (answer_quickly) like the rest.
    raters.studies().get(session, project.public_slug, project.settings_version)
    return joined


def state(
    *,
    session: Session,
    project: Project,
    rater: ActiveRater,
    draws: Draws,
    replayed: bool = False,
    just_answered: bool = False,
    upcoming: Upcoming | None = None,
) -> RaterState:
    """The rater's next comparison (leased to them) and their progress; nothing is
    served before the study's consent is given. After an answer, the next is the one
    decided as the answered one was served (`upcoming`)."""
    if path.before_the_task(project, rater) or path.runs_out(
        session=session, project=project, rater=rater
    ):
        return progress(project=project, rater=rater)
    if path.in_practice(project, rater):
        due = practice.screen(session=session, project=project, rater=rater)
        if due is not None:
            return _progress(project, rater.answers, due, replayed, rater=rater)
        practice.skip_the_rest(session=session, project=project, rater=rater)
    comparison = None
    following: tuple[Shown, ...] = ()
    for _ in range(3):
        assignment = scheduling.serve_next(
            session=session,
            project=project,
            rater=rater,
            draws=draws,
            just_answered=just_answered,
            upcoming=upcoming,
        )
        comparison = None if assignment is None else comparison_of(session, project, assignment)
        if assignment is None or comparison is not None:
            if assignment is not None and assignment.upcoming is not None:
                following = tuple(
                    card_cache().get(session, project, assignment.upcoming.items) or ()
                )
            break
        # It names an item deleted since it was drawn: withdrawn, and another served.
        scheduling.withdraw(session=session, assignment_id=assignment.assignment_id)
        just_answered, upcoming = True, None
    screened_out = scheduling.is_screened_out(project, rater)
    shown = _progress(
        project, rater.answers, comparison, replayed, screened_out=screened_out, rater=rater
    )
    if shown.comparison is not None and following:
        shown = replace(shown, upcoming=following)
    if shown.out_of_work and shown.completion_code is not None:
        # Paid with the no-more-work code: the participants list says so.
        session.execute(
            update(Rater)
            .where(Rater.id == rater.id, Rater.out_of_work_at.is_(None))
            .values(out_of_work_at=utcnow())
        )
    return shown


def progress(*, project: Project, rater: ActiveRater) -> RaterState:
    """The rater's progress without serving a comparison: what a join answers, so that
    joining leases nothing (a burst of joins would otherwise hold the build's queries)."""
    screened_out = scheduling.is_screened_out(project, rater)
    return _progress(
        project,
        rater.answers,
        None,
        replayed=False,
        asked=False,
        screened_out=screened_out,
        rater=rater,
    )


def preview(*, session: Session, project: Project, answered: int = 0) -> RaterState:
    """What a rater would see, for the researcher: a screen of the project's items drawn
    at random, nothing leased and nothing recorded (None: fewer items than it shows)."""
    wanted = screens.screen_size(project)
    bounds = session.execute(
        select(func.min(Item.id), func.max(Item.id)).where(Item.project_id == project.id)
    ).one()
    if bounds[0] is None:
        return _progress(project, answered, None, replayed=False, asked=False, previewing=True)
    picked: list[Item] = []
    for _ in range(4 * wanted):  # ids may have gaps: a few more draws than needed
        if len(picked) == wanted:
            break
        start = secrets.randbelow(bounds[1] - bounds[0] + 1) + bounds[0]
        found = session.scalar(
            select(Item)
            .where(
                Item.project_id == project.id,
                Item.id >= start,
                Item.id.not_in([item.id for item in picked]),
            )
            .order_by(Item.id)
            .limit(1)
        ) or session.scalar(
            select(Item)
            .where(Item.project_id == project.id, Item.id.not_in([item.id for item in picked]))
            .order_by(Item.id)
            .limit(1)
        )
        if found is None:
            break
        picked.append(found)
    if len(picked) < wanted:
        return _progress(project, answered, None, replayed=False, asked=False, previewing=True)
    cards = [Shown.of(item) for item in picked]
    format = screens.screen_format(project)
    if format is None:
        comparison = Comparison.triplet(0, cards)
    else:
        comparison = screen_of(0, format, cards, format.picks_of(project))
    return _progress(project, answered, comparison, replayed=False, asked=False, previewing=True)


def _progress(
    project: Project,
    answers: int,
    comparison: Comparison | None,
    replayed: bool,
    asked: bool = True,
    previewing: bool = False,
    screened_out: bool = False,
    rater: ActiveRater | None = None,
) -> RaterState:
    code = url = notice = None
    out_of_work = asked and scheduling.is_out_of_work(project, answers, comparison)
    declined = rater is not None and rater.declined
    # (A session that completed in time keeps its completion code.)
    timed_out = (
        rater is not None
        and rater.timed_out
        and not declined
        and not scheduling.is_complete(project, answers)
    )
    if declined:  # the session ended at the consent: its own code, never the completion code
        comparison, out_of_work = None, False
        code, url = project.no_consent_code, project.no_consent_url
    elif timed_out:
        comparison, out_of_work = None, False
        code, url = project.timeout_code, project.timeout_url
    elif rater is not None and path.before_the_task(project, rater):
        comparison = None
    elif screened_out:  # ended on failed attention checks, whatever came after
        comparison, out_of_work = None, False
        code, url = project.screened_out_code, project.screened_out_url
    elif scheduling.is_complete(project, answers):  # the work is done: paid, link or not
        code, url = project.completion_code, project.completion_url
    elif not previewing and (notice := raters.link_notice(project)) is not None:
        comparison = None
    elif out_of_work:
        code = project.no_more_work_code or project.completion_code
        url = project.no_more_work_url or project.completion_url
    questionnaire_due = (
        code is not None
        and not declined
        and not screened_out
        and not previewing
        and path.owes_questionnaire_after(project, rater)
    )
    if questionnaire_due:  # the code comes once it is answered
        code = url = None
    return RaterState(
        comparison=comparison,
        answered=answers,
        target=project.answers_per_rater,
        completion_code=code,
        completion_url=url,
        replayed=replayed,
        out_of_work=out_of_work,
        screened_out=screened_out,
        link=project.link_state,
        notice=notice,
        step=(
            at := path.step(
                project,
                rater,
                ended=declined or timed_out or code is not None,
                joining=not asked and not previewing,
                answers=answers,
                questionnaire_due=questionnaire_due,
            )
        ),
        declined=declined,
        timed_out=timed_out,
        block=(placed := path.block_of(project, answers))[0],
        blocks=placed[1],
        break_seconds=project.break_seconds if at is Step.break_ else 0,
        questionnaire=project.questionnaire if at is Step.questionnaire else None,
        consent=path.consent_shown(project) if at is Step.consent else None,
        debrief=project.debrief if at is Step.debrief else None,
        arm=project.arm_shown,
        version=project.design_version,
        practice_screen=rater.practice_answered + 1 if rater and at is Step.practice else 0,
        practice_screens=len(path.practice_trials(project)),
        failed_practice=rater is not None and rater.practice_failed,
    )


def answer(
    *,
    session: Session,
    project: Project,
    rater: ActiveRater,
    assignment_id: int,
    choice: Choice | None,
    response_time_ms: int | None,
    draws: Draws,
    picks: list[str] | None = None,
    sides: list[tuple[str, str]] | None = None,
    plays: dict[str, int] | None = None,
) -> RaterState:
    """Record one answer (once, however often it is sent) and serve the next query; with
    `plays`, how often each of its sounds or videos was played."""
    if practice.is_practice_id(assignment_id):
        return _practice_answer(
            session=session,
            project=project,
            rater=rater,
            query_id=assignment_id,
            choice=choice,
            picks=picks,
            response_time_ms=response_time_ms,
            draws=draws,
        )
    if (
        scheduling.is_screened_out(project, rater)
        or path.before_the_task(project, rater)
        or path.runs_out(session=session, project=project, rater=rater)
    ):
        # Their session has ended, or has yet to begin: where they stand, nothing recorded.
        return state(session=session, project=project, rater=rater, draws=draws)
    outcome = scheduling.submit_answer(
        session=session,
        project=project,
        rater=rater,
        assignment_id=assignment_id,
        choice=choice,
        picks=picks,
        sides=sides,
        response_time_ms=response_time_ms,
        keys_of=lambda ids: keys_of(session, project, ids),
    )
    if plays:
        # Kept with the answer the first time it is sent (a retry changes nothing).
        session.execute(
            update(Assignment)
            .where(
                Assignment.id == assignment_id,
                Assignment.rater_id == rater.id,
                Assignment.plays.is_(None),
            )
            .values(plays=plays)
            .execution_options(synchronize_session=False)
        )
    rater.screened_out = outcome.screened_out
    if outcome.exclusion_changed:
        quality.replay_builds(session=session, project=project)
    elif outcome.build_id is not None:
        build_jobs.request_step_soon(
            session=session, build_id=outcome.build_id, project_id=project.id
        )
    elif outcome.routing_id is not None:
        build_jobs.request_routing_soon(
            session=session, routing_id=outcome.routing_id, project_id=project.id
        )
    following = state(
        session=session,
        project=project,
        rater=rater,
        draws=draws,
        replayed=outcome.replayed,
        just_answered=not outcome.replayed,
        upcoming=outcome.upcoming,
    )
    scheduling.store_answer(session=session, outcome=outcome)
    return following


def _practice_answer(
    *,
    session: Session,
    project: Project,
    rater: ActiveRater,
    query_id: int,
    choice: Choice | None,
    picks: list[str] | None,
    response_time_ms: int | None,
    draws: Draws,
) -> RaterState:
    """A practice screen's answer: stored apart, told right or not, and the next screen
    (practice or task) served; before the consent (or after time ran out) nothing."""
    if path.before_the_task(project, rater) or path.runs_out(
        session=session, project=project, rater=rater
    ):
        return state(session=session, project=project, rater=rater, draws=draws)
    feedback = practice.answer(
        session=session,
        project=project,
        rater=rater,
        query_id=query_id,
        choice=None if choice is None else choice.value,
        picks=picks,
        response_time_ms=response_time_ms,
    )
    following = state(
        session=session, project=project, rater=rater, draws=draws, replayed=feedback.replayed
    )
    return with_feedback(session=session, project=project, shown=following, feedback=feedback)


def with_feedback(
    *, session: Session, project: Project, shown: RaterState, feedback: practice.Feedback | None
) -> RaterState:
    """`shown` with the feedback on a practice answer, its items named as raters see them."""
    if feedback is None:
        return shown
    expected = tuple(by_key(session, project, feedback.expected) or ())
    names = {card.key: card.text or card.key for card in expected}
    return replace(shown, feedback=feedback, feedback_names=names, feedback_shown=expected)


async def answer_quickly(
    *,
    function: AnswerFunction | None,
    sessions: sessionmaker[Session],
    slug: str,
    token: str | None,
    assignment_id: int,
    choice: Choice,
    response_time_ms: int | None,
    draws: Draws,
) -> tuple[Project, RaterState] | None:
    """`answer()` in one database call, without a worker thread, where that can be done:
    on PostgreSQL, for the usual answer, in a study this process has served lately.
    None when the full path must take the request (it has then written nothing, and
    takes the same `draws`)."""
    if function is None or not function.ready or not token:
        return None
    allowed_id = 0 < assignment_id <= scheduling.MAX_QUERY_ID
    if practice.is_practice_id(assignment_id):
        return None  # a practice screen's answer: the full path stores it apart
    if not allowed_id or not scheduling.response_time_allowed(response_time_ms):
        return None  # the full path names what is wrong
    project = raters.studies().cached(slug)
    if project is None or screens.screen_format(project) is not None:
        return None  # the function hands a study of screens to the full path
    if arms.answered_in_python(project):
        return None  # nor one whose arms ask about items, or at a share, of their own
    if project.max_session_minutes is not None:
        return None  # nor one whose sessions run out of time (the full path reads the clock)
    item_ids = study_items.item_ids().cached(project)
    if item_ids is None:
        return None
    if draws.ahead is not None and unseen.repeats_now(project, draws.ahead):
        # The query after the next repeats one: the Python path looks for it, so that the
        # page loads it ahead (upcoming.draw), a time in a hundred.
        return None
    answered = await function.answer(
        slug=slug,
        token_hash=hash_token(token),
        assignment_id=assignment_id,
        choice=choice,
        response_time_ms=response_time_ms,
        now=utcnow(),
        draws=draws,
        item_ids=item_ids,
        log_lock=LOG_LOCK,
    )
    if answered is None:
        return None
    project = arms.seen_by(project, answered.arm)
    build_due = answered.build_id is not None and build_jobs.step_due(answered.build_id)
    routing_due = answered.routing_id is not None and build_jobs.routing_due(answered.routing_id)
    shown = () if answered.served is None else tuple(answered.served[1:])
    ahead = answered.upcoming or ()
    missing = card_cache().missing(project, (*shown, *ahead))
    if missing:  # read on the answer's own pool: no worker thread for a card
        card_cache().keep(project, await function.card_rows(project.id, sorted(missing)))
    cards = card_cache().cached(project, shown) if shown else None
    following = card_cache().cached(project, ahead) if ahead else []
    current = answered.settings_version == project.settings_version
    # The function draws a few random queries; a rater who has seen most of a small study
    # needs the full search, here in Python, before their session may end.
    search = scheduling.is_out_of_work(project, answered.answers, answered.served)
    quick = current and not build_due and not routing_due and not search
    if quick and ((cards and following is not None) or answered.served is None):
        return project, _answered_state(project, answered, cards, following or ())
    # A few times a second: a build step to ask for, the study's settings to read, an item
    # deleted since it was drawn.
    return await run_in_threadpool(
        _finish_quick_answer, sessions, slug, token, answered, build_due, routing_due, draws
    )


def _finish_quick_answer(
    sessions: sessionmaker[Session],
    slug: str,
    token: str,
    answered: Answered,
    build_due: bool,
    routing_due: bool,
    draws: Draws,
) -> tuple[Project, RaterState]:
    with unit_of_work(sessions) as session:
        project = arms.seen_by(
            raters.studies().get(session, slug, answered.settings_version), answered.arm
        )
        if build_due and answered.build_id is not None:
            build_jobs.request_step_by_id(
                session=session, build_id=answered.build_id, project_id=project.id
            )
        if routing_due and answered.routing_id is not None:
            build_jobs.request_routing(
                session=session, routing_id=answered.routing_id, project_id=project.id
            )
        cards = withdrawn = None
        following: list[Shown] = []
        if answered.served is not None:
            cards = card_cache().get(session, project, answered.served[1:])
            withdrawn = cards is None  # drawn from item ids read before an item was deleted
            if withdrawn:
                scheduling.withdraw(session=session, assignment_id=answered.served[0])
        if answered.upcoming is not None:
            following = card_cache().get(session, project, answered.upcoming) or []
        if withdrawn or scheduling.is_out_of_work(project, answered.answers, answered.served):
            found = raters.authenticate_in_study(session=session, slug=slug, token=token)
            if found is not None:
                # The next query as the function decided it (it served none).
                decided = None
                if not withdrawn and answered.next_purpose is not None:
                    decided = Upcoming(answered.next_purpose)
                return found[0], state(
                    session=session,
                    project=found[0],
                    rater=found[1],
                    draws=draws,
                    just_answered=True,
                    upcoming=decided,
                )
    return project, _answered_state(project, answered, cards, following)


def _answered_state(
    project: Project, answered: Answered, cards: list[Shown] | None, following: Sequence[Shown]
) -> RaterState:
    comparison = None
    if answered.served is not None and cards is not None:
        comparison = Comparison.triplet(answered.served[0], cards)
    shown = _progress(project, answered.answers, comparison, replayed=False)
    if shown.comparison is not None and following:
        shown = replace(shown, upcoming=tuple(following))
    return shown
