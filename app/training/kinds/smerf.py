"""SMERF: a metric over item features learnt by a random forest from a dissimilarity D
(from the items' labels or numeric target, a t-ETE model's embedding, or a matrix the
researcher uploaded); it serves distances and neighbours (not coordinates), and labels
items, new ones by their features, from their nearest labelled neighbours."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from app import learn
from app.core.errors import ServiceError
from app.models import ModelKind
from app.training import fitting
from app.training.fitted import Fitted, required_part
from app.training.fitting import CannotFit, FitOutcome, Progress, Snapshot
from app.training.kinds.base import LearnerKind, ReadyFit
from app.training.schemas import SMERFParams

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from app.models import LearnedModel


def fit_smerf(
    snapshot: Snapshot, params: dict[str, Any], previous: Fitted | None, progress: Progress
) -> FitOutcome:
    features, featured = fitting.featured_items(snapshot, "SMERF")
    source = params.get("dissimilarity", "labels")
    seed = params.get("random_state", 0)
    if source in ("labels", "target"):
        rows = np.intersect1d(snapshot.train_positions, featured)
        if len(rows) < 2:
            raise CannotFit(
                f"SMERF with D from {source} needs labelled training items with features; "
                f"found {len(rows)}"
            )
        values = snapshot.labels[rows]
        if source == "labels":
            D = learn.dissimilarity_from_labels(values.astype(str))
        else:
            try:
                D = learn.dissimilarity_from_target(values.astype(np.float64))
            except ValueError as exc:
                raise CannotFit(f"SMERF with D from target needs numeric labels: {exc}") from exc
    else:  # "embedding" or "matrix": the service put D and its items in the snapshot
        rows, D = required_part(snapshot.dissimilarity_items), required_part(snapshot.dissimilarity)
        missing = np.setdiff1d(rows, featured)
        if len(missing):
            raise CannotFit(
                f"SMERF: {len(missing)} item(s) of D have no features, e.g. "
                f"'{snapshot.keys[missing[0]]}'"
            )
    progress(0.05, f"growing {params.get('n_estimators', 100)} trees on {len(rows)} items")
    model = learn.SMERF(
        n_estimators=params.get("n_estimators", 100),
        max_features=params.get("max_features", "sqrt"),
        min_samples_leaf=params.get("min_samples_leaf", 1),
        max_depth=params.get("max_depth"),
        random_state=seed,
    ).fit(features[rows], D)
    fitted = Fitted(
        kind=ModelKind.smerf.value,
        item_ids=snapshot.item_ids,
        keys=snapshot.keys,
        estimator=model,
        features=snapshot.features,
        featured=featured,
        k_neighbors=params.get("k_neighbors", 5),
    )
    metrics: dict[str, Any] = {"training_items": len(rows), "dissimilarity": source}
    progress(0.6, "measuring")
    fitting.answer_agreement(snapshot, fitted, metrics, seed)
    fitting.label_by_neighbours(snapshot, fitted, metrics, seed)
    return FitOutcome(fitted, metrics, answers_used=0, heldout=metrics.get("answers_checked", 0))


def pack_matrix(keys: list[str], matrix: np.ndarray) -> bytes:
    """An uploaded D as the model stores it (`inputs`): its keys, then the values."""
    header = "\n".join(keys).encode()
    return len(header).to_bytes(8, "little") + header + matrix.astype("<f8").tobytes()


def unpack_matrix(blob: bytes) -> tuple[list[str], np.ndarray]:
    size = int.from_bytes(blob[:8], "little")
    keys = blob[8 : 8 + size].decode().split("\n")
    matrix = np.frombuffer(blob[8 + size :], dtype="<f8").reshape(len(keys), len(keys))
    return keys, matrix


class SMERFKind(LearnerKind):
    kind = ModelKind.smerf
    label = "SMERF"
    title = "SMERF metric (item features)"
    params = SMERFParams
    learns_from_features = True
    serves_distances = True
    places_new_items_by = "features"
    model_reference = "embedding_model_id"

    def fit(self, snapshot, params, previous, progress) -> FitOutcome:
        return fit_smerf(snapshot, params, previous, progress)

    def predict_new(self, fitted, given, count):
        train_rows = required_part(fitted.features)[required_part(fitted.train_positions)]
        return fitted.labels_from_distances(fitted.estimator.predict(given, train_rows)), None

    def takes_matrix(self, params: dict[str, Any]) -> bool:
        return params.get("dissimilarity") == "matrix"

    def referenced_model(self, params: dict[str, Any]) -> object | None:
        if params.get("dissimilarity") != "embedding":
            return None
        return params.get("embedding_model_id")

    def add_inputs(
        self, session: Session, model: LearnedModel, snapshot: Snapshot, ready_fit: ReadyFit
    ) -> None:
        """D where it does not come from labels: a t-ETE model's current embedding, or
        the matrix the researcher uploaded (over item keys)."""
        source = model.params.get("dissimilarity", "labels")
        if source == "embedding":
            fitted = ready_fit(model.params["embedding_model_id"])
            if fitted is None:
                raise ServiceError(
                    f"SMERF's D comes from model {model.params['embedding_model_id']}'s "
                    "embedding, which has no ready version yet"
                )
            # Only items with answers have a place in the embedding; the answers that
            # placed them cannot measure SMERF: it is measured on the rest (held out, or
            # newer).
            answered = fitted.candidates()
            positions = np.searchsorted(snapshot.item_ids, fitted.item_ids[answered])
            positions = np.minimum(positions, len(snapshot.item_ids) - 1)
            kept = snapshot.item_ids[positions] == fitted.item_ids[answered]
            snapshot.dissimilarity_items = positions[kept]
            coordinates = required_part(fitted.coordinates)
            snapshot.dissimilarity = learn.dissimilarity_from_embedding(coordinates[answered[kept]])
            unseen = snapshot.answer_ids > fitted.cutoff
            if fitted.heldout_answer_ids is not None:
                unseen |= np.isin(snapshot.answer_ids, fitted.heldout_answer_ids)
            snapshot.measure_on = np.flatnonzero(unseen)
        elif source == "matrix":
            if model.inputs is None:
                raise ServiceError("SMERF's dissimilarity matrix D was never uploaded")
            keys, matrix = unpack_matrix(model.inputs)
            position_of = {key: i for i, key in enumerate(snapshot.keys)}
            missing = [key for key in keys if key not in position_of]
            if missing:
                raise ServiceError(f"D names items no longer in the project: {missing[:10]}")
            snapshot.dissimilarity_items = np.array([position_of[key] for key in keys], np.int64)
            snapshot.dissimilarity = matrix


SMERF_KIND = SMERFKind()
