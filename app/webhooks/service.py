"""A project's webhooks: what each is sent (the events), and the deliveries the worker
writes as it finds the events in the project's own rows, for each webhook made before
they happened. Finding an event and writing its delivery are one transaction, and a
delivery is unique per webhook, event and subject: found twice, it is sent once."""

from __future__ import annotations

import base64
import ipaddress
import secrets
import socket
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

from sqlalchemy import ColumnElement, String, cast, exists, literal, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app.core.errors import NotFound, Unprocessable
from app.models import (
    Build,
    BuildStatus,
    LearnedModel,
    ModelVersion,
    Project,
    Rater,
    Researcher,
    VersionStatus,
    Webhook,
    WebhookDelivery,
)
from app.models._types import utcnow
from app.raters import places

EVENTS = {
    "participant.completed": "a participant finished the study (their completion code shown)",
    "participant.screened_out": "a participant was screened out (attention checks or practice)",
    "build.completed": "a CompRF build asked its last query and grew its forest",
    "model.ready": "a model's new version is fitted and served",
    "study.full": "the study's quota of places is taken",
}
MAX_HOOKS_PER_PROJECT = 20
# Events found a scan at most, per webhook and event (the rest come the next scan).
SCAN_MOST = 500


def _secret() -> str:
    return "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode()


def _checked_secret(secret: str) -> str:
    key = secret.removeprefix("whsec_")
    try:
        raw = base64.b64decode(key, validate=True)
    except ValueError:
        raw = b""
    if not secret.startswith("whsec_") or not 24 <= len(raw) <= 64:
        raise Unprocessable(
            "secret: give 'whsec_' and the base64 of 24 to 64 random bytes (Standard "
            "Webhooks' form), or leave it out for one made here"
        )
    return secret


def _checked_url(url: str, reach_private: bool) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname or len(url) > 2000:
        raise Unprocessable(
            f"url: '{url[:80]}' is not an http(s) address a delivery could be posted to"
        )
    inside = private_address(parts.hostname, resolve=False)
    if inside and not reach_private:
        raise Unprocessable(f"url: {inside}; {PRIVATE_REFUSED}")
    return url


PRIVATE_REFUSED = "webhooks here post only to public addresses (CLOSER_WEBHOOK_PRIVATE_ADDRESSES)"


def private_address(host: str, resolve: bool = True) -> str | None:
    """Why `host` is inside this network (a loopback, private, link-local or reserved
    address, or a name that resolves to one), else None. `resolve=False`: addresses
    given as such only."""
    try:
        found = [ipaddress.ip_address(host.strip("[]"))]
    except ValueError:
        if not resolve:
            return None
        try:
            found = [
                ipaddress.ip_address(str(info[4][0]).split("%")[0])
                for info in socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
            ]
        except (OSError, UnicodeError):
            return f"{host} does not resolve"
    for address in found:
        if not address.is_global:
            return f"{host} is {address}, an address inside this network"
    return None


def _checked_events(events: list[str]) -> list[str]:
    unknown = [event for event in events if event not in EVENTS]
    if unknown or not events:
        raise Unprocessable(
            f"events: {', '.join(repr(e[:40]) for e in unknown) or 'none given'}; "
            f"choose among {', '.join(EVENTS)}"
        )
    return sorted(set(events))


def create(
    *,
    session: Session,
    project: Project,
    researcher: Researcher,
    url: str,
    events: list[str],
    secret: str | None,
    reach_private: bool = True,
) -> Webhook:
    if len(list_hooks(session=session, project=project)) >= MAX_HOOKS_PER_PROJECT:
        raise Unprocessable(f"a project has at most {MAX_HOOKS_PER_PROJECT} webhooks")
    hook = Webhook(
        project_id=project.id,
        url=_checked_url(url.strip(), reach_private),
        events=_checked_events(events),
        secret=_checked_secret(secret) if secret is not None else _secret(),
        created_by=researcher.id,
    )
    session.add(hook)
    session.flush()
    return hook


def list_hooks(*, session: Session, project: Project) -> list[Webhook]:
    return list(
        session.scalars(
            select(Webhook).where(Webhook.project_id == project.id).order_by(Webhook.id)
        )
    )


def get_hook(*, session: Session, project: Project, hook_id: int) -> Webhook:
    hook = session.get(Webhook, hook_id)
    if hook is None or hook.project_id != project.id:
        raise NotFound(f"no webhook {hook_id} in this project")
    return hook


def delete_hook(*, session: Session, project: Project, hook_id: int) -> None:
    """Nothing more is sent to it, retries included (its deliveries go with it)."""
    session.delete(get_hook(session=session, project=project, hook_id=hook_id))


def deliveries(*, session: Session, hook: Webhook, limit: int = 100) -> list[WebhookDelivery]:
    return list(
        session.scalars(
            select(WebhookDelivery)
            .where(WebhookDelivery.webhook_id == hook.id)
            .order_by(WebhookDelivery.id.desc())
            .limit(limit)
        )
    )


# Each event's finder: (subject, data) of the events of the hook's project since it was
# made, not delivered to it yet.
Found = Iterator[tuple[str, dict[str, Any]]]


def _undelivered(hook: Webhook, event: str, subject):
    return ~exists().where(
        WebhookDelivery.webhook_id == hook.id,
        WebhookDelivery.event == event,
        WebhookDelivery.subject == cast(subject, String),
    )


def _moment(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat()


def _raters(
    session: Session, hook: Webhook, project: Project, event: str, when: ColumnElement[bool]
) -> list[Rater]:
    """The project's raters for whom `when` holds since the hook was made, not yet sent."""
    return list(
        session.scalars(
            select(Rater)
            .where(Rater.project_id == project.id, when, _undelivered(hook, event, Rater.id))
            .order_by(Rater.id)
            .limit(SCAN_MOST)
        )
    )


def _who(rater: Rater) -> dict[str, Any]:
    return {
        "participant": rater.external_id,
        "platform": rater.platform,
        "rater_id": rater.id,
        "arm": rater.arm,
    }


def _completed(session: Session, hook: Webhook, project: Project) -> Found:
    since = Rater.completed_at >= hook.created_at
    for rater in _raters(session, hook, project, "participant.completed", since):
        yield (
            str(rater.id),
            {
                **_who(rater),
                "answers": rater.answers,
                "completed_at": _moment(rater.completed_at),
                "completion_code": project.completion_code,
            },
        )


def _screened_out(session: Session, hook: Webhook, project: Project) -> Found:
    since = (Rater.screened_out_at >= hook.created_at) | (
        Rater.practice_failed_at >= hook.created_at
    )
    for rater in _raters(session, hook, project, "participant.screened_out", since):
        yield (
            str(rater.id),
            {
                **_who(rater),
                "reason": "failed_practice" if rater.practice_failed_at else "failed_attention",
                "screened_out_at": _moment(rater.screened_out_at or rater.practice_failed_at),
            },
        )


def _builds(session: Session, hook: Webhook, project: Project) -> Found:
    rows = session.scalars(
        select(Build)
        .where(
            Build.project_id == project.id,
            Build.status == BuildStatus.complete,
            Build.updated_at >= hook.created_at,
            _undelivered(hook, "build.completed", Build.id),
        )
        .limit(SCAN_MOST)
    )
    for build in rows:
        yield str(build.id), {"build_id": build.id, "completed_at": _moment(build.updated_at)}


def _versions(session: Session, hook: Webhook, project: Project) -> Found:
    rows = session.execute(
        select(ModelVersion, LearnedModel)
        .join(LearnedModel, LearnedModel.id == ModelVersion.model_id)
        .where(
            LearnedModel.project_id == project.id,
            ModelVersion.status == VersionStatus.ready,
            ModelVersion.fitted_at >= hook.created_at,
            _undelivered(hook, "model.ready", ModelVersion.id),
        )
        .limit(SCAN_MOST)
    )
    for version, model in rows:
        yield (
            str(version.id),
            {
                "model_id": model.id,
                "model": model.name,
                "kind": model.kind.value,
                "version": version.number,
                "answers": version.answers_count,
                "metrics": version.metrics,
                "fitted_at": _moment(version.fitted_at),
            },
        )


def _full(session: Session, hook: Webhook, project: Project) -> Found:
    if project.quota is None:
        return
    subject = f"quota-{project.quota}"  # full again after a raised quota: a new event
    new = session.scalar(select(_undelivered(hook, "study.full", literal(subject))))
    if new and places.taken(session=session, project=project) >= project.quota:
        yield subject, {"quota": project.quota}


FINDERS: dict[str, Callable[[Session, Webhook, Project], Found]] = {
    "participant.completed": _completed,
    "participant.screened_out": _screened_out,
    "build.completed": _builds,
    "model.ready": _versions,
    "study.full": _full,
}


def find_events(session: Session) -> int:
    """Write a delivery for each event found since each webhook was made and not yet
    written; how many. A delivery another worker wrote meanwhile is left to it."""
    written = 0
    for hook in session.scalars(select(Webhook).order_by(Webhook.id)).all():
        project = session.get(Project, hook.project_id)
        if project is None:
            continue
        for event in hook.events:
            for subject, data in FINDERS[event](session, hook, project):
                now = utcnow()
                message = WebhookDelivery(
                    webhook_id=hook.id,
                    event=event,
                    subject=subject,
                    message_id=f"msg_{secrets.token_urlsafe(18)}",
                    payload={
                        "type": event,
                        "timestamp": now.isoformat(),
                        "data": {"project_id": project.id, **data},
                    },
                    created_at=now,
                    next_attempt_at=now,
                )
                try:
                    with session.begin_nested():
                        session.add(message)
                except IntegrityError:
                    continue
                written += 1
    return written
