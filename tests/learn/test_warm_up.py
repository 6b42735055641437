"""A worker makes the learners' kernels ready as it starts (app.learn.warm_up): the fits
it then runs, at the sizes and with the inputs the service gives them, compile nothing."""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

FITS_AFTER_WARM_UP = textwrap.dedent(
    """
    import json, pickle, sys
    import numpy as np
    from numba.core.registry import CPUDispatcher
    from app.learn.warm_up import compile_kernels

    def compiled():
        return {
            f"{name}.{attr}": len(value.signatures)
            for name, module in list(sys.modules.items())
            if name.startswith("app.learn")
            for attr, value in vars(module).items()
            if isinstance(value, CPUDispatcher)
        }

    compile_kernels()
    before = compiled()
    from app.learn import (
        CompRF, CompRFBuilder, DisDF, FeatureOracle, SMERF, TETE, TETESearch, TripletBoost,
        dissimilarity_from_labels, random_triplets,
    )
    rng = np.random.default_rng(1)
    X = rng.standard_normal((300, 5))
    labels = np.where(X[:, 1] > 0, "cat", "dog")
    oracle = FeatureOracle(X)
    answers = random_triplets(300, 20_000, oracle, random_state=1)
    train = np.arange(200)
    boost = TripletBoost(n_iter=3_000, n_runs=4, random_state=0).fit(
        answers, train, labels[train]
    )
    boost.partial_fit(answers[:2_000], n_iter=500)
    boost.predict(answers, np.arange(200, 300))
    TETESearch(TETE(random_state=0), dimensions=None).fit(answers, n_items=300)
    TETESearch(TETE(stochastic_from=10_000, random_state=0), dimensions=None).fit(
        answers, n_items=300
    )
    forest = CompRF(n_trees=5, answers_per_query=3, random_state=0).fit(
        np.arange(300), labels, oracle
    )
    build = CompRFBuilder(np.arange(300), labels, n_trees=5, answers_per_query=3)
    build.add_answers(oracle.answer(build.pending_queries()))
    CompRFBuilder.from_bytes(build.to_bytes()).pending_queries()
    SMERF(n_estimators=20, random_state=0).fit(X, dissimilarity_from_labels(labels))
    # As the service hands them over: D read-only (loaded, or shared from a cache), X a
    # column slice, and the distances a served model gives.
    held = dissimilarity_from_labels(labels)
    held.setflags(write=False)
    served = SMERF(n_estimators=5, random_state=0).fit(X[:, 1:4], held)
    served.predict(X[:10, 1:4], X[:, 1:4])
    stored = pickle.loads(pickle.dumps(served))  # a stored model's D is writable again
    stored.predict(X[:10, 1:4])
    grown = CompRFBuilder(np.arange(300), labels, n_trees=2)
    grown.add_answers(answers[:100])
    grown.add_answers(answers)  # its answer store regrows
    DisDF(n_estimators=20, random_state=0).fit(X, labels)
    after = compiled()
    print(json.dumps({k: [before.get(k, 0), n] for k, n in after.items() if before.get(k, 0) != n}))
    """
)


@pytest.mark.slow  # a fresh interpreter, to compile in
def test_after_the_warm_up_the_fits_a_worker_runs_compile_nothing():
    done = subprocess.run(
        [sys.executable, "-c", FITS_AFTER_WARM_UP],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    compiled_later = json.loads(done.stdout.strip().splitlines()[-1])
    assert compiled_later == {}, f"kernels the warm-up left to the first fit: {compiled_later}"
