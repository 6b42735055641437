"""scikit-learn's estimator checks over every learner of app/learn.

DisDF takes (X, y) as scikit-learn's estimators do: it runs every check. The others
learn from triplets (CompRF from an oracle's answers, TripletBoost from triplets and
labels, t-ETE from triplets alone, SMERF from features and a dissimilarity matrix), so
the checks that feed them generated (X, y) data do not apply; the ones that hold for
any estimator do: the constructor stores its parameters untouched, get/set_params,
clone and repr, and every parameter declared in `_parameter_constraints` and refused
with scikit-learn's own message before any work. For CompRF and TripletBoost, whose
fit takes more than (X, y), that last check fits through an adapter that turns X into
the answers of a rater who sees the features.
"""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.utils.estimator_checks import (
    check_do_not_raise_errors_in_init_or_set_params,
    check_estimator_cloneable,
    check_estimator_repr,
    check_get_params_invariance,
    check_no_attributes_set_in_init,
    check_param_validation,
    check_parameters_default_constructible,
    check_set_params,
    parametrize_with_checks,
)

from app.learn import (
    SMERF,
    TETE,
    ChoiceEmbedding,
    CompRF,
    DisDF,
    FeatureOracle,
    TETESearch,
    TripletBoost,
    random_triplets,
)


class CompRFOnFeatures(CompRF):
    """CompRF fitted on (X, y): its queries answered by distances between rows of X."""

    def fit(self, X, y):  # type: ignore[override]
        return super().fit(np.arange(len(y)), y, FeatureOracle(np.asarray(X)))


class TripletBoostOnFeatures(TripletBoost):
    """TripletBoost fitted on (X, y): random triplets answered by distances in X."""

    def fit(self, X, y):  # type: ignore[override]
        triplets = random_triplets(len(y), 20 * len(y), FeatureOracle(np.asarray(X)), 0)
        return super().fit(triplets, np.arange(len(y)), y)


LEARNERS = [
    CompRF(n_trees=2),
    TripletBoost(n_iter=10, n_runs=2),
    TETE(n_components=2, t=1.0, max_iter=20),
    TETESearch(TETE(max_iter=20), losses=("t-STE", "t-ETE"), dimensions=(1, 2)),
    SMERF(n_estimators=3),
    DisDF(n_estimators=3),
    ChoiceEmbedding(n_components=2, max_iter=2),
]
ANY_ESTIMATOR = [
    check_no_attributes_set_in_init,
    check_parameters_default_constructible,
    check_get_params_invariance,
    check_set_params,
    check_estimator_cloneable,
    check_estimator_repr,
    check_do_not_raise_errors_in_init_or_set_params,
]
FITTED_ON_FEATURES = {CompRF: CompRFOnFeatures, TripletBoost: TripletBoostOnFeatures}


@pytest.mark.parametrize("check", ANY_ESTIMATOR, ids=lambda check: check.__name__)
@pytest.mark.parametrize("learner", LEARNERS, ids=lambda learner: type(learner).__name__)
def test_every_learner_keeps_scikit_learns_estimator_contract(learner, check):
    check(type(learner).__name__, learner)


@pytest.mark.parametrize("learner", LEARNERS, ids=lambda learner: type(learner).__name__)
def test_every_parameter_is_declared_and_refused_before_any_work(learner):
    adapter = FITTED_ON_FEATURES.get(type(learner))
    checked = learner if adapter is None else adapter(**learner.get_params())
    check_param_validation(type(checked).__name__, checked)


# Small forests, one level, two folds: the checks fit it some two hundred times.
@parametrize_with_checks(
    [DisDF(n_estimators=2, n_forests=1, max_levels=1, n_folds=2, fw_iter=5, random_state=0)]
)
def test_disdf_passes_every_check_of_a_classifier(estimator, check):
    check(estimator)
