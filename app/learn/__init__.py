"""Closer's numeric library: comparison-based learners, oracles and triplet utilities.

Pure numpy / scipy / scikit-learn / numba, with no web, database or settings imports, so
it works on its own in a notebook. Items are integer ids ``0..n-1``; triplets are
``(m, 3)`` integer arrays ``(anchor, closer, farther)``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

# Each name's module, imported on first use (PEP 562): the learners load scikit-learn,
# SciPy and numba, which a web process that only rates never needs; it starts without them.
_MODULES = {
    "check_triplets": "app.learn.triplets",
    "ChoiceEmbedding": "app.learn.choice",
    "Choices": "app.learn.choices",
    "odd_one_out_choices": "app.learn.choices",
    "rank_choices": "app.learn.choices",
    "triplet_choices": "app.learn.choices",
    "CompRF": "app.learn.comprf",
    "CompRFBuilder": "app.learn.comprf",
    "CompRFRouter": "app.learn.comprf",
    "DisDF": "app.learn.disdf",
    "dissimilarity_from_adjacency": "app.learn.smerf",
    "dissimilarity_from_embedding": "app.learn.smerf",
    "dissimilarity_from_labels": "app.learn.smerf",
    "dissimilarity_from_target": "app.learn.smerf",
    "EmbeddingSampler": "app.learn.samplers",
    "feature_triplets": "app.learn.tete",
    "FeatureOracle": "app.learn.oracles",
    "ForestLabellingSampler": "app.learn.samplers",
    "LabellingSampler": "app.learn.samplers",
    "PanelLabellingSampler": "app.learn.samplers",
    "PlacementSampler": "app.learn.samplers",
    "random_queries": "app.learn.triplets",
    "random_triplets": "app.learn.triplets",
    "SamplerState": "app.learn.samplers",
    "SMERF": "app.learn.smerf",
    "SMERFOracle": "app.learn.smerf",
    "TETE": "app.learn.tete",
    "TETESearch": "app.learn.tete_search",
    "triplet_error": "app.learn.metrics",
    "TripletBoost": "app.learn.tripletboost",
    "UniformSampler": "app.learn.samplers",
}

__all__ = [
    "SMERF",
    "ChoiceEmbedding",
    "Choices",
    "TETE",
    "TETESearch",
    "CompRF",
    "CompRFBuilder",
    "CompRFRouter",
    "DisDF",
    "EmbeddingSampler",
    "FeatureOracle",
    "ForestLabellingSampler",
    "LabellingSampler",
    "PanelLabellingSampler",
    "PlacementSampler",
    "SMERFOracle",
    "SamplerState",
    "TripletBoost",
    "UniformSampler",
    "check_triplets",
    "dissimilarity_from_adjacency",
    "dissimilarity_from_embedding",
    "dissimilarity_from_labels",
    "dissimilarity_from_target",
    "feature_triplets",
    "odd_one_out_choices",
    "random_queries",
    "random_triplets",
    "rank_choices",
    "triplet_choices",
    "triplet_error",
]


def __getattr__(name: str):
    if name not in _MODULES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_MODULES[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_MODULES))


if TYPE_CHECKING:
    from app.learn.choice import ChoiceEmbedding
    from app.learn.choices import Choices, odd_one_out_choices, rank_choices, triplet_choices
    from app.learn.comprf import CompRF, CompRFBuilder, CompRFRouter
    from app.learn.disdf import DisDF
    from app.learn.metrics import triplet_error
    from app.learn.oracles import FeatureOracle
    from app.learn.samplers import (
        EmbeddingSampler,
        ForestLabellingSampler,
        LabellingSampler,
        PanelLabellingSampler,
        PlacementSampler,
        SamplerState,
        UniformSampler,
    )
    from app.learn.smerf import (
        SMERF,
        SMERFOracle,
        dissimilarity_from_adjacency,
        dissimilarity_from_embedding,
        dissimilarity_from_labels,
        dissimilarity_from_target,
    )
    from app.learn.tete import TETE, feature_triplets
    from app.learn.tete_search import TETESearch
    from app.learn.tripletboost import TripletBoost
    from app.learn.triplets import check_triplets, random_queries, random_triplets
