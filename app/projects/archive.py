"""A whole project as one ZIP, and a project made from such a ZIP, on either database.

The archive holds what a study is: `project.json` (the project, its rating settings,
its raters, its builds' state and its models' definitions), `items.zip` (the items
export: manifest and images) and `triplets.csv` (the answers export: every answer with
its source, rater, time to answer and time). A pilot run on a laptop (SQLite) thus moves
to the lab's server (PostgreSQL): the new project's exports are the old one's.

Left out on purpose: raters' session tokens (a rater continues on the new server by
opening its new link), the models' fitted versions (they refit there), the public link
(a new one, so the two never collide).
"""

from __future__ import annotations

import base64
import io
import json
import zipfile
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import numpy as np
from sqlalchemy import Engine, func, select
from sqlalchemy.orm import Session

from app.builds import jobs as build_jobs
from app.core.config import Settings
from app.core.errors import InvalidUpload, Problem, ServiceError
from app.items.images import ImageStore
from app.items.service import export_items_zip, ingest_items
from app.models import (
    Build,
    BuildStatus,
    Item,
    LabelType,
    LearnedModel,
    ModelKind,
    Project,
    Rater,
    Researcher,
    Triplet,
)
from app.projects.schemas import RatingSettings
from app.projects.service import create_project, delete_project, update_rating
from app.training.schemas import checked_params
from app.training.service import check_embedding_source, create_model
from app.triplets.log import published
from app.triplets.service import export_triplets_csv, ingest_triplets
from app.uploads.files import SafeZip, UploadedFile
from app.uploads.service import zip_limits

FORMAT = "closer-project"
FORMAT_VERSION = 1
RATER_FIELDS = (
    "external_id",
    "platform",
    "platform_ids",
    "answers",
    "attention_passed",
    "attention_failed",
    "majority_compared",
    "majority_agreement",
    "excluded",
    "exclusion_reason",
    "exclusion_override",
)
RATER_TIMES = ("created_at", "completed_at", "last_seen_at")
MODEL_FIELDS = ("name", "kind", "params", "auto_refit", "refit_growth", "min_answers")
_SPOOL_IN_MEMORY = 16 << 20


def _time(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def describe(session: Session, project: Project) -> dict[str, Any]:
    """project.json: everything of the project that is not an item or an answer."""
    item_keys = dict(
        session.execute(select(Item.id, Item.key).where(Item.project_id == project.id)).all()
    )
    builds = []
    for build in session.scalars(
        select(Build).where(Build.project_id == project.id).order_by(Build.id)
    ):
        ids = np.frombuffer(build.items, dtype=np.int64)
        # Where the build had read up to, as a count of answers in export order: the
        # answers get new ids on the other side.
        read = session.scalar(
            select(func.count()).where(
                Triplet.project_id == project.id,
                published(project.id),
                Triplet.id <= build.answers_cursor,
            )
        )
        builds.append(
            {
                "ref": build.id,
                "status": build.status.value,
                "params": build.params,
                "progress": build.progress,
                "message": build.message,
                "items": [item_keys[int(item_id)] for item_id in ids],
                "answers_read": int(read or 0),
                "state": base64.b64encode(build.state).decode(),
                "created_at": _time(build.created_at),
            }
        )
    models = []
    for model in session.scalars(
        select(LearnedModel).where(LearnedModel.project_id == project.id).order_by(LearnedModel.id)
    ):
        entry = {name: getattr(model, name) for name in MODEL_FIELDS}
        entry["ref"] = model.id  # what a SMERF model's params.embedding_model_id names
        entry["kind"] = model.kind.value
        entry["build_ref"] = model.build_id
        entry["inputs"] = base64.b64encode(model.inputs).decode() if model.inputs else None
        models.append(entry)
    raters = []
    for rater in session.scalars(
        select(Rater).where(Rater.project_id == project.id).order_by(Rater.id)
    ):
        entry = {name: getattr(rater, name) for name in RATER_FIELDS}
        entry.update({name: _time(getattr(rater, name)) for name in RATER_TIMES})
        raters.append(entry)
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "project": {
            "name": project.name,
            "description": project.description,
            "label_type": project.label_type.value,
            "created_at": _time(project.created_at),
        },
        "rating": RatingSettings.model_validate(project).model_dump(),
        "raters": raters,
        "builds": builds,
        "models": models,
    }


class _Sink(io.RawIOBase):
    """Where zipfile writes; the bytes are handed on as they come."""

    def __init__(self) -> None:
        self.chunks: list[bytes] = []
        self.position = 0

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        self.chunks.append(bytes(data))
        self.position += len(data)
        return len(data)

    def tell(self) -> int:
        return self.position

    def drain(self) -> bytes:
        data = b"".join(self.chunks)
        self.chunks.clear()
        return data


def export_archive(
    engine: Engine, store: ImageStore, description: dict[str, Any], project_id: int
) -> Iterator[bytes]:
    """The archive, streamed as it is written: memory holds a chunk, not the project."""
    sink = _Sink()
    archive = zipfile.ZipFile(sink, "w", compression=zipfile.ZIP_DEFLATED)
    archive.writestr("project.json", json.dumps(description, ensure_ascii=False, indent=1))
    yield sink.drain()
    # Images are compressed already: the nested items archive is stored as it is.
    with archive.open(zipfile.ZipInfo("items.zip"), "w", force_zip64=True) as entry:
        for chunk in export_items_zip(engine, store, project_id):
            entry.write(chunk)
            yield sink.drain()
    info = zipfile.ZipInfo("triplets.csv")
    info.compress_type = zipfile.ZIP_DEFLATED
    with archive.open(info, "w", force_zip64=True) as entry:
        for chunk in export_triplets_csv(engine, project_id):
            entry.write(chunk)
            yield sink.drain()
    archive.close()
    yield sink.drain()


def _problem(message: str) -> InvalidUpload:
    return InvalidUpload([Problem(file="project.json", message=message)])


def _read_description(archive: SafeZip) -> dict[str, Any]:
    if "project.json" not in archive.entries:
        raise InvalidUpload(
            [Problem(file=archive.name, message="no project.json: not a Closer project archive")]
        )
    try:
        description = json.loads(archive.read("project.json"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise _problem(f"not JSON: {error}") from None
    if not isinstance(description, dict) or description.get("format") != FORMAT:
        raise _problem(f"not a Closer project archive (format is not '{FORMAT}')")
    if description.get("format_version") != FORMAT_VERSION:
        raise _problem(
            f"format_version {description.get('format_version')!r}: this server reads "
            f"{FORMAT_VERSION}"
        )
    return description


def import_archive(
    *,
    session: Session,
    settings: Settings,
    store: ImageStore,
    owner: Researcher,
    upload: UploadedFile,
) -> Project:
    """A new project from an archive, owned by `owner`. All or nothing: the answers are
    written in committed chunks (see ingest_triplets), so a failure after the first
    chunk removes the half-made project again before the error is reported."""
    archive = SafeZip(upload, zip_limits(settings))
    description = _read_description(archive)
    try:
        facts = description["project"]
        project = create_project(
            session=session,
            owner=owner,
            name=str(facts["name"])[:200],
            description=str(facts.get("description", "")),
            label_type=LabelType(facts.get("label_type", "class")),
        )
        rating = RatingSettings.model_validate(description.get("rating", {}))
    except (KeyError, ValueError, TypeError) as error:
        raise _problem(f"the project's description is incomplete or wrong: {error}") from None
    update_rating(session=session, project=project, changes=rating.model_dump())
    project_id = project.id
    try:
        _fill(session, settings, store, archive, description, project)
    except BaseException:
        session.rollback()
        leftover = session.get(Project, project_id)
        if leftover is not None:  # a chunk of answers was committed with it
            delete_project(session=session, store=store, project=leftover)
            session.commit()
        raise
    return project


def _fill(
    session: Session,
    settings: Settings,
    store: ImageStore,
    archive: SafeZip,
    description: dict[str, Any],
    project: Project,
) -> None:
    if "items.zip" in archive.entries:
        ingest_items(
            session=session,
            settings=settings,
            store=store,
            project=project,
            upload=_spooled(archive, "items.zip"),
            requested_format=None,
            idempotency_key=None,
        )
    if "triplets.csv" in archive.entries and archive.size("triplets.csv") > 0:
        answers = _spooled(archive, "triplets.csv")
        if answers.stream.readline() and answers.stream.readline():  # a header and a row
            answers.stream.seek(0)
            ingest_triplets(
                session=session,
                settings=settings,
                project=project,
                upload=answers,
                requested_format=None,
                idempotency_key=None,
            )
    _restore_raters(session, project, description.get("raters", []))
    build_ids = _restore_builds(session, project, description.get("builds", []))
    _restore_models(session, project, description.get("models", []), build_ids)


def _spooled(archive: SafeZip, entry: str) -> UploadedFile:
    found = archive.open_upload(entry)
    return UploadedFile(name=f"{archive.name}:{entry}", stream=found.stream)


def _parse_time(value: Any) -> datetime | None:
    return datetime.fromisoformat(value) if isinstance(value, str) else None


def _restore_raters(session: Session, project: Project, raters: list[dict]) -> None:
    existing = {
        rater.external_id: rater
        for rater in session.scalars(select(Rater).where(Rater.project_id == project.id))
    }
    for entry in raters:
        try:
            external_id = str(entry["external_id"])
            rater = existing.get(external_id)
            if rater is None:
                rater = Rater(project_id=project.id, external_id=external_id)
                session.add(rater)
            for name in RATER_FIELDS[1:]:
                if name in entry:
                    setattr(rater, name, entry[name])
            for name in RATER_TIMES:
                if entry.get(name):
                    setattr(rater, name, _parse_time(entry[name]))
        except (KeyError, ValueError, TypeError) as error:
            raise _problem(f"a rater's record is wrong: {error}") from None
    session.flush()


def _restore_builds(session: Session, project: Project, builds: list[dict]) -> dict[int, int]:
    """The builds with their state; old build ids mapped to the new ones."""
    ids_by_key = dict(
        session.execute(select(Item.key, Item.id).where(Item.project_id == project.id)).all()
    )
    answer_ids = None
    mapped: dict[int, int] = {}
    # The archive keeps no record of whom a build left out: it left out those excluded now.
    excluded = list(
        session.scalars(
            select(Rater.id).where(Rater.project_id == project.id, Rater.excluded.is_(True))
        )
    )
    for entry in builds:
        try:
            item_ids = np.array([ids_by_key[key] for key in entry["items"]], dtype=np.int64)
            read = int(entry["answers_read"])
            if read and answer_ids is None:
                answer_ids = list(
                    session.scalars(
                        select(Triplet.id)
                        .where(Triplet.project_id == project.id)
                        .order_by(Triplet.id)
                    )
                )
            cursor = answer_ids[read - 1] if read else 0
            build = Build(
                project_id=project.id,
                status=BuildStatus(entry["status"]),
                params=entry["params"],
                progress=entry.get("progress") or {},
                message=str(entry.get("message", "")),
                state=base64.b64decode(entry["state"]),
                items=item_ids.tobytes(),
                answers_cursor=cursor,
                excluded_rater_ids=excluded,
            )
            if entry.get("created_at"):
                build.created_at = _parse_time(entry["created_at"])
        except (KeyError, ValueError, TypeError, IndexError) as error:
            raise _problem(f"build {entry.get('ref')!r} is incomplete or wrong: {error}") from None
        session.add(build)
        session.flush()
        mapped[int(entry["ref"])] = build.id
        if build.status is BuildStatus.running:
            build_jobs.request_step(session=session, build=build)
    return mapped


def _restore_models(
    session: Session, project: Project, models: list[dict], build_ids: dict[int, int]
) -> None:
    model_ids: dict[int, int] = {}  # the archive's refs to the models made here
    for entry in models:
        try:
            kind = ModelKind(entry["kind"])
            build_ref = entry.get("build_ref")
            params = checked_params(kind, entry.get("params") or {})
            if "embedding_model_id" in params:  # the archive's ref, made this server's id
                params["embedding_model_id"] = model_ids.get(params["embedding_model_id"])
            check_embedding_source(session=session, project_id=project.id, kind=kind, params=params)
            made = create_model(
                session=session,
                project=project,
                name=str(entry["name"]),
                kind=kind,
                params=params,
                auto_refit=bool(entry.get("auto_refit", True)),
                refit_growth=float(entry.get("refit_growth", 0.2)),
                min_answers=int(entry.get("min_answers", 100)),
                build_id=build_ids.get(build_ref) if build_ref is not None else None,
                inputs=base64.b64decode(entry["inputs"]) if entry.get("inputs") else None,
                # Fitted versions stay behind: each model fits anew on the answers here.
                train_now=True,
            )
            if isinstance(entry.get("ref"), int):
                model_ids[entry["ref"]] = made.id
        except (KeyError, ValueError, TypeError) as error:
            raise _problem(f"model {entry.get('name')!r} is incomplete or wrong: {error}") from None
        except ServiceError as refused:
            raise _problem(f"model {entry.get('name')!r}: {refused.detail}") from None
