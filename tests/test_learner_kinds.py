"""A learner kind is one object (app/training/kinds): every kind the database names has
one, what it declares holds together, and no code outside the kinds' modules branches on
a kind's name."""

from __future__ import annotations

import ast
import re

import pytest

from app.models import ModelKind
from app.training import kinds
from tests.support.code import comparisons, template_lines

pytestmark = pytest.mark.one_database  # no database: the code alone


def test_every_stored_kind_is_one_registered_object():
    assert set(kinds.LEARNERS) == set(ModelKind)
    for kind, learner in kinds.LEARNERS.items():
        assert learner.kind is kind and kinds.of(kind.value) is learner
        learner.params()  # its parameters' defaults are valid parameters


def test_what_each_kind_declares_holds_together():
    for learner in kinds.every():
        if learner.serves_embedding or learner.embeds_answers:
            assert learner.serves_distances, learner
        if learner.passive:
            assert learner.answers_needed and not learner.from_build, learner
        if learner.from_build:
            assert learner.places_new_items_by is None and not learner.serves_distances
        if learner.model_reference is not None:
            assert learner.model_reference in learner.params.model_fields, learner


def test_no_module_outside_the_kinds_branches_on_a_kind_name():
    """A comparison with a kind (`kind == "smerf"`, `kind is ModelKind.comprf`) outside
    app/training/kinds is knowledge of a kind kept elsewhere; the templates likewise. A
    kind whose name is an everyday word elsewhere ("choice": a triplet's answer, a
    questionnaire's or a setting's kind of field) counts where the other side is a
    model's kind."""
    names = {kind.value for kind in ModelKind}
    distinct = names - EVERYDAY

    def names_a_kind(side: ast.expr) -> bool:
        if isinstance(side, ast.Constant):
            return side.value in distinct
        return (
            isinstance(side, ast.Attribute)
            and isinstance(side.value, ast.Name)
            and side.value.id == "ModelKind"
        )

    def a_models_kind_with_an_everyday_name(node: ast.Compare) -> bool:
        sides = (node.left, *node.comparators)
        everyday = any(isinstance(s, ast.Constant) and s.value in EVERYDAY for s in sides)
        return everyday and any(re.search(MODELS_KIND, ast.unparse(s)) for s in sides)

    listed = "|".join(sorted(distinct))
    found = comparisons(
        names_a_kind, skip={"kinds", "learn"}, whole=a_models_kind_with_an_everyday_name
    )
    found += template_lines(rf"""kind[.\w]*\s*(==|!=|in)\s*[("']*({listed})""")
    everyday = "|".join(sorted(EVERYDAY))
    found += template_lines(rf"""{MODELS_KIND}\s*(==|!=|in)\s*[("']*({everyday})\b""")
    assert found == []


# Kinds named by words the code uses otherwise too.
EVERYDAY = {"choice"}
# A model's kind as code or a template names it: `model.kind`, `card.model.kind`,
# `learner.kind`, `fitted.kind`, `ModelKind(...)`.
MODELS_KIND = r"(?:(?:model|learner|fitted|version)[.\w]*\.kind\b|ModelKind)"
