"""Serving fitted models: predictions, embeddings, distances and neighbours.

A web process loads a version's artifact once and keeps it (`ModelCache`), so requests
never wait for training, and only look up which version serves. Items are named by key;
a version knows the items of the project when it was fitted.
"""

from __future__ import annotations

import csv
import io
import json
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np
from sqlalchemy.orm import Session

from app import formats
from app.core import caches
from app.core.errors import Conflict, NotFound, ServiceError, Unprocessable
from app.core.spreadsheets import spreadsheet_safe
from app.models import LearnedModel, ModelVersion, Routing, VersionStatus
from app.training import kinds
from app.training import service as training
from app.training.fitted import Fitted, ItemPredictions, required_part

MOST_CACHED = 8


@dataclass(frozen=True)
class ServedVersion:
    """Which version serves, copied out of the row: a cached entry outlives the request
    (and the session) that loaded it, so it holds no ORM object."""

    id: int
    number: int
    fitted_at: datetime | None

    @classmethod
    def of(cls, version: ModelVersion) -> ServedVersion:
        return cls(version.id, version.number, version.fitted_at)


@dataclass
class ServingModel:
    """A fitted version as this process serves it, with the bodies it answered before."""

    version: ServedVersion
    fitted: Fitted | None  # None for CompRF: its build's forest routes new items
    bodies: dict[str, bytes] = field(default_factory=dict)  # embedding, by format

    def artifact(self) -> Fitted:
        """What the version learnt, for the kinds that store it."""
        if self.fitted is None:
            raise Conflict(
                "a CompRF model predicts by routing new items down its build's forest "
                "(POST /api/v1/projects/{id}/builds/{build_id}/routings)"
            )
        return self.fitted


class ModelCache:
    """The fitted versions this process serves, newest use last; at most `most`.

    Keyed by id and fit time together: SQLite reuses the ids of deleted rows."""

    def __init__(self, most: int = MOST_CACHED) -> None:
        self.most = most
        self._entries: OrderedDict[tuple, ServingModel] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, session: Session, version: ModelVersion) -> ServingModel:
        key = (version.id, version.fitted_at)
        with self._lock:
            served = self._entries.get(key)
            if served is not None:
                self._entries.move_to_end(key)
                return served
        # Loading happens outside the lock: another model's requests need not wait.
        served = ServingModel(ServedVersion.of(version), training.load_fitted(session, version.id))
        with self._lock:
            self._entries[key] = served
            while len(self._entries) > self.most:
                self._entries.popitem(last=False)
        return served

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


def cache() -> ModelCache:
    return caches.current().get("predictions.models", ModelCache)


def serving(session: Session, model: LearnedModel, number: int | None = None) -> ServingModel:
    """The version that answers: `number` if given, else the newest ready one. A model
    with none ready yet is a 409 that says how far its fit has come."""
    if number is not None:
        version = training.get_version(session=session, model=model, number=number)
        if version.status is not VersionStatus.ready:
            raise Conflict(_not_ready(session, model, version))
    else:
        newest = training.newest_ready(session, model.id)
        if newest is None:
            raise Conflict(_not_ready(session, model, training.latest_version(session, model.id)))
        version = newest
    if kinds.of(model.kind).from_build:
        return ServingModel(ServedVersion.of(version), None)  # CompRF routes, from its build
    return cache().get(session, version)


def _not_ready(session: Session, model: LearnedModel, version: ModelVersion | None) -> dict:
    if version is None:
        return {
            "message": f"model {model.id} has no version yet: train it (POST …/train), or "
            "wait for enough answers for its first automatic fit",
            "status": None,
            "progress": 0.0,
        }
    progress, message = training.version_progress(session, version)
    return {
        "message": f"model {model.id} has no ready version to serve: version "
        f"{version.number} is {version.status.value} ({progress:.0%}: {message})",
        "version": version.number,
        "status": version.status.value,
        "progress": progress,
    }


# -- predictions ---------------------------------------------------------------------------


def _positions(fitted: Fitted, keys: list[str], version: ServedVersion) -> np.ndarray:
    position_of = fitted.position_of_key()
    unknown = [key for key in keys if key not in position_of]
    if unknown:
        raise NotFound(
            f"unknown items (not in the project when version {version.number} was fitted): "
            f"{unknown[:20]}"
        )
    return np.fromiter((position_of[key] for key in keys), np.int64, len(keys))


def _rows(
    keys: list[str], found: ItemPredictions, rows: np.ndarray, known: bool
) -> list[dict[str, Any]]:
    classes = [str(name) for name in found.classes]
    out = []
    for key, row in zip(keys, rows, strict=True):
        label = found.labels[row]
        proba = found.proba[row]
        tied = found.tied(row)
        out.append(
            {
                "key": key,
                "label": None if label is None else str(label),
                "tied": tied,
                "probabilities": None
                if (label is None and tied is None) or not np.all(np.isfinite(proba))
                else dict(zip(classes, map(float, proba), strict=True)),
                "support": int(found.support[row]),
                "known": known,
            }
        )
    return out


def predict_known(served: ServingModel, keys: list[str]) -> list[dict[str, Any]]:
    fitted = served.artifact()
    if fitted.predictions is None:
        raise Conflict(
            f"version {served.version.number} predicts no labels: the project had no "
            "labelled training items of two classes when it was fitted"
        )
    positions = _positions(fitted, keys, served.version)
    return _rows(keys, fitted.predictions, positions, known=True)


def export_predictions(served: ServingModel, fmt: str) -> bytes:
    """Every item the version knows, with its predicted label (none where the top
    classes tie: then the tied classes, separated by " | "), that label's probability
    and the support behind it."""
    return _export(predict_known(served, list(served.artifact().keys)), fmt)


def export_routed(routed: Routing, trees: int, fmt: str) -> bytes:
    """A CompRF routing's labels in the same columns: each item's support is the number
    of trees it was routed down."""
    rows = [
        {
            "key": key,
            "label": found["label"],
            "tied": found.get("tied"),
            "probabilities": found["proba"],
            "support": trees,
            "known": True,
        }
        for key, found in (routed.result or {}).items()
    ]
    return _export(rows, fmt)


def _export(rows: list[dict[str, Any]], fmt: str) -> bytes:
    if fmt == "json":
        return json.dumps(rows, ensure_ascii=False).encode()
    if fmt == "parquet":
        from app.predictions.parquet import predictions_file  # pyarrow: see app.core.parquet

        return predictions_file(rows)
    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    writer.writerow(["key", "label", "probability", "support", "tied"])
    for row in rows:
        probability = (row["probabilities"] or {}).get(row["label"]) if row["label"] else None
        writer.writerow(
            [
                spreadsheet_safe(row["key"]),
                spreadsheet_safe(row["label"] or ""),
                "" if probability is None else f"{probability:.6g}",
                row["support"],
                spreadsheet_safe(" | ".join(row["tied"] or [])),
            ]
        )
    return text.getvalue().encode()


def predict_new(served: ServingModel, new_items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Labels for items not in the project: from their answers against known items
    (TripletBoost, t-ETE) or their features (SMERF, DisDF)."""
    fitted = served.artifact()
    if fitted.train_positions is None:
        raise Conflict(
            f"version {served.version.number} predicts no labels: the project had no "
            "labelled training items of two classes when it was fitted"
        )
    names = [item.get("key") or f"new-{number}" for number, item in enumerate(new_items)]
    learner = kinds.of(fitted.kind)
    if learner.places_new_items_by == "answers":
        given = _new_triplets(fitted, new_items, served.version)
    else:
        given = _new_features(fitted, new_items)
    found, points = learner.predict_new(fitted, given, len(new_items))
    rows = _rows(names, found, np.arange(len(new_items)), known=False)
    if points is not None:
        for row, point in zip(rows, points, strict=True):
            row["coordinates"] = point.tolist()
    return rows


def _new_triplets(fitted: Fitted, new_items: list[dict], version: ServedVersion) -> np.ndarray:
    position_of = fitted.position_of_key()
    n = len(fitted.item_ids)
    rows = []
    for number, item in enumerate(new_items):
        pairs = item.get("triplets")
        if item.get("features") is not None and pairs is None:
            raise ServiceError(
                f"new_items[{number}]: a {fitted.kind} model places new items by their "
                "answers, not features: give triplets [[closer key, farther key], …]"
            )
        if not pairs:
            raise ServiceError(
                f"new_items[{number}].triplets is empty: give at least one "
                "[closer key, farther key] pair (the new item is closer to the first)"
            )
        for pair_number, (closer, farther) in enumerate(pairs):
            unknown = [key for key in (closer, farther) if key not in position_of]
            if unknown:
                raise NotFound(
                    f"new_items[{number}].triplets[{pair_number}]: unknown items {unknown} "
                    f"(not in the project when version {version.number} was fitted)"
                )
            if closer == farther:
                raise ServiceError(
                    f"new_items[{number}].triplets[{pair_number}]: closer and farther are "
                    f"the same item '{closer}'"
                )
            rows.append((n + number, position_of[closer], position_of[farther]))
    return np.array(rows, dtype=np.int64)


def _new_features(fitted: Fitted, new_items: list[dict]) -> np.ndarray:
    width = required_part(fitted.features).shape[1]
    X = np.empty((len(new_items), width))
    for number, item in enumerate(new_items):
        vector = item.get("features")
        if vector is None:
            raise ServiceError(
                f"new_items[{number}]: a {fitted.kind} model places new items by their "
                f"features: give features (a list of {width} numbers)"
            )
        if len(vector) != width:
            raise ServiceError(
                f"new_items[{number}].features has {len(vector)} values; the project's "
                f"items have {width}"
            )
        X[number] = vector
    if not np.all(np.isfinite(X)):
        bad = int(np.flatnonzero(~np.isfinite(X).all(axis=1))[0])
        raise ServiceError(f"new_items[{bad}].features holds NaN or infinite values")
    return X


# -- the metric: embeddings, distances, neighbours ----------------------------------------


def _needs_metric(served: ServingModel, what: str) -> Fitted:
    fitted = served.artifact()
    if not kinds.of(fitted.kind).serves_distances:
        raise ServiceError(
            f"a {fitted.kind} model gives no {what}: {kinds.serving_distances()} models do"
        )
    return fitted


def embedding_body(served: ServingModel, model_id: int, fmt: str) -> bytes:
    """The whole embedding, serialised once per version and format."""
    body = served.bodies.get(fmt)
    if body is not None:
        return body
    fitted = _needs_metric(served, "embedding")
    if not fitted.has_coordinates:
        raise ServiceError(
            "a SMERF model learns distances, not coordinates: ask for distances or neighbors"
        )
    # An embedding lists every item, flagging those without answers (they sit where the
    # fit started them); DisDF's representation covers the items with features.
    answered = fitted.answered_mask()
    rows = np.arange(len(fitted.item_ids)) if answered is not None else fitted.candidates()
    keys = [fitted.keys[row] for row in rows]
    coordinates = required_part(fitted.coordinates)[rows]
    dimensions = [f"dim_{d}" for d in range(coordinates.shape[1])]
    if fmt == "parquet":
        from app.predictions.parquet import embedding_file  # pyarrow: see app.core.parquet

        body = embedding_file(
            keys,
            dimensions,
            coordinates,
            answered,
            {"model_id": str(model_id), "version": str(served.version.number)},
        )
    elif fmt == "csv":
        text = io.StringIO()
        writer = csv.writer(text, lineterminator="\n")
        flags = [] if answered is None else [["true" if has else "false"] for has in answered]
        writer.writerow(["key", *dimensions, *(["answered"] if flags else [])])
        writer.writerows(
            [spreadsheet_safe(key), *map(repr, row), *(flags[number] if flags else [])]
            for number, (key, row) in enumerate(zip(keys, coordinates.tolist(), strict=True))
        )
        body = text.getvalue().encode()
    else:
        document = {
            "model_id": model_id,
            "version": served.version.number,
            "dimension": int(coordinates.shape[1]),
            "keys": keys,
            "coordinates": coordinates.tolist(),
        }
        if answered is not None:
            document["answered"] = answered.tolist()
        body = json.dumps(document, separators=(",", ":")).encode()
    served.bodies[fmt] = body
    return body


def _covered(fitted: Fitted, positions: np.ndarray, keys: list[str], where: str) -> None:
    has = np.zeros(len(fitted.item_ids), bool)
    has[fitted.candidates()] = True
    lacking = [key for key, position in zip(keys, positions, strict=True) if not has[position]]
    if lacking:
        reason = kinds.of(fitted.kind).uncovered
        raise ServiceError(f"{where}: items that {reason}: {lacking[:20]}")


def distances(served: ServingModel, pairs: list[tuple[str, str]]) -> list[float]:
    fitted = _needs_metric(served, "distances")
    first_keys = [a for a, _ in pairs]
    second_keys = [b for _, b in pairs]
    first = _positions(fitted, first_keys, served.version)
    second = _positions(fitted, second_keys, served.version)
    _covered(fitted, first, first_keys, "pairs")
    _covered(fitted, second, second_keys, "pairs")
    return [float(value) for value in fitted.pair_distances(first, second)]


def neighbors(served: ServingModel, key: str, k: int) -> list[dict[str, Any]]:
    fitted = _needs_metric(served, "neighbours")
    position = _positions(fitted, [key], served.version)
    _covered(fitted, position, [key], "item")
    found, distance = fitted.neighbors(int(position[0]), k)
    return [
        {"key": fitted.keys[row], "distance": float(value)}
        for row, value in zip(found, distance, strict=True)
    ]


# -- choices on screens ---------------------------------------------------------------------


def choice_probabilities(served: ServingModel, screens: list[Any]) -> list[dict[str, float]]:
    """Per screen (format, items, reference, picks: keys), each item's probability of
    being chosen by the model: the odd one, a rank screen's first pick, a triplet's
    closer. A screen that is malformed or names an item the model does not place is
    refused whole, by its number and field."""
    fitted = served.artifact()
    learner = kinds.of(fitted.kind)
    if not learner.predicts_choices:
        choosers = ", ".join(other.label for other in kinds.every() if other.predicts_choices)
        raise ServiceError(f"a {learner.label} model predicts no choices: a {choosers} does")
    position_of = fitted.position_of_key()
    placed = np.zeros(len(fitted.item_ids), bool)
    placed[fitted.candidates()] = True
    width = max(len(screen.items) for screen in screens)
    pairs = np.full((len(screens), width, 2), -1, np.int64)
    for number, screen in enumerate(screens):
        where = f"screens[{number}]"
        judgement_format = formats.named(screen.format)
        problem = judgement_format.screen_problem(screen.reference, screen.items, screen.picks)
        if problem is not None:
            raise Unprocessable(f"{where}: {problem}")
        mentioned = [*screen.items, *([] if screen.reference is None else [screen.reference])]
        if len(set(mentioned)) != len(mentioned):
            raise Unprocessable(f"{where}: names an item twice (the reference included)")
        for field_name, keys in (("items", screen.items), ("reference", [screen.reference])):
            for at, key in enumerate(keys):
                if key is None:
                    continue
                spot = f"{where}.{field_name}" + (f"[{at}]" if field_name == "items" else "")
                if key not in position_of:
                    raise Unprocessable(
                        f"{spot}: unknown item {key!r} (not in the project when version "
                        f"{served.version.number} was fitted)"
                    )
                if not placed[position_of[key]]:
                    raise Unprocessable(f"{spot}: item {key!r} {learner.uncovered}")
        reference = None if screen.reference is None else position_of[screen.reference]
        shown = [position_of[key] for key in screen.items]
        pairs[number, : len(shown)] = judgement_format.choice_pairs(reference, shown)
    from app.learn.choices import Choices

    chance = fitted.estimator.predict_proba(Choices(pairs, np.arange(len(screens))))
    return [
        {key: float(p) for key, p in zip(screen.items, row, strict=False)}
        for screen, row in zip(screens, chance.tolist(), strict=True)
    ]
