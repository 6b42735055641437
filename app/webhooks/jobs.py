"""The worker's side of the webhooks: find new events, and send what is due, beside any
job in hand (a participant's completion must not wait for a fit of minutes)."""

from __future__ import annotations

from app.core.config import get_settings
from app.core.db import unit_of_work
from app.webhooks import delivery, service
from app.worker.loop import periodic

WEBHOOK_SECONDS = 2.0


@periodic(WEBHOOK_SECONDS, alongside_jobs=True)
def send_webhooks(sessions) -> None:
    with unit_of_work(sessions) as session:
        service.find_events(session)
    settings = get_settings()
    schedule = delivery.retry_schedule(settings.webhook_retry_seconds)
    delivery.deliver_due(
        sessions, schedule, settings.webhook_lease_seconds, settings.webhooks_reach_private
    )
