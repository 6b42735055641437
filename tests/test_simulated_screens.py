"""The simulated crowd answers screens as the rater API asks: an odd-one-out with one
key, a rank screen with its number of keys from the items shown, checks right."""

from __future__ import annotations

import numpy as np
import pytest

from app.simulate import _Items

pytestmark = pytest.mark.one_database  # no database: the crowd's answers alone


def _items(noise: float = 0.0, model: str = "uniform") -> _Items:
    X = np.arange(12, dtype=float)[:, None]
    exported = [{"key": f"k{i}", "features": X[i].tolist()} for i in range(12)]
    return _Items(exported, noise=noise, seed=0, noise_model=model)


def _card(key: str) -> dict:
    return {"key": key, "text": None, "image_url": None}


def test_a_rank_screen_is_answered_with_the_nearest_keys_in_order():
    crowd = _items()
    screen = {
        "format": "rank",
        "reference": _card("k5"),
        "items": [_card(k) for k in ("k0", "k9", "k6", "k3", "k11")],
        "picks": 2,
    }
    assert crowd.choose(screen) == {"picks": ["k6", "k3"]}
    check = {**screen, "items": [_card(k) for k in ("k0", "k5", "k9", "k6")]}
    assert crowd.choose(check) == {"picks": ["k5", "k6"]}


def test_an_odd_one_out_is_answered_with_one_key_and_its_checks_right():
    crowd = _items(noise=0.2, model="human")
    screen = {"format": "odd_one_out", "items": [_card(k) for k in ("k1", "k2", "k11")], "picks": 1}
    answers = [crowd.choose(screen)["picks"] for _ in range(200)]
    assert all(len(picks) == 1 for picks in answers)
    assert np.mean([picks == ["k11"] for picks in answers]) > 0.9  # a clear one
    check = {"format": "odd_one_out", "items": [_card(k) for k in ("k4", "k7", "k4")], "picks": 1}
    assert {tuple(crowd.choose(check)["picks"]) for _ in range(50)} == {("k7",)}
