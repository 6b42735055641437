"""The worker's side of the scheduler: keep each project's proposals (the samplers'
questions, app/adaptive/proposals.py) fresh after every fit and topped up, while
someone rates."""

from __future__ import annotations

import logging

from app.adaptive import proposals
from app.core.db import unit_of_work
from app.worker.loop import periodic

PROPOSE_SECONDS = 1.0  # a busy study drains a batch of proposals in seconds

log = logging.getLogger(__name__)
REFRESHER = proposals.Refresher()


@periodic(PROPOSE_SECONDS)
def refresh_proposals(sessions) -> None:
    with unit_of_work(sessions) as session:
        standings = proposals.standings(session)
    for standing in standings:
        if not REFRESHER.due(standing):
            continue
        with unit_of_work(sessions) as session:
            done = REFRESHER.run(session, standing)
        if done is None:
            continue
        log.info(
            "project %d: %d proposals queued, %d stale ones withdrawn (shares %s)",
            standing.project_id,
            done.added,
            done.withdrawn,
            done.shares,
        )
