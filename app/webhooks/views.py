"""The Webhooks page: a project's webhooks, made and deleted there, each with its
delivery log."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from app.auth.access import Action
from app.auth.deps import ChangingPage, ViewingPage
from app.core.db import roll_back
from app.core.deps import SessionDep
from app.core.errors import ServiceError
from app.core.fields import RowId
from app.core.forms import SENT_AGAIN, remember_sent, sent_before
from app.core.pages import render as page
from app.core.routes import StrictJSONRoute
from app.models import Project, Researcher
from app.projects.service import get_project
from app.webhooks import service

router = APIRouter(include_in_schema=False, route_class=StrictJSONRoute)
LOG_ROWS = 20


def _page(
    request: Request,
    session,
    researcher: Researcher,
    project: Project,
    *,
    error: str | None = None,
    made: tuple[int, str] | None = None,
    form: dict | None = None,
    status_code: int = 200,
) -> HTMLResponse:
    caller = request.state.caller
    hooks = service.list_hooks(session=session, project=project)
    shows_log = caller.may(Action.identify)
    return page(
        request,
        "webhooks/webhooks.html",
        {
            "researcher": researcher,
            "project": project,
            "tab": "webhooks",
            "hooks": [
                (
                    hook,
                    service.deliveries(session=session, hook=hook, limit=LOG_ROWS)
                    if shows_log
                    else [],
                )
                for hook in hooks
            ],
            "events": service.EVENTS,
            "changes": caller.may(Action.change),
            "shows_log": shows_log,
            "error": error,
            "made": made,
            "form": form or {"url": "", "events": []},
        },
        status_code,
    )


@router.get("/projects/{project_id}/webhooks", response_class=HTMLResponse, name="webhooks_page")
def webhooks_page(
    project_id: RowId, request: Request, session: SessionDep, researcher: ViewingPage
):
    project = get_project(session=session, researcher=researcher, project_id=project_id)
    return _page(request, session, researcher, project)


@router.post("/projects/{project_id}/webhooks", response_class=HTMLResponse)
def create_webhook_form(
    project_id: RowId,
    request: Request,
    session: SessionDep,
    researcher: ChangingPage,
    url: Annotated[str, Form(max_length=2000)] = "",
    events: Annotated[list[str] | None, Form()] = None,
    form_id: Annotated[str, Form(max_length=40)] = "",
):
    project = get_project(session=session, researcher=researcher, project_id=project_id)
    chosen = [event[:40] for event in (events or [])[: len(service.EVENTS) + 1]]
    if sent_before(request, form_id):
        return _page(
            request,
            session,
            researcher,
            project,
            error=SENT_AGAIN,
            form={"url": url, "events": chosen},
            status_code=409,
        )
    try:
        hook = service.create(
            session=session,
            project=project,
            researcher=researcher,
            url=url,
            events=chosen,
            secret=None,
            reach_private=request.app.state.settings.webhooks_reach_private,
        )
    except ServiceError as refused:
        roll_back(session)
        return _page(
            request,
            session,
            researcher,
            project,
            error=str(refused.detail),
            form={"url": url, "events": chosen},
            status_code=422,
        )
    response = _page(request, session, researcher, project, made=(hook.id, hook.secret))
    response.headers["Cache-Control"] = "no-store"
    remember_sent(request, response, form_id)
    return response


@router.post("/projects/{project_id}/webhooks/{webhook_id}/delete", name="delete_webhook_form")
def delete_webhook_form(
    project_id: RowId,
    webhook_id: RowId,
    request: Request,
    session: SessionDep,
    researcher: ChangingPage,
) -> Response:
    project = get_project(session=session, researcher=researcher, project_id=project_id)
    service.delete_hook(session=session, project=project, hook_id=webhook_id)
    return RedirectResponse(
        request.url_for("webhooks_page", project_id=project.id).path, status_code=303
    )
