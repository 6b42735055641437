"""The worker's side of the webhooks: find new events beside any job in hand (a
participant's completion must not wait for a fit of minutes), and send what is due from a
thread of its own, so that a slow receiver (10 s a post) never holds up the rest of the
upkeep, the answers' proposals and the job's heartbeat among it."""

from __future__ import annotations

import threading

from app.core.config import get_settings
from app.core.db import unit_of_work
from app.webhooks import delivery, service
from app.worker.loop import periodic

WEBHOOK_SECONDS = 2.0

_sending: dict[str, threading.Thread] = {}
_sending_lock = threading.Lock()


@periodic(WEBHOOK_SECONDS, alongside_jobs=True)
def send_webhooks(sessions) -> None:
    with unit_of_work(sessions) as session:
        service.find_events(session)
        due = delivery.anything_due(session)
    if due:
        _send_beside(sessions)


def _send_beside(sessions) -> None:
    """One pass of sending in the sender thread, unless one is under way."""
    with _sending_lock:
        running = _sending.get("thread")
        if running is not None and running.is_alive():
            return
        settings = get_settings()
        thread = threading.Thread(
            target=delivery.deliver_due,
            args=(
                sessions,
                delivery.retry_schedule(settings.webhook_retry_seconds),
                settings.webhook_lease_seconds,
                settings.webhooks_reach_private,
            ),
            name="closer-webhooks",
            daemon=True,
        )
        _sending["thread"] = thread
        thread.start()
