"""Closer's numeric library: comparison-based learners, oracles and triplet utilities.

Pure numpy / scipy / scikit-learn / numba, with no web, database or settings imports, so
it works on its own in a notebook. Items are integer ids ``0..n-1``; triplets are
``(m, 3)`` integer arrays ``(anchor, closer, farther)``.
"""

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
from app.learn.tripletboost import TripletBoost
from app.learn.triplets import check_triplets, random_queries, random_triplets

__all__ = [
    "SMERF",
    "TETE",
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
    "random_queries",
    "random_triplets",
    "triplet_error",
]
