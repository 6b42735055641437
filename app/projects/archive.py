"""A whole project as one ZIP, and a project made from such a ZIP, on either database.

The archive holds what a study is: `project.json` (the project, its rating settings,
its raters, its builds' state and its models' definitions), `items.zip` (the items
export: manifest and images), `judgements.json` (every screen as shown and answered,
its items by key) and `triplets.csv` (the answers export: every answer with its source,
rater, time to answer, time and the judgement it is one of the triplets of). A pilot run on a laptop (SQLite) thus moves
to the lab's server (PostgreSQL): the new project's exports are the old one's.

Left out on purpose: raters' session tokens (a rater continues on the new server by
opening its new link), the models' fitted versions (they refit there), the public link
(a new one, so the two never collide).

An import is all or nothing, even across a crash: the project stays hidden (`importing`)
until its last commit, its importer holds a claim on it meanwhile (app/core/claims.py),
and a project whose claim is let go while it is still importing is removed whole, by
the worker's upkeep or by a retry with the same Idempotency-Key.
"""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np
from sqlalchemy import Engine, func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app import learn
from app.builds import jobs as build_jobs
from app.core.claims import try_claim
from app.core.config import Settings
from app.core.db import session_engine
from app.core.errors import Conflict, InvalidUpload, Problem, ServiceError
from app.items.images import ImageStore
from app.items.service import export_items_zip, ingest_items
from app.models import (
    Build,
    BuildStatus,
    Item,
    LearnedModel,
    Project,
    Rater,
    Researcher,
    Triplet,
)
from app.projects import archive_designs, archive_judgements
from app.projects.archive_format import (
    FORMAT,
    FORMAT_VERSION,
    ArchivedBuild,
    ArchivedModel,
    ArchivedRater,
    ProjectArchive,
    as_model_request,
    read_description,
)
from app.projects.schemas import RatingSettings
from app.projects.service import create_project, delete_project, update_rating
from app.training import kinds
from app.training.kinds import unpack_matrix
from app.training.service import set_up_model
from app.triplets.log import published
from app.triplets.service import export_triplets_csv, ingest_triplets
from app.uploads.files import SafeZip, UploadedFile
from app.uploads.service import ANOTHER_BODY, Retryable, zip_limits

MODEL_FIELDS = ("name", "kind", "params", "auto_refit", "refit_growth", "min_answers", "arm")
IMPORT_CLAIMS = 0x1A9C  # the claim space of project imports (app/core/claims.py)
_STILL_IMPORTING = (
    "an import with Idempotency-Key '{key}' is still under way; retry when it has ended"
)


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
        models.append(entry)
    raters = []
    for rater in session.scalars(
        select(Rater).where(Rater.project_id == project.id).order_by(Rater.id)
    ):
        # The fields the import reads (one list: the archive's schema).
        entry = {name: getattr(rater, name) for name in ArchivedRater.model_fields}
        raters.append({k: _time(v) if isinstance(v, datetime) else v for k, v in entry.items()})
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "project": {
            "name": project.name,
            "description": project.description,
            "label_type": project.label_type.value,
            "created_at": _time(project.created_at),
            "consent_version": project.consent_version,
            "design_locked_at": _time(project.design_locked_at),
        },
        "rating": RatingSettings.model_validate(project).model_dump(),
        "raters": raters,
        "builds": builds,
        "models": models,
        "design_versions": archive_designs.described(session, project),
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
    # The screens before the answers they imply: an import maps their ids first.
    info = zipfile.ZipInfo(archive_judgements.ENTRY)
    info.compress_type = zipfile.ZIP_DEFLATED
    with archive.open(info, "w", force_zip64=True) as entry:
        for text in archive_judgements.exported(engine, project_id):
            entry.write(text.encode())
            yield sink.drain()
    info = zipfile.ZipInfo("triplets.csv")
    info.compress_type = zipfile.ZIP_DEFLATED
    with archive.open(info, "w", force_zip64=True) as entry:
        for chunk in export_triplets_csv(engine, project_id):
            entry.write(chunk)
            yield sink.drain()
    # The builds' states (compressed already) and SMERF's matrices, one entry each.
    for build in description["builds"]:
        with engine.connect() as connection:
            state = connection.scalar(select(Build.state).where(Build.id == build["ref"]))
        if state is not None:
            archive.writestr(zipfile.ZipInfo(_state_entry(build["ref"])), state)
            yield sink.drain()
    for model in description["models"]:
        with engine.connect() as connection:
            inputs = connection.scalar(
                select(LearnedModel.inputs).where(LearnedModel.id == model["ref"])
            )
        if inputs:
            archive.writestr(_matrix_entry(model["ref"]), inputs)
            yield sink.drain()
    archive.close()
    yield sink.drain()


def _state_entry(ref: int) -> str:
    return f"builds/{ref}.state"


def _matrix_entry(ref: int) -> str:
    return f"models/{ref}.matrix"


def _refused(message: str, where: str | None = None, file: str = "project.json") -> InvalidUpload:
    return InvalidUpload([Problem(file=file, message=message, column=where)])


@dataclass(frozen=True)
class Imported:
    project: Project
    replayed: bool  # a retry (same Idempotency-Key) of an import that had ended


def import_archive(
    *,
    session: Session,
    settings: Settings,
    store: ImageStore,
    owner: Researcher,
    upload: UploadedFile,
    idempotency_key: str | None = None,
) -> Imported:
    """A new project from an archive, owned by `owner`, all or nothing: it is checked
    whole against the API's schemas, made hidden, and shown by its last commit (this
    service commits: the answers go in committed chunks, see ingest_triplets). A failure
    removes the half-made project before the error is reported; a crash leaves it to the
    clean-up (see the module's notes)."""
    request = Retryable.of(idempotency_key, upload, "archive")
    earlier = _earlier_import(session, store, owner, request)
    if earlier is not None:
        return Imported(earlier, replayed=True)
    archive = SafeZip(upload, zip_limits(settings))
    description = read_description(archive, settings.max_json_bytes)
    facts = description.project
    try:
        project = create_project(
            session=session,
            owner=owner,
            name=facts.name,
            description=facts.description,
            label_type=facts.label_type,
            importing=True,
            import_key=idempotency_key,
            import_digest=request.digest,
        )
    except IntegrityError:  # the same key, sent again while the first is under way
        raise Conflict(_STILL_IMPORTING.format(key=idempotency_key)) from None
    # Taken before the project's first commit: nobody sees it unclaimed while it runs.
    claim = try_claim(session_engine(session), IMPORT_CLAIMS, project.id)
    project_id = project.id
    try:
        rating = description.rating.model_dump()
        # The arms' and the practice's items are checked once the items are in.
        after_items = {name: rating.pop(name, None) for name in ("arms", "practice")}
        update_rating(session=session, project=project, changes=rating)
        if facts.consent_version is not None:
            project.consent_version = facts.consent_version
        after_items = {name: value for name, value in after_items.items() if value is not None}
        _fill(session, settings, store, archive, description, project, after_items)
        archive_designs.restore(session, project, description)
        project.importing = False
        session.commit()
    except BaseException:
        session.rollback()
        leftover = session.get(Project, project_id)
        if leftover is not None:  # a chunk of answers was committed with it
            delete_project(session=session, store=store, project=leftover)
            session.commit()
        raise
    finally:
        if claim is not None:
            claim.release()
    return Imported(project, replayed=False)


def _earlier_import(
    session: Session, store: ImageStore, owner: Researcher, request: Retryable
) -> Project | None:
    """The project an import with this key made. One whose importer died is removed,
    so that this request imports anew; one still under way is a 409, and so is a key
    used for another archive."""
    key = request.key
    if key is None:
        return None
    earlier = session.scalar(
        select(Project).where(Project.owner_id == owner.id, Project.import_key == key)
    )
    if earlier is not None and earlier.import_digest not in (None, request.digest):
        raise Conflict(ANOTHER_BODY.format(key=key))
    if earlier is None or not earlier.importing:
        return earlier
    if remove_dead_import(session, store, earlier.id):
        return None  # its importer died: this request imports anew
    session.expire_all()
    again = session.get(Project, earlier.id)
    if again is not None and again.importing:
        raise Conflict(_STILL_IMPORTING.format(key=key))
    return again  # it ended while we looked (None: another process removed it)


def remove_dead_import(session: Session, store: ImageStore, project_id: int) -> bool:
    """Remove a project whose import died (nobody holds its claim). False while its
    importer lives, and when there is nothing to remove (its import ended, or another
    process removed it)."""
    claim = try_claim(session_engine(session), IMPORT_CLAIMS, project_id)
    if claim is None:
        return False
    with claim:
        session.expire_all()
        project = session.get(Project, project_id)
        if project is None or not project.importing:
            return False
        delete_project(session=session, store=store, project=project)
        session.commit()
    return True


def unfinished_imports(session: Session) -> list[int]:
    """Projects still importing: those whose claim is free lost their importer."""
    return list(session.scalars(select(Project.id).where(Project.importing)))


@dataclass(frozen=True)
class _CheckedBuild:
    entry: ArchivedBuild
    item_ids: np.ndarray
    state: bytes
    progress: dict


def _fill(
    session: Session,
    settings: Settings,
    store: ImageStore,
    archive: SafeZip,
    description: ProjectArchive,
    project: Project,
    after_items: dict[str, Any],
) -> None:
    """The items, then the settings that name them (`after_items`: arms, practice), then
    the judgements, answers, raters, builds and models."""
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
    if after_items:
        update_rating(session=session, project=project, changes=after_items)
    ids_by_key = dict(
        session.execute(select(Item.key, Item.id).where(Item.project_id == project.id)).all()
    )
    # Before the answers go in: a bad build refuses the archive at once.
    builds = [
        _check_build(archive, description.format_version, index, entry, ids_by_key)
        for index, entry in enumerate(description.builds)
    ]
    judgement_ids: dict[int, int] = {}
    if archive_judgements.ENTRY in archive.entries:
        judgement_ids = archive_judgements.restore(session, project, archive, ids_by_key)
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
                judgement_ids=judgement_ids,
            )
    _restore_raters(session, project, description)
    build_ids = _restore_builds(session, project, builds)
    # A matrix the API takes fits its JSON limit; packed, it takes at most about twice that.
    matrix_limit = 2 * settings.max_json_bytes
    _restore_models(session, project, archive, description, build_ids, matrix_limit)


def _spooled(archive: SafeZip, entry: str) -> UploadedFile:
    found = archive.open_upload(entry)
    return UploadedFile(name=f"{archive.name}:{entry}", stream=found.stream)


def _state_limit(entry: ArchivedBuild) -> int:
    return learn.CompRFBuilder.max_state_bytes(
        len(entry.items), entry.params.n_trees, entry.answers_read
    )


def _check_build(
    archive: SafeZip,
    version: int,
    index: int,
    entry: ArchivedBuild,
    ids_by_key: dict[str, int],
) -> _CheckedBuild:
    where = f"builds.{index}"
    unknown = next((key for key in entry.items if key not in ids_by_key), None)
    if unknown is not None:
        raise _refused(f"item '{unknown[:200]}' is not among the archive's items", f"{where}.items")
    if len(set(entry.items)) != len(entry.items):
        raise _refused("an item is listed twice", f"{where}.items")
    limit = _state_limit(entry)
    state = _archived_blob(archive, version, entry.state, _state_entry(entry.ref), limit)
    if state is None:
        raise _refused(f"build {entry.ref} has no state ({_state_entry(entry.ref)})", where)
    try:
        builder = learn.CompRFBuilder.from_untrusted_bytes(state, max_bytes=limit)
    except ValueError as error:
        raise _refused(str(error), f"{where}.state") from None
    params = entry.params.model_dump()
    said = {name: params[name] for name in builder.params if name in params}
    if (
        said != {name: builder.params[name] for name in said}
        or not builder.params["supervised"]
        or builder.random_state != params["random_state"]
    ):
        raise _refused("its params are not those of its state", f"{where}.params")
    if not np.array_equal(builder.items, np.arange(len(entry.items))):
        raise _refused("its state is over other items than it lists", f"{where}.items")
    if entry.status is BuildStatus.complete and not builder.is_complete:
        raise _refused("marked complete, but its state has open nodes", f"{where}.status")
    try:
        progress = builder.progress()
    except (ValueError, IndexError) as error:  # what the checks above did not foresee
        raise _refused(f"its state cannot be resumed: {error}", f"{where}.state") from None
    item_ids = np.array([ids_by_key[key] for key in entry.items], dtype=np.int64)
    return _CheckedBuild(entry, item_ids, state, progress)


def _restore_raters(session: Session, project: Project, description: ProjectArchive) -> None:
    # The answers' upload made a rater for each name it met: those get their record.
    existing = {
        rater.external_id: rater
        for rater in session.scalars(select(Rater).where(Rater.project_id == project.id))
    }
    for entry in description.raters:
        rater = existing.get(entry.external_id)
        if rater is None:
            rater = Rater(project_id=project.id)
            session.add(rater)
        for name, value in entry.model_dump(exclude_none=True).items():
            setattr(rater, name, value)
    session.flush()


def _answer_ids(session: Session, project: Project) -> list[int]:
    return list(
        session.scalars(
            select(Triplet.id).where(Triplet.project_id == project.id).order_by(Triplet.id)
        )
    )


def _restore_builds(
    session: Session, project: Project, builds: list[_CheckedBuild]
) -> dict[int, int]:
    """The builds with their state; the archive's build refs mapped to the new ids."""
    answer_ids: list[int] | None = None
    mapped: dict[int, int] = {}
    # The archive keeps no record of whom a build left out: it left out those excluded now.
    excluded = list(
        session.scalars(
            select(Rater.id).where(Rater.project_id == project.id, Rater.excluded.is_(True))
        )
    )
    for index, checked in enumerate(builds):
        entry = checked.entry
        read = entry.answers_read
        if read and answer_ids is None:
            answer_ids = _answer_ids(session, project)
        if read > len(answer_ids or ()):
            raise _refused(
                f"answers_read is {read}, but the archive holds {len(answer_ids or ())} answers",
                f"builds.{index}.answers_read",
            )
        build = Build(
            project_id=project.id,
            status=entry.status,
            params=entry.params.model_dump(),
            sort_size=entry.params.sort_size,
            progress=checked.progress,
            message=entry.message,
            state=checked.state,
            items=checked.item_ids.tobytes(),
            answers_cursor=answer_ids[read - 1] if read and answer_ids else 0,
            excluded_rater_ids=excluded,
        )
        if entry.created_at is not None:
            build.created_at = entry.created_at
        session.add(build)
        session.flush()
        mapped[entry.ref] = build.id
        if build.status is BuildStatus.running:
            build_jobs.request_step(session=session, build=build)
    return mapped


def _archived_blob(
    archive: SafeZip, version: int, inline: bytes | None, name: str | None, limit: int
) -> bytes | None:
    """What a build's state or a model's matrix is: inline in project.json (format 1),
    or the entry `name` of at most `limit` bytes (format 2); None when there is none."""
    if version == 1:
        return inline
    if name not in archive.entries:
        return None
    if archive.size(name) > limit:
        raise _refused(f"over the limit of {limit:,} bytes for it", file=name)
    return archive.read(name)


def _archived_matrix(
    archive: SafeZip, version: int, entry: ArchivedModel, limit: int
) -> tuple[list[str], np.ndarray] | None:
    """A SMERF model's matrix as the archive carries it, or None."""
    name = _matrix_entry(entry.ref) if entry.ref is not None else None
    blob = _archived_blob(archive, version, entry.inputs, name, limit)
    if blob is None:
        return None
    try:
        return unpack_matrix(blob)
    except (ValueError, UnicodeDecodeError, OverflowError):
        raise _refused(
            f"model '{entry.name}': its matrix cannot be read", file=name or "project.json"
        ) from None


def _restore_models(
    session: Session,
    project: Project,
    archive: SafeZip,
    description: ProjectArchive,
    build_ids: dict[int, int],
    matrix_limit: int,
) -> None:
    """Each model through the API's own path (set_up_model), fitted anew here."""
    model_ids: dict[int, int] = {}  # the archive's refs to the models made here
    for index, entry in enumerate(description.models):
        params = dict(entry.params)
        reference = kinds.of(entry.kind).model_reference
        if reference is not None and reference in params:  # the archive's ref, made this
            params[reference] = model_ids.get(params[reference])  # server's id
        matrix = _archived_matrix(archive, description.format_version, entry, matrix_limit)
        try:
            body = as_model_request(
                entry,
                params=params,
                build_id=build_ids.get(entry.build_ref) if entry.build_ref else None,
                train=True,
            )
            made = set_up_model(session=session, project=project, body=body, matrix=matrix)
        except ServiceError as refused:
            detail = refused.detail
            shown = detail if isinstance(detail, str) else json.dumps(detail)[:2000]
            raise _refused(f"model '{entry.name}': {shown}", f"models.{index}") from None
        if entry.ref is not None:
            model_ids[entry.ref] = made.id
