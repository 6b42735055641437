"""A study's design versions: what its raters see (the path, the texts, the formats, the
arms, the items) is locked by the first answer it collects; a change after that makes a
new numbered version, with what changed, and every answer records the version that
asked it. Changes before the first answer edit the current version in place (a study
being set up is version 1 until it has data).

The answer paths lock the version (projects.design_locked_at: the Python path in
app/scheduling/answers.py, closer_answer() on PostgreSQL); the researcher's changes come
here, under the project's row lock (projects.service.get_project), so a first answer and
a change never cross unseen."""

from __future__ import annotations

import hashlib
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.formats import JudgementFormat
from app.models import DesignVersion, Item, Project

# The settings raters see, in the order changes are listed.
DESIGN_SETTINGS = (
    "judgement",
    "shown",
    "picks",
    "question",
    "instructions",
    "languages",
    "texts",
    "allow_cant_tell",
    "play_to_end",
    "text_markdown",
    "answers_per_rater",
    "consent",
    "questionnaire",
    "practice",
    "blocks",
    "break_seconds",
    "max_session_minutes",
    "debrief",
    "arms",
)
SHORT = 80  # a text this long or shorter is quoted in the changes; a longer one summed up


def _plain(value: Any) -> Any:
    return value.name if isinstance(value, JudgementFormat) else value


def design_of(session: Session, project: Project) -> dict[str, Any]:
    """What the study's raters see now, as stored with its version."""
    design = {name: _plain(getattr(project, name)) for name in DESIGN_SETTINGS}
    shown = hashlib.sha256()
    count = 0
    for key, text, image in session.execute(
        select(Item.key, Item.text, Item.image_file)
        .where(Item.project_id == project.id)
        .order_by(Item.id)
    ):
        count += 1
        shown.update(f"{key}\x1f{text or ''}\x1f{image or ''}\x1e".encode())
    design["items"] = {"count": count, "digest": shown.hexdigest()[:16]}
    return design


def _said(value: Any) -> str:
    if value is None:
        return "none"
    if isinstance(value, str):
        return repr(value) if len(value) <= SHORT else f"a text of {len(value):,} characters"
    if isinstance(value, bool | int | float):
        return str(value)
    return "set"


def changes_between(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """What changed from one design to the next, a sentence each."""
    said = []
    for name in (*DESIGN_SETTINGS, "items"):
        old, new = before.get(name), after.get(name)
        if old == new:
            continue
        if name == "items":
            old_count, new_count = (old or {}).get("count"), (new or {}).get("count")
            said.append(
                f"items: {old_count:,} → {new_count:,}"
                if old_count != new_count
                else "items: the same number, some shown differently"
            )
        elif name == "arms":
            said.append(_arm_changes(old or [], new or []))
        elif isinstance(old, dict | list) or isinstance(new, dict | list):
            said.append(f"{name}: {'changed' if old and new else ('added' if new else 'removed')}")
        else:
            said.append(f"{name}: {_said(old)} → {_said(new)}")
    return said


def _arm_changes(old: list[dict], new: list[dict]) -> str:
    before = {arm["name"]: arm for arm in old}
    after = {arm["name"]: arm for arm in new}
    parts = [f"+{name}" for name in after if name not in before]
    parts += [f"-{name}" for name in before if name not in after]
    parts += [f"{name} changed" for name in after if name in before and after[name] != before[name]]
    return "arms: " + (", ".join(parts) if parts else "reordered")


def current(session: Session, project: Project) -> DesignVersion | None:
    return session.scalar(
        select(DesignVersion).where(
            DesignVersion.project_id == project.id,
            DesignVersion.number == project.design_version,
        )
    )


def before_change(*, session: Session, project: Project) -> None:
    """Keep the design as it stands before a change (a study made before versions were
    kept has no version yet: its current one is written down now)."""
    if current(session, project) is None:
        session.add(
            DesignVersion(
                project_id=project.id,
                number=project.design_version,
                design=design_of(session, project),
                changes=[],
            )
        )
        session.flush()


def record(*, session: Session, project: Project) -> DesignVersion:
    """Keep the study's versions up to date after a change of what raters see: the
    current version edited in place while it has no answer, else a new one. The caller
    holds the project's row lock (and raises settings_version, so that the processes'
    copies of the settings record the new version on the answers that follow)."""
    session.refresh(project, ["design_locked_at"])  # an answer may have locked it since read
    design = design_of(session, project)
    version = current(session, project)
    if version is None:  # (before_change was not asked): the design as it is now
        version = DesignVersion(
            project_id=project.id, number=project.design_version, design=design, changes=[]
        )
        session.add(version)
        session.flush()
        return version
    if version.design == design:
        return version
    if project.design_locked_at is None:
        version.design = design
        session.flush()
        return version
    version.locked_at = project.design_locked_at
    following = DesignVersion(
        project_id=project.id,
        number=version.number + 1,
        design=design,
        changes=changes_between(version.design, design),
    )
    session.add(following)
    project.design_version = following.number
    project.design_locked_at = None
    project.settings_version += 1
    session.flush()
    return following


def list_versions(*, session: Session, project: Project) -> list[DesignVersion]:
    """The study's versions, oldest first (a study that never changed: its current
    design, not yet written down)."""
    found = list(
        session.scalars(
            select(DesignVersion)
            .where(DesignVersion.project_id == project.id)
            .order_by(DesignVersion.number)
        )
    )
    if found:
        return found
    return [
        DesignVersion(
            project_id=project.id,
            number=project.design_version,
            design=design_of(session, project),
            changes=[],
            created_at=project.created_at,
        )
    ]
