"""The rater's JSON routes: join a study, get the next comparison, answer it. A rater's
token reaches these and the rating pages only, never the researcher API."""

from __future__ import annotations

import time
from functools import partial

from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool

from app.core import metrics
from app.core.deps import transaction
from app.core.errors import Conflict
from app.core.i18n import ENGLISH, Wording
from app.core.routes import StrictJSONRoute
from app.raters import arms
from app.raters.service import project_by_slug
from app.rating import path
from app.rating import service as rating
from app.rating.cards import Shown
from app.rating.deps import RaterToken, find_rater, media_folder, study_wording
from app.rating.schemas import (
    AnswerIn,
    ComparisonOut,
    ConsentIn,
    ConsentOut,
    FeedbackOut,
    JoinIn,
    JoinOut,
    QuestionnaireIn,
    RaterStateOut,
    ShownItem,
)

router = APIRouter(prefix="/rate/{slug}", tags=["rating"], route_class=StrictJSONRoute)


def _media_folder(request: Request, slug: str) -> str:
    return request.scope.get("root_path", "") + media_folder(slug)


def _item(media: str, shown: Shown) -> ShownItem:
    image = f"{media}/{shown.image}" if shown.image else None
    clip = f"{media}/{shown.clip}" if shown.clip else None
    return ShownItem(
        key=shown.key,
        text=shown.text,
        image_url=image,
        clip_url=clip,
        clip_type=shown.clip_type,
        clip_seconds=shown.seconds,
        alt=shown.said,
    )


def state_out(
    request: Request, slug: str, state: rating.RaterState, wording: Wording = ENGLISH
) -> RaterStateOut:
    """The rater state as the API gives it (a practice answer's feedback `message` in
    `wording`'s language: the study's that the client's Accept-Language prefers)."""
    comparison = None
    if state.comparison is not None:
        shown = state.comparison
        media = _media_folder(request, slug)
        if not shown.format.served_as_screen:
            anchor, left, right = shown.triplet_cards()
            comparison = ComparisonOut(
                query_id=shown.assignment_id,
                anchor=_item(media, anchor),
                left=_item(media, left),
                right=_item(media, right),
            )
        else:
            comparison = ComparisonOut(
                query_id=shown.assignment_id,
                format=shown.format.name,
                items=[_item(media, item) for item in shown.items],
                reference=None if shown.reference is None else _item(media, shown.reference),
                picks=shown.picks if shown.format.answered_with == "picks" else None,
                pivots=None
                if shown.pivots is None
                else [_item(media, pivot) for pivot in shown.pivots],
            )
    if comparison is not None and state.comparison is not None:
        comparison.practice = state.comparison.practice
    return RaterStateOut(
        step=state.step,
        consent=None if state.consent is None else ConsentOut(**state.consent),
        questionnaire=state.questionnaire,
        debrief=state.debrief,
        declined=state.declined,
        timed_out=state.timed_out,
        block=state.block,
        blocks=state.blocks,
        break_seconds=state.break_seconds,
        comparison=comparison,
        upcoming=[_item(_media_folder(request, slug), card) for card in state.upcoming],
        answered=state.answered,
        target=state.target,
        complete=state.completion_code is not None,
        completion_code=state.completion_code,
        completion_url=state.completion_url,
        replayed=state.replayed,
        out_of_work=state.out_of_work,
        screened_out=state.screened_out,
        link=state.link,
        arm=state.arm,
        version=state.version,
        feedback=None
        if state.feedback is None
        else FeedbackOut(
            correct=state.feedback.correct,
            expected=list(state.feedback.expected),
            given=list(state.feedback.given),
            message=state.feedback.message(state.feedback_names or {}, wording),
        ),
        practice_screen=state.practice_screen,
        practice_screens=state.practice_screens,
        failed_practice=state.failed_practice,
    )


@router.post("/raters", response_model=JoinOut, status_code=201)
def join_study(slug: str, body: JoinIn, request: Request):
    """Join the study behind a public link: the answer holds the rater's token and
    progress; `GET …/next` with the token serves the first comparison. Joining serves
    nothing, so a burst of joins holds none of the queries a build waits for. (Rate
    limited before routing: ThrottleRaterRoutes.)"""
    with transaction(request) as session:
        project = project_by_slug(session=session, slug=slug)
        rater, token = rating.join(
            session=session,
            project=project,
            params=body.model_dump(exclude_none=True),
            admit=partial(request.app.state.throttle.newcomer, slug),
        )
        state = rating.progress(project=arms.seen_by(project, rater.arm), rater=rater)
    return JoinOut(
        **state_out(request, slug, state).model_dump(),
        rater_token=request.app.state.rater_tokens.issue(token),
    )


@router.post("/consent", response_model=RaterStateOut)
def consent(slug: str, body: ConsentIn, request: Request, token: RaterToken):
    """The participant's answer to the study's consent: agreeing (every statement
    ticked) records when and to which version, then `GET …/next` serves the task;
    declining ends the session with the no-consent code. Sent again, the same answer
    changes nothing; the other one is a 409."""
    with transaction(request) as session:
        current = find_rater(session, slug, token)
        path.answer_consent(
            session=session, project=current.project, rater=current.rater, agree=body.agree
        )
        state = rating.progress(project=current.project, rater=current.rater)
    return state_out(request, slug, state)


@router.post("/questionnaire", response_model=RaterStateOut)
def questionnaire(slug: str, body: QuestionnaireIn, request: Request, token: RaterToken):
    """The participant's answers to the study's questionnaire, while it is their step
    (before the task: after the consent; after it: before the code). Each answer is
    checked against its question; a 422 names every question at fault. Sent again, the
    same answers change nothing."""
    with transaction(request) as session:
        current = find_rater(session, slug, token)
        project, rater = current.project, current.rater
        now = rating.state(
            session=session, project=project, rater=rater, draws=rating.roll(request)
        )
        if now.step is not path.Step.questionnaire and not rater.questionnaire_sent:
            raise Conflict(f"no questionnaire is due now (the participant's step is {now.step})")
        path.answer_questionnaire(
            session=session, project=project, rater=rater, answers=body.answers
        )
        state = rating.state(
            session=session, project=project, rater=rater, draws=rating.roll(request)
        )
    return state_out(request, slug, state)


@router.get("/next", response_model=RaterStateOut)
def next_comparison(slug: str, request: Request, token: RaterToken):
    """The comparison to answer now (the same one until it is answered or its lease ends)."""
    with transaction(request) as session:
        current = find_rater(session, slug, token)
        state = rating.state(
            session=session,
            project=current.project,
            rater=current.rater,
            draws=rating.roll(request),
        )
    return state_out(request, slug, state)


@router.post("/answers", response_model=RaterStateOut)
async def answer_comparison(slug: str, body: AnswerIn, request: Request, token: RaterToken):
    """Answer a comparison; a retry of the same query_id stores nothing more. The answer
    holds the next comparison."""
    started = time.perf_counter()
    draws = rating.roll(request)
    if body.choice is None:  # a screen: the Python path takes it
        state = await run_in_threadpool(_answer, slug, body, request, token, draws)
        metrics.answered("python", started)
        return state
    quick = (
        None
        if body.plays
        else await rating.answer_quickly(
            function=request.app.state.answer_function,
            sessions=request.app.state.session_factory,
            slug=slug,
            token=token,
            assignment_id=body.query_id,
            choice=body.choice,
            response_time_ms=body.response_time_ms,
            draws=draws,
        )
    )
    if quick is not None:
        metrics.answered("sql", started)
        return state_out(request, slug, quick[1])
    state = await run_in_threadpool(_answer, slug, body, request, token, draws)
    metrics.answered("python", started)
    return state


def _answer(
    slug: str, body: AnswerIn, request: Request, token: str | None, draws: rating.Draws
) -> RaterStateOut:
    with transaction(request) as session:
        current = find_rater(session, slug, token)
        state = rating.answer(
            session=session,
            project=current.project,
            rater=current.rater,
            assignment_id=body.query_id,
            choice=body.choice,
            picks=body.picks,
            sides=body.side_pairs,
            response_time_ms=body.response_time_ms,
            draws=draws,
            plays=body.plays,
        )
        wording = study_wording(request, current.project)
    return state_out(request, slug, state, wording)
