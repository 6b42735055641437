"""The worker's side of project imports: remove a project whose importer died."""

from __future__ import annotations

import logging

from app.core.claims import try_claim
from app.core.db import unit_of_work
from app.projects.archive import IMPORT_CLAIMS, dead_imports, remove_dead_import
from app.worker.loop import periodic

DEAD_IMPORT_CHECK_SECONDS = 60.0

log = logging.getLogger(__name__)


@periodic(DEAD_IMPORT_CHECK_SECONDS, needs_images=True)
def remove_dead_imports(sessions, images) -> None:
    with unit_of_work(sessions) as session:
        for project_id in dead_imports(session):
            claim = try_claim(session.get_bind(), IMPORT_CLAIMS, project_id)
            if claim is None:
                continue  # its importer is alive
            with claim:
                if remove_dead_import(session, images, project_id):
                    log.warning("removed project %d: its import stopped half way", project_id)
