"""The worker's side of project imports: remove a project whose importer died."""

from __future__ import annotations

import logging

from app.core.db import unit_of_work
from app.projects.archive import remove_dead_import, unfinished_imports
from app.worker.loop import periodic

DEAD_IMPORT_CHECK_SECONDS = 60.0

log = logging.getLogger(__name__)


@periodic(DEAD_IMPORT_CHECK_SECONDS, needs_images=True)
def remove_dead_imports(sessions, images) -> None:
    with unit_of_work(sessions) as session:
        for project_id in unfinished_imports(session):
            if remove_dead_import(session, images, project_id):
                log.warning("removed project %d: its import stopped half way", project_id)
