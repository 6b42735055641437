"""What a model version serves: a fitted learner with the project's items in its order.

A `Fitted` is the stored artifact (pickled, compressed) and the object the web processes
cache. Items are positions `0..n-1` into `item_ids` (the project's item ids, sorted, at
fit time). Predictions for the items already known are computed once at fit time, so a
`predict` request for them is a lookup; new items are placed or classified on demand.
"""

from __future__ import annotations

import pickle
import struct
import zlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

if TYPE_CHECKING:
    from sklearn.neighbors import KNeighborsClassifier

ARTIFACT_FORMAT = 1

_Part = TypeVar("_Part")


def required_part(part: _Part | None) -> _Part:
    """A part of a fitted model that its kind always has (a t-ETE model's coordinates, a
    SMERF model's features): None there is a broken artifact, not a case to handle."""
    if part is None:
        raise ValueError("the stored model lacks a part its kind always has")
    return part


@dataclass
class ItemPredictions:
    """Per item: predicted label (None where nothing spoke for it, or where the top
    classes tie), class shares, support."""

    classes: np.ndarray
    labels: np.ndarray  # object array, None where unsupported or tied
    proba: np.ndarray  # (n, n_classes), NaN rows where unsupported
    support: np.ndarray  # (n,) ints: how much evidence each prediction rests on

    @classmethod
    def deciding(
        cls, classes: np.ndarray, proba: np.ndarray, support: np.ndarray
    ) -> ItemPredictions:
        """Labels from the class shares: the top class, or none where two or more share
        the top (an even vote is not a label, however the classes sort) or nothing
        supports the item."""
        return cls(classes, top_classes(classes, proba, support), proba, support)

    def tied(self, row: int) -> list[str] | None:
        """The classes that share the top for the item, where more than one does."""
        shares = self.proba[row]
        if self.labels[row] is not None or not np.all(np.isfinite(shares)) or not len(shares):
            return None
        top = np.flatnonzero(np.isclose(shares, shares.max(), rtol=0, atol=TIE_TOLERANCE))
        return [str(self.classes[i]) for i in top] if len(top) > 1 else None


# Shares this close are one vote apart from nothing: a tie.
TIE_TOLERANCE = 1e-9


def top_classes(classes: np.ndarray, proba: np.ndarray, support: np.ndarray) -> np.ndarray:
    labels = np.full(len(proba), None, dtype=object)
    if not len(proba) or not len(classes):
        return labels
    finite = np.all(np.isfinite(proba), axis=1) & (np.asarray(support) > 0)
    shares = np.where(np.isfinite(proba), proba, -np.inf)
    best = shares.max(axis=1, keepdims=True)
    at_top = np.isclose(shares, best, rtol=0, atol=TIE_TOLERANCE).sum(axis=1)
    decided = finite & (at_top == 1)
    labels[decided] = classes[np.argmax(shares[decided], axis=1)]
    return labels


# Begins an artifact whose arrays of floats follow its compressed pickle (no zlib
# stream begins so: its first byte is 0x78).
_ENVELOPE = b"CLOSER-ARTIFACT\n"
_FLOAT_FORMATS = frozenset("efdg")


def _unpack(blob: bytes) -> object:
    start = len(_ENVELOPE)
    (count,) = struct.unpack_from("<I", blob, start)
    sizes = struct.unpack_from(f"<{count + 1}Q", blob, start + 4)
    offset = start + 4 + 8 * (count + 1)
    parts = memoryview(blob)
    pickled = zlib.decompress(parts[offset : offset + sizes[0]])
    offset += sizes[0]
    buffers = []
    for size in sizes[1:]:
        # A copy of its own per array: one the array may change, as it could before
        # the envelope, and aligned as numpy and numba's kernels want it (an array at an
        # odd offset of the blob is not).
        buffers.append(bytearray(parts[offset : offset + size]))
        offset += size
    return pickle.loads(pickled, buffers=buffers)


@dataclass
class Fitted:
    kind: str
    item_ids: np.ndarray
    keys: list[str]
    predictions: ItemPredictions | None = None
    estimator: Any = None
    # t-ETE: the embedding; DisDF: the learnt representation of the featured items.
    coordinates: np.ndarray | None = None
    # Items with features (SMERF, DisDF): their rows of `features`, by position.
    features: np.ndarray | None = None
    featured: np.ndarray | None = None  # positions that have features
    # t-ETE: positions of the items that appear in the answers it was fitted on. The
    # others kept their random starting points: they have no place in the embedding.
    answered: np.ndarray | None = None
    # The triplet ids a fit held out, and the last id it could read: another model that
    # learns from this one's output measures itself on answers this one never saw.
    heldout_answer_ids: np.ndarray | None = None
    # Labelled training items, for k-nearest-neighbour labels from distances.
    train_positions: np.ndarray | None = None
    train_labels: np.ndarray | None = None
    k_neighbors: int = 5
    # How its coordinates measure likeness: None, by their distance; "dot", by their dot
    # product (the choice model's sparse non-negative form), served as the distance
    # `dot_offset - x·y`, which ranks every item's neighbours as the model chooses
    # (`dot_offset` the largest x·x: no distance below 0).
    similarity: str | None = None
    dot_offset: float = 0.0
    # The answers fitted on (positions in the snapshot, in id order) and the last one's id.
    n_answers: int = 0
    cutoff: int = 0
    format: int = ARTIFACT_FORMAT
    _position_of_key: dict[str, int] | None = field(default=None, repr=False)
    _knn: KNeighborsClassifier | None = field(default=None, repr=False)

    # -- lookups -------------------------------------------------------------------------

    def position_of_key(self) -> dict[str, int]:
        if self._position_of_key is None:
            self._position_of_key = {key: i for i, key in enumerate(self.keys)}
        return self._position_of_key

    @property
    def has_coordinates(self) -> bool:
        return self.coordinates is not None

    # -- distances ---------------------------------------------------------------------

    def distance_block(self, rows: np.ndarray, columns: np.ndarray) -> np.ndarray:
        """Distances (len(rows), len(columns)) between items (positions): in its
        coordinates, or (SMERF, which has none) by its estimator from the features."""
        if self.coordinates is None:
            features = required_part(self.features)
            return self.estimator.predict(features[rows], features[columns])
        Y = required_part(self.coordinates)
        if self.similarity == "dot":
            return self.dot_offset - Y[rows] @ Y[columns].T
        from sklearn.metrics import pairwise_distances

        return pairwise_distances(Y[rows], Y[columns])

    def pair_distances(self, first: np.ndarray, second: np.ndarray) -> np.ndarray:
        """Distances between items `first[i]` and `second[i]` (positions)."""
        if self.coordinates is None:
            rows, row_of = np.unique(first, return_inverse=True)
            columns, column_of = np.unique(second, return_inverse=True)
            return self.distance_block(rows, columns)[row_of, column_of]
        Y = required_part(self.coordinates)
        if self.similarity == "dot":
            return self.dot_offset - np.einsum("ij,ij->i", Y[first], Y[second])
        return np.sqrt(((Y[first] - Y[second]) ** 2).sum(axis=1))

    def distances_to_all(self, position: int) -> tuple[np.ndarray, np.ndarray]:
        """Candidate positions and their distances from one item."""
        candidates = self.candidates()
        if self.coordinates is None or self.similarity is not None:
            return candidates, self.distance_block(np.array([position]), candidates)[0]
        Y = required_part(self.coordinates)
        return candidates, np.sqrt(((Y[candidates] - Y[position]) ** 2).sum(axis=1))

    def candidates(self) -> np.ndarray:
        """Items the metric covers: the featured ones in a space of features, those with
        answers in an embedding of answers."""
        if self.featured is not None:
            return self.featured
        if self.answered is None:  # an artifact from before answered items were kept
            return np.arange(len(self.item_ids))
        return self.answered

    def answered_mask(self) -> np.ndarray | None:
        """Per item, whether it had answers in the fit (an embedding of answers only)."""
        if self.featured is not None or self.coordinates is None:
            return None
        mask = np.zeros(len(self.item_ids), bool)
        mask[self.candidates()] = True
        return mask

    def neighbors(self, position: int, k: int) -> tuple[np.ndarray, np.ndarray]:
        candidates, distance = self.distances_to_all(position)
        keep = candidates != position
        candidates, distance = candidates[keep], distance[keep]
        k = min(k, len(candidates))
        nearest = np.argpartition(distance, k - 1)[:k] if k < len(candidates) else np.arange(k)
        nearest = nearest[np.lexsort((candidates[nearest], distance[nearest]))]
        return candidates[nearest], distance[nearest]

    # -- labels for new items -----------------------------------------------------------

    def labels_from_coordinates(self, points: np.ndarray) -> ItemPredictions:
        """k nearest labelled training items in the embedding."""
        if self.similarity == "dot":
            train = required_part(self.coordinates)[required_part(self.train_positions)]
            return self.labels_from_distances(self.dot_offset - points @ train.T)
        if self._knn is None:  # built once per process, not per request
            from sklearn.neighbors import KNeighborsClassifier

            train = required_part(self.train_positions)
            k = min(self.k_neighbors, len(train))
            self._knn = KNeighborsClassifier(n_neighbors=k).fit(
                required_part(self.coordinates)[train], self.train_labels
            )
        knn = self._knn
        proba = knn.predict_proba(points)
        support = np.full(len(points), knn.n_neighbors, np.int64)
        return ItemPredictions.deciding(knn.classes_, proba, support)

    def labels_from_distances(self, distances: np.ndarray) -> ItemPredictions:
        """k nearest labelled training items by a precomputed (n_new, n_train) distance."""
        classes, coded = np.unique(required_part(self.train_labels), return_inverse=True)
        k = min(self.k_neighbors, distances.shape[1])
        nearest = np.argsort(distances, axis=1, kind="stable")[:, :k]
        counts = np.zeros((len(distances), len(classes)))
        for column in range(k):
            np.add.at(counts, (np.arange(len(distances)), coded[nearest[:, column]]), 1.0)
        proba = counts / k
        return ItemPredictions.deciding(classes, proba, np.full(len(distances), k, np.int64))

    # -- storage -------------------------------------------------------------------------

    def dumps(self) -> bytes:
        """The artifact: the pickle compressed, less its floating-point arrays (the
        embedding, class shares), which follow it as they are. Compressing those gained
        a tenth of their size and was most of the time a version took to store."""
        self._position_of_key = self._knn = None  # rebuilt where the artifact is loaded
        as_they_are: list[memoryview] = []

        def in_the_pickle(buffer: pickle.PickleBuffer) -> bool:
            if memoryview(buffer).format in _FLOAT_FORMATS:
                as_they_are.append(buffer.raw())
                return False
            return True

        packed = zlib.compress(pickle.dumps(self, protocol=5, buffer_callback=in_the_pickle), 1)
        sizes = [len(packed)] + [array.nbytes for array in as_they_are]
        header = _ENVELOPE + struct.pack(f"<I{len(sizes)}Q", len(as_they_are), *sizes)
        return b"".join([header, packed, *as_they_are])

    @staticmethod
    def loads(blob: bytes) -> Fitted:
        # Artifacts are written by this service's own workers, never uploaded.
        if blob.startswith(_ENVELOPE):
            fitted = _unpack(blob)
        else:  # stored before the envelope: the whole pickle compressed
            fitted = pickle.loads(zlib.decompress(blob))
        if not isinstance(fitted, Fitted) or fitted.format != ARTIFACT_FORMAT:
            raise ValueError("not a model artifact of this version of Closer")
        return fitted
