"""Items: all-or-nothing uploads (CSV, JSON, ZIP of images), listing, export."""

from __future__ import annotations

import csv
import io
import json
import zipfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath

import numpy as np
from sqlalchemy import Engine, Row, func, insert, select
from sqlalchemy.orm import Session

from app.core.config import Settings
from app.core.db import on_rollback
from app.core.errors import InvalidUpload, NotFound, Problem, ProblemCollector
from app.core.spreadsheets import spreadsheet_safe
from app.core.streams import ChunkSink
from app.designs import versions
from app.items.images import ImageStore, NotAnImage, inspect_image
from app.items.media import NotPlayable, inspect_clip, looks_playable
from app.items.parsing import ItemValidator, read_csv_items, read_json_items
from app.models import Item, Project, UploadKind
from app.uploads.files import FileFormat, SafeZip, UploadedFile, detect_format
from app.uploads.service import Retryable, UploadResult, find_replay, open_upload, zip_limits

ITEM_FORMATS = (FileFormat.csv, FileFormat.json, FileFormat.zip)


def encode_features(vector: list[float] | None) -> bytes | None:
    return None if vector is None else np.asarray(vector, dtype="<f8").tobytes()


def decode_features(blob: bytes | None) -> list[float] | None:
    return None if blob is None else np.frombuffer(blob, dtype="<f8").tolist()


def _read_manifest(archive: SafeZip, validator: ItemValidator) -> None:
    manifests = archive.find(".csv")
    if "manifest.csv" in manifests:
        manifests = ["manifest.csv"]
    if len(manifests) != 1:
        found = ", ".join(manifests) or "none"
        raise InvalidUpload(
            [
                Problem(
                    archive.name,
                    f"a ZIP upload needs one CSV manifest (manifest.csv at the top); found {found}",
                )
            ]
        )
    manifest = archive.open_upload(manifests[0])
    validator.file = manifest.name
    read_csv_items(manifest, validator, allow_image=True)


@dataclass(frozen=True)
class StoredFile:
    name: str | None
    content_type: str | None
    seconds: float | None  # a sound's or video's length


def _store_images(
    archive: SafeZip,
    validator: ItemValidator,
    store: ImageStore,
    project: Project,
    settings: Settings,
    problems: ProblemCollector,
    created_files: list[str],
) -> dict[str, StoredFile]:
    """Check and store each referenced file (an image, a sound or a video, told apart by
    its content) as it is read, so memory holds one at a time.

    Files this upload created are listed in `created_files` and removed on rollback.
    """
    max_pixels, max_image = settings.max_image_pixels, settings.max_image_bytes
    max_clip, budget = settings.max_clip_bytes, settings.max_project_media_bytes
    used = store.usage(project.id)
    stored: dict[str, StoredFile] = {}
    for record in validator.records:
        if record.image is None:
            continue
        entry = str(PurePosixPath(record.image.replace("\\", "/")))
        if entry not in archive.entries:
            problems.add(
                validator.file,
                f"'{record.image}' is not in the archive",
                row=record.row,
                column="image",
            )
            continue
        playable = looks_playable(archive.head(entry))
        limit, kind = (max_clip, "a sound or video") if playable else (max_image, "an image")
        if archive.size(entry) > limit:
            setting = "CLOSER_MAX_CLIP_BYTES" if playable else "CLOSER_MAX_IMAGE_BYTES"
            problems.add(
                f"{archive.name}:{entry}",
                f"{archive.size(entry)} bytes unpacked; {kind} may have at most {limit} "
                f"({setting}) (row {record.row} of the manifest)",
            )
            continue
        data = archive.read(entry)
        seconds = None
        try:
            if playable:
                clip = inspect_clip(data)
                extension, content_type, seconds = clip.extension, clip.content_type, clip.seconds
            else:
                extension, content_type = inspect_image(data, max_pixels)
        except (NotAnImage, NotPlayable) as exc:
            problems.add(f"{archive.name}:{entry}", f"{exc} (row {record.row} of the manifest)")
            continue
        if not problems.problems:
            filename, created = store.put(project.id, data, extension)
            if created:
                created_files.append(filename)
                used += len(data)
                if used > budget:
                    problems.add(
                        f"{archive.name}:{entry}",
                        f"the project's files would take more than {budget} bytes "
                        f"(CLOSER_MAX_PROJECT_MEDIA_BYTES) with this one (row {record.row} of "
                        "the manifest)",
                    )
                    break
            stored[record.key] = StoredFile(filename, content_type, seconds)
    return stored


def _existing_keys(session: Session, project: Project, keys: list[str]) -> set[str]:
    found: set[str] = set()
    for start in range(0, len(keys), 1000):
        chunk = keys[start : start + 1000]
        found.update(
            session.scalars(
                select(Item.key).where(Item.project_id == project.id, Item.key.in_(chunk))
            )
        )
    return found


def ingest_items(
    *,
    session: Session,
    settings: Settings,
    store: ImageStore,
    project: Project,
    upload: UploadedFile,
    requested_format: FileFormat | None,
    idempotency_key: str | None,
    on_error: str = "reject",
) -> UploadResult:
    """Validate the whole file, then add every item or none (with on_error="skip":
    every item but those of the rows with a problem, which are listed)."""
    request = Retryable.of(idempotency_key, upload, "items", requested_format, on_error)
    replay = find_replay(session=session, project=project, kind=UploadKind.items, request=request)
    if replay:
        return replay
    fmt = detect_format(upload, requested_format, ITEM_FORMATS)
    problems = ProblemCollector(settings.max_upload_errors, skip_rows=on_error == "skip")
    existing = session.scalar(select(func.count()).where(Item.project_id == project.id)) or 0
    validator = ItemValidator(
        upload.name, project.label_type, project.feature_dim, problems, existing_items=existing
    )
    created_files: list[str] = []
    project_id = project.id  # the hook runs after rollback has expired `project`
    on_rollback(session, lambda: store.remove(project_id, created_files))
    images: dict[str, StoredFile] = {}
    if fmt is FileFormat.zip:
        archive = SafeZip(upload, zip_limits(settings))
        _read_manifest(archive, validator)
        problems.raise_if_any()
        images = _store_images(
            archive, validator, store, project, settings, problems, created_files
        )
    elif fmt is FileFormat.csv:
        read_csv_items(upload, validator, allow_image=False)
    else:
        read_json_items(upload, validator, allow_image=False)
    records = validator.records
    row_of = {record.key: record.row for record in records}
    for key in sorted(_existing_keys(session, project, list(row_of)), key=row_of.__getitem__):
        problems.add(
            validator.file,
            f"item '{key}' already exists in this project",
            row=row_of[key],
            column="key",
        )
    records = [record for record in records if record.row not in problems.skipped_rows]
    if not records and not problems.problems:
        skipped = f" ({len(problems.skipped_rows)} rows skipped)" if problems.skipped_rows else ""
        problems.add(validator.file, f"no items in the file{skipped}")
    problems.raise_if_any()
    versions.before_change(session=session, project=project)
    upload_row = open_upload(
        session=session,
        project=project,
        kind=UploadKind.items,
        filename=upload.name,
        request=request,
    )
    no_file = StoredFile(None, None, None)
    rows = [
        {
            "project_id": project.id,
            "key": r.key,
            "label": r.label,
            "text": r.text,
            "split": r.split,
            "features": encode_features(r.features),
            "image_file": images.get(r.key, no_file).name,
            "image_type": images.get(r.key, no_file).content_type,
            "clip_seconds": images.get(r.key, no_file).seconds,
            "alt": r.alt,
        }
        for r in records
    ]
    for start in range(0, len(rows), 5000):
        session.execute(insert(Item), rows[start : start + 5000])
    if not existing:  # the first items settle whether the project's items have features
        project.feature_dim = validator.feature_dim
    upload_row.row_count = len(rows)
    session.flush()
    versions.record(session=session, project=project)  # new items shown: a new version
    return UploadResult(upload_row.id, UploadKind.items, len(records)).with_skipped(problems)


def get_item(*, session: Session, project: Project, key: str) -> Item:
    item = session.scalar(select(Item).where(Item.project_id == project.id, Item.key == key))
    if item is None:
        raise NotFound(f"no item '{key}' in project {project.id}")
    return item


EXPORT_COLUMNS = ("key", "label", "text", "split", "image", "features", "alt")
_EXPORT_BATCH = 2000


def _export_rows(engine: Engine, project_id: int) -> Iterator[Sequence[Row]]:
    columns = (
        Item.key,
        Item.label,
        Item.text,
        Item.split,
        Item.image_file,
        Item.features,
        Item.alt,
    )
    query = select(*columns).where(Item.project_id == project_id).order_by(Item.id)
    with engine.connect() as connection:
        result = connection.execution_options(stream_results=True, yield_per=_EXPORT_BATCH)
        yield from result.execute(query).partitions()


def _features_text(blob: bytes | None) -> str:
    return (
        "" if blob is None else " ".join(repr(v) for v in np.frombuffer(blob, dtype="<f8").tolist())
    )


def _csv_row(key, label, text, split, image: str, features, alt) -> tuple:
    """An item as a CSV download writes it: text a spreadsheet would run is quoted."""
    return (
        spreadsheet_safe(key),
        spreadsheet_safe(label or ""),
        spreadsheet_safe(text or ""),
        split.value,
        spreadsheet_safe(image),
        _features_text(features),
        spreadsheet_safe(alt or ""),
    )


def export_items_csv(engine: Engine, project_id: int) -> Iterator[str]:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(EXPORT_COLUMNS)
    for partition in _export_rows(engine, project_id):
        for key, label, text, split, image, features, alt in partition:
            writer.writerow(_csv_row(key, label, text, split, image or "", features, alt))
        yield buffer.getvalue()
        buffer.seek(0)
        buffer.truncate()
    yield buffer.getvalue()


def export_items_parquet(engine: Engine, project_id: int) -> Iterator[bytes]:
    from app.items.parquet import items_parquet  # pyarrow: see app.core.parquet

    return items_parquet(_export_rows(engine, project_id))


def export_items_json(engine: Engine, project_id: int) -> Iterator[str]:
    yield "["
    first = True
    for partition in _export_rows(engine, project_id):
        chunk = []
        for key, label, text, split, image, features, alt in partition:
            chunk.append(
                json.dumps(
                    {
                        "key": key,
                        "label": label,
                        "text": text,
                        "split": split.value,
                        "image": image,
                        "features": decode_features(features),
                        "alt": alt,
                    }
                )
            )
        if chunk:
            yield ("" if first else ",") + ",".join(chunk)
            first = False
    yield "]"


def export_items_zip(engine: Engine, store: ImageStore, project_id: int) -> Iterator[bytes]:
    """manifest.csv plus images/, streamed: a ZIP that uploads again as it is."""
    sink = ChunkSink()
    archive = zipfile.ZipFile(sink, "w", compression=zipfile.ZIP_DEFLATED)
    manifest = io.StringIO()
    writer = csv.writer(manifest, lineterminator="\n")
    writer.writerow(EXPORT_COLUMNS)
    written: set[str] = set()
    for partition in _export_rows(engine, project_id):
        for key, label, text, split, image, features, alt in partition:
            entry = f"images/{image}" if image else ""
            writer.writerow(_csv_row(key, label, text, split, entry, features, alt))
            if image and image not in written:
                archive.write(store.path(project_id, image), entry, zipfile.ZIP_STORED)
                written.add(image)
                yield sink.drain()
    archive.writestr("manifest.csv", manifest.getvalue())
    archive.close()
    yield sink.drain()
