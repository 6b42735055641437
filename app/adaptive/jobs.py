"""The worker's side of the scheduler: keep each project's proposals (the samplers'
questions, app/adaptive/proposals.py) fresh after every fit and topped up, while
someone rates."""

from __future__ import annotations

import logging

from app.adaptive import proposals
from app.core import caches
from app.core.claims import try_claim
from app.core.db import unit_of_work
from app.worker.loop import periodic

PROPOSE_SECONDS = 1.0  # a busy study drains a batch of proposals in seconds
REFRESH_CLAIMS = 0x7E4F  # the claim space of proposal refreshes (app/core/claims.py)

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
        # One worker at a time: another refreshing the project now would swap the same
        # slots, and the one after it would find them fresh.
        claim = try_claim(sessions.kw["bind"], REFRESH_CLAIMS, standing.project_id)
        if claim is None:
            continue
        with claim, unit_of_work(sessions) as session:
            now = proposals.standings(session, standing.project_id)
            done = refresher().run(session, now[0]) if now and refresher().due(now[0]) else None
        if done is None:
            continue
        log.info(
            "project %d: %d proposals queued, %d stale ones withdrawn (shares %s)",
            standing.project_id,
            done.added,
            done.withdrawn,
            done.shares,
        )
