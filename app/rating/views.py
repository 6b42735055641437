"""The rating pages: a study's instructions, then one comparison after another, swapped
in by htmx without a page load (and plain form posts where scripts are off)."""

from __future__ import annotations

from functools import partial
from typing import Annotated

from fastapi import APIRouter, Form, Request
from fastapi.responses import FileResponse, HTMLResponse, RedirectResponse, Response
from pydantic import ValidationError
from sqlalchemy import select
from starlette.concurrency import run_in_threadpool

from app.core.db import roll_back
from app.core.deps import SessionDep, hand_cookie, is_from_another_origin, transaction
from app.core.errors import NotFound, ServiceError, Unprocessable
from app.core.fields import BigRowId
from app.core.i18n import N_
from app.core.routes import StrictJSONRoute
from app.core.signing import RATER_COOKIE
from app.core.throttle import TooManyRequests
from app.models import Choice, Item
from app.raters import arms
from app.raters import service as raters
from app.rating import path, practice
from app.rating import service as rating
from app.rating.deps import MEDIA, PREFIX, RatedProject, cookie_rater_token, study_wording
from app.rating.schemas import LONGEST_KEY, MOST_PICKS, PLAYS
from app.scheduling.service import MAX_RESPONSE_MS

router = APIRouter(prefix=PREFIX, include_in_schema=False, route_class=StrictJSONRoute)
COOKIE_DAYS = 30


def _templates(request: Request):
    return request.app.state.templates


def _page(request: Request, name: str, context: dict, status_code: int = 200) -> HTMLResponse:
    """A rater page, in the study's language the rater's browser prefers (a page of no
    study: any language the pages speak), with the study's own words."""
    request.state.wording = study_wording(request, context.get("project"))
    response = _templates(request).TemplateResponse(request, name, context, status_code=status_code)
    response.headers["Content-Language"] = request.state.wording.code.replace("_", "-")
    # The page's language follows the browser's: caches keep one copy per language.
    response.headers["Vary"] = "Accept-Language"
    return response


def _rater(request: Request, session, project):
    return raters.authenticate(session=session, project=project, token=cookie_rater_token(request))


@router.get("", response_class=HTMLResponse)
def instructions(slug: str, request: Request, session: SessionDep, project: RatedProject):
    """The researcher's instructions and a start button; platform ids pass through."""
    rater = _rater(request, session, project)
    returning = rater is not None
    if rater is not None:  # their arm's instructions
        project = arms.seen_by(project, rater.arm)
    notice = raters.link_notice(project)
    if notice is None and not returning:
        notice = arms.notice_for_newcomers(session=session, project=project)
    return _page(
        request,
        "rate/instructions.html",
        {
            "project": project,
            "params": dict(request.query_params),
            "returning": returning,
            "notice": notice,
        },
    )


@router.post("/start")
async def start(slug: str, request: Request, session: SessionDep, project: RatedProject):
    form = await request.form()
    params = {name: str(value) for name, value in form.items()}
    if is_from_another_origin(request):
        # Another origin's form would sign this browser in as whoever it names.
        return _page(
            request,
            "rate/instructions.html",
            {
                "project": project,
                "params": params,
                "returning": False,
                "error": N_("This study starts from its own page: press Start here to begin."),
            },
            status_code=403,
        )
    try:
        await request.app.state.throttle.join(request, slug)
        joined, token = rating.join(
            session=session,
            project=project,
            params=params,
            admit=partial(request.app.state.throttle.newcomer, slug),
        )
    except ServiceError as error:
        # When the link is not open, or the study full, that says it all.
        notice = raters.link_notice(project) or arms.notice_for_newcomers(
            session=session, project=project
        )
        page = _page(
            request,
            "rate/instructions.html",
            {
                "project": project,
                "params": params,
                "returning": False,
                "error": None if notice else _join_refusal(request, project, error),
                "notice": notice,
            },
            status_code=error.status_code,
        )
        page.headers.update(getattr(error, "headers", None) or {})
        return page
    # A newcomer read the study's instructions; an arm that words its own (or asks
    # another format) shows them before its first screen.
    briefed = not arms.briefs_otherwise(project, joined.arm)
    following = "rate_page" if briefed else "instructions"
    response = RedirectResponse(request.url_for(following, slug=slug).path, status_code=303)
    hand_cookie(
        request,
        response,
        RATER_COOKIE,
        request.app.state.rater_tokens.issue(token),
        COOKIE_DAYS * 86_400,
        f"/r/{slug}",
    )
    return response


def _join_refusal(request: Request, project, error: ServiceError) -> str:
    """Why joining failed, as the rater reads it: a rate limit in their language."""
    if isinstance(error, TooManyRequests):
        wording = study_wording(request, project)
        return wording.gettext(
            N_("Many people are joining right now: please try again in %(seconds)s seconds.")
        ) % {"seconds": wording.number(error.retry_after)}
    return str(error.detail)


def _comparison_context(project, state: rating.RaterState, slug: str) -> dict:
    return {"project": project, "state": state, "slug": slug}


@router.get("/rate", response_class=HTMLResponse, name="rate_page")
def rate_page(slug: str, request: Request, session: SessionDep, project: RatedProject):
    rater = _rater(request, session, project)
    if rater is None:
        return RedirectResponse(request.url_for("instructions", slug=slug).path, status_code=303)
    project = arms.seen_by(project, rater.arm)
    state = rating.state(session=session, project=project, rater=rater, draws=rating.roll(request))
    if request.query_params.get("after") == "practice":  # a form post's feedback, redirected
        feedback = practice.latest(session=session, rater=rater)
        state = rating.with_feedback(
            session=session, project=project, shown=state, feedback=feedback
        )
    if state.step is path.Step.consent:
        return _page(request, "rate/consent.html", {"project": project, "state": state})
    if state.step is path.Step.questionnaire:
        return _page(request, "rate/questionnaire.html", {"project": project, "state": state})
    return _page(request, "rate/rate.html", _comparison_context(project, state, slug))


def _form_answers(form, questionnaire: dict) -> dict:
    """The questionnaire's answers as the form sends them, in the API's shape: a
    number's text read as a number (left as text, it is refused as not one)."""
    answers: dict = {}
    for question in questionnaire.get("questions", []):
        field = f"q-{question['name']}"
        if question["kind"] == "choices":
            answers[question["name"]] = [str(v) for v in form.getlist(field)]
            continue
        text = str(form.get(field) or "").replace("\r\n", "\n").strip()
        if question["kind"] == "number" and text:
            try:
                number = float(text.replace(",", "."))
                answers[question["name"]] = int(number) if number.is_integer() else number
            except ValueError:
                answers[question["name"]] = text
        else:
            answers[question["name"]] = text
    return answers


@router.post("/questionnaire", name="questionnaire_form")
async def questionnaire(slug: str, request: Request, session: SessionDep, project: RatedProject):
    """The questionnaire's form: stored when every answer fits its question, else shown
    again with each problem beside its question."""
    rater = _rater(request, session, project)
    if rater is None:
        return RedirectResponse(request.url_for("instructions", slug=slug).path, status_code=303)
    project = arms.seen_by(project, rater.arm)
    state = rating.state(session=session, project=project, rater=rater, draws=rating.roll(request))
    if state.step is not path.Step.questionnaire:
        return RedirectResponse(request.url_for("rate_page", slug=slug).path, status_code=303)
    answers = _form_answers(await request.form(), project.questionnaire or {})
    wording = study_wording(request, project)
    _, problems = path.answers_and_problems(project.questionnaire or {}, answers, wording)
    problems = {name: problem[:1].upper() + problem[1:] for name, problem in problems.items()}
    if problems or is_from_another_origin(request):
        return _page(
            request,
            "rate/questionnaire.html",
            {"project": project, "state": state, "answers": answers, "problems": problems},
            status_code=403 if is_from_another_origin(request) else 422,
        )
    path.answer_questionnaire(session=session, project=project, rater=rater, answers=answers)
    return RedirectResponse(request.url_for("rate_page", slug=slug).path, status_code=303)


@router.post("/consent", name="consent_form")
async def consent(slug: str, request: Request, session: SessionDep, project: RatedProject):
    """The consent form: "I agree" with every statement ticked, or "I do not agree"."""
    rater = _rater(request, session, project)
    if rater is None:
        return RedirectResponse(request.url_for("instructions", slug=slug).path, status_code=303)
    project = arms.seen_by(project, rater.arm)
    form = await request.form()
    agree = form.get("answer") == "agree"
    statements = (project.consent or {}).get("statements", [])
    ticked = [f"statement-{number}" in form for number in range(len(statements))]
    if is_from_another_origin(request) or (agree and not all(ticked)):
        state = rating.progress(project=project, rater=rater)
        error = (
            N_("This study asks for your consent on its own page: answer it here.")
            if is_from_another_origin(request)
            else N_("Tick each statement to take part, or choose “I do not agree”.")
        )
        return _page(
            request,
            "rate/consent.html",
            {"project": project, "state": state, "error": error, "ticked": ticked},
            status_code=403 if is_from_another_origin(request) else 422,
        )
    try:
        path.answer_consent(session=session, project=project, rater=rater, agree=agree)
    except ServiceError:
        pass  # decided before (another tab): the rating page shows where they stand
    return RedirectResponse(request.url_for("rate_page", slug=slug).path, status_code=303)


def _plays(text: str) -> dict[str, int] | None:
    """The page's count of plays per item ({"key": 2, …}), read by the API's rule, when
    it is one; anything else is no count, not an error (as a timing is)."""
    if not text:
        return None
    try:
        return PLAYS.validate_json(text, strict=True)
    except ValidationError:
        return None


def _milliseconds(text: str) -> int | None:
    """The page's own timing, when it is one; anything else is no timing, not an error."""
    if text.isascii() and text.isdigit() and len(text) <= 9:
        return int(text) if int(text) <= MAX_RESPONSE_MS else None
    return None


@router.post("/answer", response_class=HTMLResponse)
async def answer(
    slug: str,
    request: Request,
    query_id: Annotated[BigRowId, Form()],
    choice: Annotated[Choice | None, Form()] = None,
    picks: Annotated[list[str] | None, Form()] = None,
    item: Annotated[list[str] | None, Form()] = None,
    response_time_ms: Annotated[str, Form()] = "",
    plays: Annotated[str, Form(max_length=4_000)] = "",
):
    """A triplet's `choice`, a screen's `picks` (in the order picked), or a sorting
    screen's items (`item`, in display order) with each one's side (`side-0`, `side-1`,
    …); "can't tell" on a screen sends both, and the choice wins."""
    token = cookie_rater_token(request)  # (rate limited before routing: ThrottleRaterRoutes)
    elapsed = _milliseconds(response_time_ms)
    played = _plays(plays)
    draws = rating.roll(request)
    if choice is None and item:
        if len(item) > MOST_PICKS or any(len(key) > LONGEST_KEY for key in item):
            raise ServiceError(f"send at most {MOST_PICKS} items, each a key of the items shown")
        form = await request.form()
        sides = [(key, str(form.get(f"side-{at}") or "")) for at, key in enumerate(item)]
        return await run_in_threadpool(
            _answer, slug, request, token, query_id, None, elapsed, draws, None, sides, played
        )
    if choice is not None:
        picks = None
    elif not picks:
        raise ServiceError("choose one of the items shown")
    if picks is not None:
        if len(picks) > MOST_PICKS or any(len(key) > LONGEST_KEY for key in picks):
            raise ServiceError(f"send at most {MOST_PICKS} picks, each a key of the items shown")
        return await run_in_threadpool(
            _answer, slug, request, token, query_id, None, elapsed, draws, picks, None, played
        )
    assert choice is not None  # (picks were answered above)
    quick = (
        None
        if played
        else await rating.answer_quickly(
            function=request.app.state.answer_function,
            sessions=request.app.state.session_factory,
            slug=slug,
            token=token,
            assignment_id=query_id,
            choice=choice,
            response_time_ms=elapsed,
            draws=draws,
        )
    )
    if quick is not None:
        return _answered(request, slug, *quick)
    return await run_in_threadpool(
        _answer, slug, request, token, query_id, choice, elapsed, draws, None, None, played
    )


def _answer(
    slug: str,
    request: Request,
    token: str | None,
    query_id: int,
    choice: Choice | None,
    elapsed: int | None,
    draws: rating.Draws,
    picks: list[str] | None = None,
    sides: list[tuple[str, str]] | None = None,
    plays: dict[str, int] | None = None,
):
    with transaction(request) as session:  # see transaction(): the busiest page route
        found = raters.authenticate_in_study(session=session, slug=slug, token=token)
        if found is None:
            project = raters.project_by_slug(session=session, slug=slug)
            # htmx swaps only 2xx answers in; the message must reach the rater's screen.
            status_code = 200 if request.headers.get("HX-Request") else 401
            return _page(
                request, "rate/_expired.html", {"project": project, "slug": slug}, status_code
            )
        project, rater = found
        try:
            state = rating.answer(
                session=session,
                project=project,
                rater=rater,
                assignment_id=query_id,
                choice=choice,
                picks=picks,
                sides=sides,
                response_time_ms=elapsed,
                draws=draws,
                plays=plays,
            )
        except Unprocessable as wrong:
            # The same screen again, saying what to pick (a form sent without scripts).
            roll_back(session)
            state = rating.state(session=session, project=project, rater=rater, draws=draws)
            context = {**_comparison_context(project, state, slug), "problem": str(wrong)}
            if request.headers.get("HX-Request"):
                return _page(request, "rate/_comparison.html", context)
            return _page(request, "rate/rate.html", context, status_code=422)
    return _answered(request, slug, project, state)


def _answered(request: Request, slug: str, project, state: rating.RaterState) -> Response:
    if request.headers.get("HX-Request"):
        return _page(request, "rate/_comparison.html", _comparison_context(project, state, slug))
    after = "?after=practice" if state.feedback is not None else ""
    return RedirectResponse(request.url_for("rate_page", slug=slug).path + after, status_code=303)


@router.get(MEDIA + "/{filename}", name="rater_media")
def media(slug: str, filename: str, request: Request, session: SessionDep, project: RatedProject):
    """An image of this study's items (and of no other project)."""
    owned = session.scalar(
        select(Item.image_type)
        .where(Item.project_id == project.id, Item.image_file == filename)
        .limit(1)
    )
    if owned is None:
        raise NotFound(f"no image {filename} in this study")
    path = request.app.state.images.path(project.id, filename)
    return FileResponse(
        path,
        media_type=owned,
        headers={"Cache-Control": "public, max-age=31536000, immutable"},
    )


def not_found_page(request: Request, exc: NotFound) -> Response:
    return _page(request, "rate/missing.html", {"message": exc.detail}, status_code=404)
