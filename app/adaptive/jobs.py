"""The worker's side of the scheduler: keep each project's proposals (the samplers'
questions, app/adaptive/proposals.py) fresh after every fit and topped up, while
someone rates."""

from __future__ import annotations

import logging

from app.adaptive import proposals
from app.core import caches
from app.core.db import unit_of_work
from app.worker.loop import periodic

PROPOSE_SECONDS = 1.0  # a busy study drains a batch of proposals in seconds

log = logging.getLogger(__name__)


def refresher() -> proposals.Refresher:
    """When this process last refreshed each project's proposals."""
    return caches.current().get("adaptive.refresher", proposals.Refresher)


# Beside a fit too: a crowd of hundreds a second drains a batch while one fit runs.
@periodic(PROPOSE_SECONDS, alongside_jobs=True)
def refresh_proposals(sessions) -> None:
    with unit_of_work(sessions) as session:
        standings = proposals.standings(session)
    for standing in standings:
        if not refresher().due(standing):
            continue
        with unit_of_work(sessions) as session:
            done = refresher().run(session, standing)
        if done is None:
            continue
        log.info(
            "project %d: %d proposals queued, %d stale ones withdrawn (shares %s)",
            standing.project_id,
            done.added,
            done.withdrawn,
            done.shares,
        )
