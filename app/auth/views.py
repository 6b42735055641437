"""Signing in to the workspace (email and password, or an API token), signing out, and
the page where a researcher manages their API tokens."""

from __future__ import annotations

from datetime import date
from typing import Annotated

from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool

from app.auth import service as auth
from app.auth.access import SCOPE_SUMMARIES, Action, Caller
from app.auth.api import issue_requested
from app.auth.deps import ManagingAccountPage
from app.auth.password_checks import SignInsBusy
from app.auth.schemas import TokenCreate
from app.core.db import roll_back
from app.core.deps import (
    SESSION_COOKIE,
    SIGN_IN_NONCE_COOKIE,
    CsrfChecked,
    SessionDep,
    hand_cookie,
    transaction,
    workspace_session_key,
)
from app.core.errors import ServiceError, Unprocessable
from app.core.fields import RowId
from app.core.forms import SENT_AGAIN, remember_sent, sent_before
from app.core.pages import render as page
from app.core.routes import StrictJSONRoute
from app.models import Researcher, TokenScope
from app.models._types import utcnow
from app.projects.service import list_projects

router = APIRouter(include_in_schema=False, route_class=StrictJSONRoute)
SESSION_DAYS = 14
SIGN_IN_LINK_HOURS = 24
# A browser that signed in with a password is known to its account for a year.
DEVICE_COOKIE = "closer_device"
DEVICE_DAYS = 365
WRONG_PASSWORD = "Wrong email or password."


def _next_path(value: str | None) -> str:
    """Where to go after signing in: a path on this site, never another site."""
    if value and value.startswith("/") and not value.startswith(("//", "/\\")):
        return value[:2000]
    return "/"


def _sign_in_page(
    request: Request, *, error: str | None = None, email: str = "", status_code: int = 200
) -> HTMLResponse:
    return anonymous_form_page(
        request,
        "auth/login.html",
        {
            "error": error,
            "email": email,
            "next": _next_path(request.query_params.get("next")),
            "signed_out_everywhere": request.query_params.get("signed_out") == "everywhere",
        },
        status_code,
    )


def anonymous_form_page(
    request: Request, template: str, context: dict, status_code: int = 200
) -> HTMLResponse:
    """A page whose form a browser that is not signed in posts (signing in, signing up
    by an invitation), its CSRF token derived from a nonce cookie."""
    cookies = request.app.state.workspace_cookies
    held = cookies.nonce(request.cookies.get(SIGN_IN_NONCE_COOKIE))
    fresh = None if held else cookies.new_nonce()
    # The form's token comes from the nonce, also for a browser still sending the cookie
    # of a session that has ended (signed out elsewhere, a new password, idle too long):
    # that cookie goes below, so the form's post is checked against the nonce too. A new
    # nonce is the browser's only once the response arrives: the form carries its token.
    request.state.csrf_anchor = held or cookies.nonce(fresh)
    response = page(request, template, context, status_code)
    if request.cookies.get(SESSION_COOKIE) is not None:
        response.delete_cookie(SESSION_COOKIE, path="/")
    if fresh is not None:
        hand_cookie(request, response, SIGN_IN_NONCE_COOKIE, fresh)
    return response


def signed_in_redirect(request: Request, key: str, next_path: str) -> RedirectResponse:
    """To `next_path`, with the cookie of the session `key` opened."""
    response = RedirectResponse(next_path, status_code=303)
    cookies = request.app.state.workspace_cookies
    hand_cookie(request, response, SESSION_COOKIE, cookies.sign_session(key), SESSION_DAYS * 86_400)
    response.delete_cookie(SIGN_IN_NONCE_COOKIE, path="/")
    return response


@router.get("/login", response_class=HTMLResponse, name="login")
def sign_in_page(request: Request, session: SessionDep):
    key = workspace_session_key(request)
    if key is not None and auth.web_session_caller(session=session, key=key) is not None:
        return RedirectResponse(_next_path(request.query_params.get("next")), status_code=303)
    return _sign_in_page(request)


@router.post("/login", response_class=HTMLResponse)
async def sign_in(
    request: Request,
    _csrf: CsrfChecked,
    email: Annotated[str, Form(max_length=254)] = "",
    password: Annotated[str, Form(max_length=auth.MAX_PASSWORD_LENGTH)] = "",
    token: Annotated[str, Form(max_length=200)] = "",
    next: Annotated[str, Form(max_length=2000)] = "/",
):
    try:
        await request.app.state.throttle.sign_in(request)
    except ServiceError as refused:
        response = _sign_in_page(
            request, error=str(refused.detail), email=email, status_code=refused.status_code
        )
        response.headers.update(getattr(refused, "headers", None) or {})
        return response
    # A token is a hash lookup; a password check takes its turn (app/auth/password_checks).
    signed_in_as: int | None = None  # the account a password signed in to
    try:
        if token.strip():
            key = await run_in_threadpool(_open_session, request, email, password, token)
        else:
            key, signed_in_as = await _password_sign_in(request, email, password)
    except SignInsBusy as busy:
        response = _sign_in_page(
            request, error=str(busy.detail), email=email, status_code=busy.status_code
        )
        response.headers.update(busy.headers)
        return response
    except ServiceError as refused:
        return _sign_in_page(request, error=str(refused.detail), email=email, status_code=400)
    signed_in = signed_in_redirect(request, key, _next_path(next))
    if signed_in_as is not None:
        device = request.app.state.workspace_cookies.sign_device(signed_in_as)
        hand_cookie(request, signed_in, DEVICE_COOKIE, device, DEVICE_DAYS * 86_400, "/login")
    return signed_in


async def _password_sign_in(request: Request, email: str, password: str) -> tuple[str, int]:
    """The new session's key and its researcher, for a password that holds; an attempt
    on no account waits as long as a check would, without one."""
    if not password:
        raise ServiceError(WRONG_PASSWORD)
    checks = request.app.state.password_checks
    account = await run_in_threadpool(_password_account, request, email)
    if account is None:
        await checks.pretend()
        raise ServiceError(WRONG_PASSWORD)
    known = request.app.state.workspace_cookies.device_researcher(
        request.cookies.get(DEVICE_COOKIE), DEVICE_DAYS * 86_400
    )
    async with checks.slot(account, trusted=known == account):
        key = await run_in_threadpool(_open_session, request, email, password, "")
    return key, account  # (the email's account: the one check_password signed in)


def _password_account(request: Request, email: str) -> int | None:
    with transaction(request) as session:
        return auth.password_account(session=session, email=email)


def _open_session(request: Request, email: str, password: str, token: str) -> str:
    """The new session's key; a ServiceError says why none opens."""
    with transaction(request) as session:
        if token.strip():
            try:
                caller = auth.token_caller(session=session, token=token.strip())
            except auth.Unauthenticated as refused:
                why = str(refused.detail)
                raise ServiceError(
                    f"That token {why.removeprefix('this token ')}."
                    if why.startswith("this token")
                    else "That token is not a live API token."
                ) from None
            if not caller.may(Action.view):
                raise ServiceError(
                    f"A '{caller.scope.value}' token does not sign in to the workspace: it "
                    f"serves {SCOPE_SUMMARIES[caller.scope]} only. Sign in with a read, "
                    "write or admin token, or with your email and password."
                )
            return auth.open_web_session(
                session=session, researcher=caller.researcher, api_token=caller.token
            )
        researcher = auth.check_password(session=session, email=email, password=password)
        if researcher is None:
            raise ServiceError(WRONG_PASSWORD)
        return auth.open_web_session(session=session, researcher=researcher)


@router.get("/login/link", name="sign_in_link")
def sign_in_link(request: Request, session: SessionDep, key: str = ""):
    """The link `closer serve` prints on the embedded default: signs this browser in as
    the local admin (it is as secret as the server's console)."""
    cookies = request.app.state.workspace_cookies
    researcher_id, made_at, refused = cookies.sign_in_link_researcher(
        key, SIGN_IN_LINK_HOURS * 3600
    )
    researcher = session.get(Researcher, researcher_id) if researcher_id is not None else None
    if researcher is not None and not auth.use_sign_in_link(
        session=session, researcher=researcher, made_at=made_at
    ):
        researcher, refused = None, "used"
    if researcher is None:
        why = {
            "expired": f"That sign-in link has expired (a link lasts {SIGN_IN_LINK_HOURS} hours)"
            ": restart the server for a new one, or sign in below.",
            "broken": "That sign-in link is not whole: it was cut short or changed on the way. "
            "Copy the whole link from the server's console, or sign in below.",
            "used": "That sign-in link has been used already: a link signs in once. "
            "Restart the server for a new one, or sign in below.",
        }.get(refused, "That sign-in link's account no longer exists: sign in below.")
        return _sign_in_page(request, error=why, status_code=400)
    return signed_in_redirect(
        request, auth.open_web_session(session=session, researcher=researcher), "/"
    )


@router.post("/logout")
def sign_out(request: Request, session: SessionDep, _csrf: CsrfChecked):
    key = workspace_session_key(request)
    if key is not None:
        auth.close_web_session(session=session, key=key)
    response = RedirectResponse("/login", status_code=303)
    response.delete_cookie(SESSION_COOKIE, path="/")
    return response


@router.post("/logout/everywhere", name="sign_out_everywhere")
def sign_out_everywhere(
    request: Request, session: SessionDep, caller: ManagingAccountPage, _csrf: CsrfChecked
):
    """Every browser signed in as this researcher is signed out, this one too, and the
    tokens made in those browsers are revoked (someone who got into one may have made a
    token to stay in); tokens made otherwise stay: revoke those one by one."""
    auth.sign_out_everywhere(session=session, researcher=caller.researcher)
    response = RedirectResponse("/login?signed_out=everywhere", status_code=303)
    response.delete_cookie(SESSION_COOKIE, path="/")
    return response


@router.get("/tokens", response_class=HTMLResponse, name="tokens")
def tokens_page(request: Request, session: SessionDep, caller: ManagingAccountPage):
    return _tokens_page(request, session, caller)


def _tokens_page(
    request: Request,
    session,
    caller: Caller,
    *,
    new_token: str | None = None,
    form: dict | None = None,
    error: str | None = None,
    status_code: int = 200,
) -> HTMLResponse:
    researcher = caller.researcher
    projects = list_projects(session=session, researcher=researcher, only=caller.project_ids)
    now = utcnow()
    context = {
        "researcher": researcher,
        "tokens": [
            (token, reach, auth.token_status(token, now))
            for token, reach in auth.list_tokens(session=session, caller=caller)
        ],
        "projects": projects,
        "project_names": {project.id: project.name for project in projects},
        "scopes": [(scope.value, SCOPE_SUMMARIES[scope]) for scope in TokenScope],
        "browsers": auth.count_web_sessions(session=session, researcher=researcher),
        "made_in_browsers": auth.tokens_made_in_browsers(session=session, researcher=researcher),
        "new_token": new_token,
        "form": form or {},
        "error": error,
    }
    return page(request, "auth/tokens.html", context, status_code)


@router.post("/tokens", response_class=HTMLResponse)
async def create_token(request: Request, session: SessionDep, caller: ManagingAccountPage):
    submitted = await request.form()
    form = {
        "name": str(submitted.get("name", ""))[:200],
        "scope": str(submitted.get("scope", ""))[:20],
        "reach": str(submitted.get("reach", "all"))[:10],
        "projects": [str(value)[:12] for value in submitted.getlist("projects")[:1000]],
        "expires": str(submitted.get("expires", ""))[:40],
    }
    form_id = str(submitted.get("form_id", ""))[:40]
    if sent_before(request, form_id):
        return _tokens_page(request, session, caller, form=form, error=SENT_AGAIN, status_code=409)
    try:
        plain, _ = issue_requested(session, caller, _token_request(form))
    except ServiceError as refused:
        roll_back(session)
        return _tokens_page(
            request,
            session,
            caller,
            form=form,
            error=str(refused.detail),
            status_code=refused.status_code,
        )
    # The page shows the token this once; only its hash is kept.
    response = _tokens_page(request, session, caller, new_token=plain, status_code=201)
    response.headers["Cache-Control"] = "no-store"
    remember_sent(request, response, form_id)
    return response


def _token_request(form: dict) -> TokenCreate:
    """The form's fields as the API's request, with the same checks; an expiry date is
    the end of that day, UTC."""
    if form["scope"] not in {scope.value for scope in TokenScope}:
        raise Unprocessable("Choose what the token may do: predict, read, write or admin.")
    projects = None
    if form["reach"] == "some":
        if not form["projects"]:
            raise Unprocessable("Tick the projects the token may touch, or choose all projects.")
        if not all(value.isdigit() for value in form["projects"]):
            raise Unprocessable("projects: not a list of project ids")
        projects = [int(value) for value in form["projects"]]
    expires_at = None
    if form["expires"].strip():
        try:
            day = date.fromisoformat(form["expires"].strip())
        except ValueError:
            raise Unprocessable(
                f"Expires: '{form['expires'][:20]}' is not a date (YYYY-MM-DD)"
            ) from None
        expires_at = auth.end_of_day(day)
    try:
        return TokenCreate(
            name=form["name"], scope=form["scope"], projects=projects, expires_at=expires_at
        )
    except ValidationError as invalid:
        first = invalid.errors()[0]
        raise Unprocessable(f"{first['loc'][0]}: {first['msg']}") from None


@router.post("/tokens/{token_id}/revoke", name="revoke_token_form")
def revoke_token(
    token_id: RowId, request: Request, session: SessionDep, caller: ManagingAccountPage
) -> Response:
    token = auth.own_token(session=session, caller=caller, token_id=token_id)
    auth.revoke_token(session=session, token=token)
    return RedirectResponse(request.url_for("tokens").path, status_code=303)
