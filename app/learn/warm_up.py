"""The learners' compiled kernels, made ready before the first fit needs them.

numba compiles a kernel on its first call, or loads it from its cache (beside the
source, or in NUMBA_CACHE_DIR). A worker whose cache is cold (a fresh checkout, a new
container) spent its first fits compiling: in the adaptive-sampling benchmark the first
crowd of a run then got uniform questions on 19 to 44 % of its answers while the first
TripletBoost fit compiled. Fitting each learner once on a few made-up items, as a worker
starts, compiles (or loads) what the real fits call, with the same argument types.
"""

from __future__ import annotations

import time

import numpy as np

from app.learn._tete_loss import PARALLEL_FROM
from app.learn.choice import ChoiceEmbedding
from app.learn.comprf import CompRF
from app.learn.disdf import DisDF
from app.learn.oracles import FeatureOracle
from app.learn.smerf import SMERF, dissimilarity_from_labels
from app.learn.tete import TETE
from app.learn.tete_search import TETESearch
from app.learn.tripletboost import TripletBoost
from app.learn.triplets import random_triplets

_ITEMS = 40


GROUPS = ("embedding", "others")


def compile_kernels(groups: tuple[str, ...] = GROUPS) -> float:
    """Fit every learner once on `_ITEMS` made-up items; returns the seconds it took
    (about two with a warm cache). `groups`: only some of them, "embedding" (t-ETE and
    its search, half the compiling) or "others": two processes compile a cold cache
    in half the time."""
    started = time.perf_counter()
    rng = np.random.default_rng(0)
    X = rng.standard_normal((_ITEMS, 3))
    y = (X[:, 0] > 0).astype(np.int64)
    oracle = FeatureOracle(X)
    triplets = random_triplets(_ITEMS, 800, oracle, random_state=0)
    train, rest = np.arange(30), np.arange(30, _ITEMS)

    if "others" in groups:
        boost = TripletBoost(n_iter=50, n_runs=2, random_state=0).fit(triplets, train, y[train])
        boost.partial_fit(triplets[:100], n_iter=10)
        boost.predict(triplets, rest)
        CompRF(n_trees=2, random_state=0).fit(np.arange(_ITEMS), y, oracle)
        smerf = SMERF(n_estimators=4, random_state=0)
        smerf.fit(X, dissimilarity_from_labels(y.astype(str))).predict(X[:5], X)  # served too
        DisDF(n_estimators=4, random_state=0).fit(X, y)
        ChoiceEmbedding(n_components=4, passes=1, max_iter=3, random_state=0).fit(
            triplets, n_items=_ITEMS
        )
    if "embedding" in groups:
        # The fold path (under 100,000 answers) and the held-out-share path (from there).
        TETESearch(TETE(max_iter=30, random_state=0)).fit(triplets, n_items=_ITEMS)
        TETESearch(TETE(max_iter=30, stochastic_from=400, random_state=0)).fit(
            triplets, n_items=_ITEMS
        )
        # From PARALLEL_FROM answers a pass runs in threads: another kernel.
        many = random_triplets(_ITEMS, PARALLEL_FROM, oracle, random_state=1)
        TETE(t=2.0, max_iter=3, random_state=0).fit(many, n_items=_ITEMS)
    return time.perf_counter() - started
