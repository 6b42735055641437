"""The worker's side of the triplets: take out what a crashed upload left behind, and
keep the hourly answer tallies up to date."""

from __future__ import annotations

import logging

from app.core.db import unit_of_work
from app.triplets import tally
from app.triplets.bulk import abandoned_uploads, claim_abandoned_upload, discard_upload
from app.worker.loop import periodic

ABANDONED_CHECK_SECONDS = 60.0
TALLY_SECONDS = 5.0

log = logging.getLogger(__name__)


@periodic(ABANDONED_CHECK_SECONDS)
def remove_abandoned_uploads(sessions) -> None:
    with unit_of_work(sessions) as session:
        for upload_id in abandoned_uploads(session):
            if not claim_abandoned_upload(session, upload_id):
                continue  # another worker is discarding it
            removed = discard_upload(session, upload_id)
            log.warning(
                "removed unpublished upload %d (its writer stopped): %d rows", upload_id, removed
            )


@periodic(TALLY_SECONDS)
def tally_answers(sessions) -> None:
    with unit_of_work(sessions) as session:
        projects = tally.behind(session)
    for project_id in projects:
        with unit_of_work(sessions) as session:
            tally.advance(session, project_id)
