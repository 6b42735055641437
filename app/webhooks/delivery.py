"""Sending the deliveries: each is claimed for a lease (another worker leaves it alone
meanwhile), posted signed per Standard Webhooks (webhook-id, webhook-timestamp,
webhook-signature: HMAC-SHA256 over id, timestamp and body), and recorded. A failure is
tried again after the next wait of the schedule, then given up. A worker killed between
the post and the record leaves the lease to run out, and the delivery is sent again with
the same webhook-id: at least once, as the convention expects receivers to handle."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from datetime import timedelta
from urllib.parse import urlsplit

import httpx
from sqlalchemy import select, update
from sqlalchemy.orm import Session, sessionmaker
from standardwebhooks.webhooks import Webhook as Signer

from app.core.db import rows_changed, unit_of_work
from app.models import Webhook, WebhookDelivery
from app.models._types import utcnow
from app.webhooks.service import PRIVATE_REFUSED, private_address

LEASE_SECONDS = 60.0  # CLOSER_WEBHOOK_LEASE_SECONDS' default
POST_SECONDS = 10.0
AT_ONCE = 20


def retry_schedule(text: str) -> tuple[float, ...]:
    """CLOSER_WEBHOOK_RETRY_SECONDS as seconds, e.g. "5,30,120"."""
    return tuple(float(part) for part in text.split(",") if part.strip())


def anything_due(session: Session) -> bool:
    now = utcnow()
    return bool(
        session.scalar(
            select(WebhookDelivery.id).where(WebhookDelivery.next_attempt_at <= now).limit(1)
        )
    )


def _claimed(sessions: sessionmaker[Session], lease_seconds: float = LEASE_SECONDS) -> list[int]:
    """Deliveries due now, each now this worker's until its lease runs out."""
    with unit_of_work(sessions) as session:
        now = utcnow()
        due = session.scalars(
            select(WebhookDelivery.id)
            .where(WebhookDelivery.next_attempt_at <= now)
            .order_by(WebhookDelivery.next_attempt_at, WebhookDelivery.id)
            .limit(AT_ONCE)
        ).all()
        mine = []
        for delivery_id in due:
            taken = session.execute(
                update(WebhookDelivery)
                .where(WebhookDelivery.id == delivery_id, WebhookDelivery.next_attempt_at <= now)
                .values(
                    next_attempt_at=now + timedelta(seconds=lease_seconds),
                    attempts=WebhookDelivery.attempts + 1,
                )
            )
            if rows_changed(taken):
                mine.append(delivery_id)
        return mine


def signed_request(hook: Webhook, delivery: WebhookDelivery) -> tuple[bytes, dict[str, str]]:
    """The body and headers of a delivery, the same on every attempt but the time."""
    body = json.dumps(delivery.payload, separators=(",", ":"), sort_keys=True).encode()
    moment = utcnow().replace(microsecond=0)
    return body, {
        "content-type": "application/json",
        "user-agent": "Closer-Webhooks",
        "webhook-id": delivery.message_id,
        "webhook-timestamp": str(int(moment.timestamp())),
        "webhook-signature": Signer(hook.secret).sign(delivery.message_id, moment, body),
    }


def _post(client: httpx.Client, hook: Webhook, delivery: WebhookDelivery, reach_private: bool):
    body, headers = signed_request(hook, delivery)
    started = time.perf_counter()
    if not reach_private:
        inside = private_address(urlsplit(hook.url).hostname or "")
        if inside:
            return None, f"not sent: {inside}; {PRIVATE_REFUSED}", started
    try:
        response = client.post(hook.url, content=body, headers=headers)
    except httpx.HTTPError as failed:
        return None, f"{type(failed).__name__}: {failed}"[:500], started
    # The status only, never the body: the log must not read other servers' pages.
    error = "" if response.is_success else f"HTTP {response.status_code} {response.reason_phrase}"
    return response.status_code, error[:200], started


def deliver_due(
    sessions: sessionmaker[Session],
    retry_seconds: Sequence[float],
    lease_seconds: float = LEASE_SECONDS,
    reach_private: bool = True,
) -> int:
    """Send what is due; how many were delivered."""
    delivered = 0
    claimed = _claimed(sessions, lease_seconds)
    if not claimed:
        return 0
    with httpx.Client(timeout=POST_SECONDS, follow_redirects=False) as client:
        for delivery_id in claimed:
            with sessions() as session:
                delivery = session.get(WebhookDelivery, delivery_id)
                hook = None if delivery is None else session.get(Webhook, delivery.webhook_id)
                if delivery is None or hook is None:
                    continue
                session.expunge_all()
            status, error, started = _post(client, hook, delivery, reach_private)
            took = round((time.perf_counter() - started) * 1000)
            with unit_of_work(sessions) as session:
                row = session.get(WebhookDelivery, delivery_id)
                if row is None:  # its webhook was deleted meanwhile
                    continue
                row.last_status, row.last_error, row.last_duration_ms = status, error, took
                now = utcnow()
                if not error:
                    row.delivered_at, row.next_attempt_at = now, None
                    delivered += 1
                elif row.attempts > len(retry_seconds):
                    row.failed_at, row.next_attempt_at = now, None
                else:
                    wait = retry_seconds[row.attempts - 1]
                    row.next_attempt_at = now + timedelta(seconds=wait)
    return delivered
