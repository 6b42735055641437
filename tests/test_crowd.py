"""The whole loop as users run it, on PostgreSQL: `closer serve` with two web processes,
a `closer worker`, and a simulated crowd (`closer simulate`'s engine) answering over
HTTP with 10% noise and 3 answers per query, while the web server is killed with SIGKILL
twice. The build completes, no acknowledged answer is lost or stored twice, and the
forest classifies held-out digits about as well as the library's offline build.
(benchmarks/crowd_build.py runs the same at the issue's size: 50 raters, 20 trees on
500 digits.)"""

from __future__ import annotations

import pytest

from app.core import migrations
from app.core.db import make_engine, make_session_factory
from tests.support.crowd import crowd_build

# Subprocesses, servers and crowds: the full run only (scripts/test --fast leaves it out).
pytestmark = pytest.mark.slow


@pytest.fixture
def database(make_database_url):
    url = make_database_url("postgresql", "crowd")
    migrations.upgrade(url)
    engine = make_engine(url)
    yield url, make_session_factory(engine)
    engine.dispose()


def test_a_crowd_builds_a_forest_over_http_through_two_server_kills(database, tmp_path):
    url, sessions = database
    result = crowd_build(
        database_url=url,
        sessions=sessions,
        folder=tmp_path / "data",
        n_items=200,
        n_test=100,
        trees=3,
        raters=10,
        noise=0.1,
        answers_per_query=3,
        # About 135 answers a second here: at full speed the raters mostly answered filler
        # (random triplets) while the worker stepped the build level by level, and the
        # test spent its time serving them.
        think_time=0.05,
        kill_at=(1000, 3000),  # of ~6,000 answers
        timeout=900,
    )
    print(result.report.summary(), result.accuracy, result.offline_accuracy)
    assert result.report.build_status == "complete", result.report.summary()
    assert result.kills == 2 and result.report.retries > 0  # the kills were felt
    assert len(set(result.report.acknowledged)) == result.acknowledged
    assert result.stored_twice == 0 and result.acknowledged_missing == 0
    # Three noisy trees on 100 digits, tested on 100 more: offline builds with 16 seeds
    # score 0.71 +- 0.03 (lowest 0.66), so two builds differ by 0.04 (one sd) by chance;
    # 0.2 is five sd. (Half the digits train: a steadier figure than few test digits give,
    # and 1,600 queries asked 3 times each, where 150 training digits took 2,750.)
    assert result.accuracy > 0.6
    assert abs(result.accuracy - result.offline_accuracy) <= 0.2
