"""A project archive's judgements: `judgements.json`, every screen as shown and answered
with its items by key, written before the answers and restored before them, so that each
answer's `judgement` column (the ref the archive gave its screen) names the judgement
made for it on the new server."""

from __future__ import annotations

import json
from collections.abc import Iterator

from pydantic import ValidationError
from sqlalchemy import Engine, insert, select
from sqlalchemy.orm import Session

from app.core.errors import InvalidUpload, Problem, echo
from app.formats import UnknownFormat, named
from app.models import Judgement, Project, Rater
from app.projects.archive_format import ArchivedItem, ArchivedJudgement
from app.triplets.judged import published_batches
from app.uploads.files import SafeZip, UploadedFile, json_array_entries

ENTRY = "judgements.json"
AT_ONCE = 5_000  # judgements read, or written, at a time


def exported(engine: Engine, project_id: int) -> Iterator[str]:
    """judgements.json: every published judgement, items by key, as a JSON array."""
    yield "["
    separator = ""
    encode = json.JSONEncoder(ensure_ascii=False).encode
    for batch, keys, raters in published_batches(engine, project_id, AT_ONCE):
        entries = [
            {
                "ref": row.id,
                "format": row.format.name,
                "context": [keys[item] for item in row.context],
                "shown": [keys[item] for item in row.shown],
                "chosen": [
                    {"item": keys[choice]} if isinstance(choice, int) else choice
                    for choice in row.chosen
                ],
                "rater": raters.get(row.rater_id),
                "response_time_ms": row.response_time_ms,
                "created_at": row.created_at.isoformat(),
                "arm": row.arm,
                "design_version": row.design_version,
            }
            for row in batch
        ]
        yield separator + encode(entries)[1:-1]
        separator = ","
    yield "]"


def _entry(archive: SafeZip) -> UploadedFile:
    found = archive.open_upload(ENTRY)
    return UploadedFile(name=ENTRY, stream=found.stream)


def restore(
    session: Session, project: Project, archive: SafeZip, ids_by_key: dict[str, int]
) -> dict[int, int]:
    """The archive's judgements, stored as they were shown and answered: the new id of
    each, by its ref (the answers' `judgement` column). Each entry is checked as an API
    body would be; the first fault refuses the archive, naming the entry."""
    rater_ids = dict(
        session.execute(
            select(Rater.external_id, Rater.id).where(Rater.project_id == project.id)
        ).all()
    )
    new_ids: dict[int, int] = {}
    pending: list[tuple[int, dict]] = []
    seen: set[int] = set()

    def refused(index: int, message: str) -> InvalidUpload:
        return InvalidUpload([Problem(file=ENTRY, message=f"judgement {index}: {message}")])

    def item(index: int, key: str) -> int:
        found = ids_by_key.get(key)
        if found is None:
            raise refused(index, f"names item '{echo(key)}', which the archive's items lack")
        return found

    def write() -> None:
        if pending:
            made = session.scalars(
                insert(Judgement).returning(Judgement.id, sort_by_parameter_order=True),
                [row for _, row in pending],
            ).all()
            new_ids.update(zip((ref for ref, _ in pending), made, strict=True))
            pending.clear()

    for index, raw in json_array_entries(_entry(archive), "judgements", "judgements"):
        try:
            entry = ArchivedJudgement.model_validate(raw)
        except ValidationError as error:
            first = error.errors(include_url=False)[0]
            where = ".".join(str(part) for part in first["loc"])
            raise refused(index, f"{where}: {first['msg']}") from None
        try:
            judged = named(entry.format)
        except UnknownFormat:
            message = f"format '{echo(entry.format)}' is not one of this server's"
            raise refused(index, message) from None
        if entry.ref in seen:
            raise refused(index, f"ref {entry.ref} appears twice")
        seen.add(entry.ref)
        rater_id = None
        if entry.rater is not None:
            rater_id = rater_ids.get(entry.rater)
            if rater_id is None:
                rater = Rater(project_id=project.id, external_id=entry.rater)
                session.add(rater)
                session.flush()
                rater_id = rater_ids[entry.rater] = rater.id
        context = [item(index, key) for key in entry.context]
        shown = [item(index, key) for key in entry.shown]
        row = {
            "project_id": project.id,
            "format": judged,
            "context": context,
            "shown": shown,
            "screen": judged.screen_of(context, shown),
            "chosen": [
                item(index, choice.item) if isinstance(choice, ArchivedItem) else choice
                for choice in entry.chosen
            ],
            "rater_id": rater_id,
            "response_time_ms": entry.response_time_ms,
            "created_at": entry.created_at,
            "arm": entry.arm,
            "design_version": entry.design_version,
        }
        pending.append((entry.ref, row))
        if len(pending) >= AT_ONCE:
            write()
    write()
    return new_ids
