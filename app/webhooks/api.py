"""A project's webhooks over REST: made (with the events they are sent and their
signing key), listed, deleted, and each one's delivery log."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request, Response, status

from app.auth.deps import Changing, Identifying, Viewing
from app.core.deps import SessionDep
from app.core.fields import RowId
from app.core.routes import StrictJSONRoute
from app.projects.service import get_project
from app.webhooks import service
from app.webhooks.schemas import DeliveryOut, WebhookCreate, WebhookCreated, WebhookOut

router = APIRouter(
    prefix="/projects/{project_id}/webhooks", tags=["webhooks"], route_class=StrictJSONRoute
)


@router.post("", status_code=status.HTTP_201_CREATED, response_model=WebhookCreated)
def create_webhook(
    project_id: RowId,
    body: WebhookCreate,
    request: Request,
    response: Response,
    session: SessionDep,
    researcher: Changing,
):
    """A webhook: each event of these kinds from now on is posted to the URL, signed per
    Standard Webhooks with the secret (shown this once), retried with backoff until it
    is taken (any 2xx)."""
    project = get_project(session=session, researcher=researcher, project_id=project_id)
    hook = service.create(
        session=session,
        project=project,
        researcher=researcher,
        url=body.url,
        events=body.events,
        secret=body.secret,
        reach_private=request.app.state.settings.webhooks_reach_private,
    )
    response.headers["Cache-Control"] = "no-store"
    return WebhookCreated(**WebhookOut.model_validate(hook).model_dump(), secret=hook.secret)


@router.get("", response_model=list[WebhookOut])
def list_webhooks(project_id: RowId, session: SessionDep, researcher: Viewing):
    project = get_project(session=session, researcher=researcher, project_id=project_id)
    return service.list_hooks(session=session, project=project)


@router.delete("/{webhook_id}", status_code=status.HTTP_204_NO_CONTENT)
def delete_webhook(
    project_id: RowId, webhook_id: RowId, session: SessionDep, researcher: Changing
) -> Response:
    """Nothing more is sent to it, retries included."""
    project = get_project(session=session, researcher=researcher, project_id=project_id)
    service.delete_hook(session=session, project=project, hook_id=webhook_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.get("/{webhook_id}/deliveries", response_model=list[DeliveryOut])
def list_deliveries(
    project_id: RowId,
    webhook_id: RowId,
    session: SessionDep,
    researcher: Identifying,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
):
    """Its deliveries, newest first: each event's message (which names participants),
    attempts and last outcome."""
    project = get_project(session=session, researcher=researcher, project_id=project_id)
    hook = service.get_hook(session=session, project=project, hook_id=webhook_id)
    return service.deliveries(session=session, hook=hook, limit=limit)
