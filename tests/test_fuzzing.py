"""Schemathesis on both databases, a short run (issue 15): no server error and no answer
that breaks the published schema. benchmarks/fuzz_api.py runs the long one."""

from __future__ import annotations

import pytest

from app.auth.service import create_token
from app.core import migrations
from app.core.db import make_engine, make_session_factory, unit_of_work
from tests.support.fuzz import fuzz_seed, run_schemathesis, seed
from tests.support.service import ServiceProcesses

# Subprocesses, servers and crowds: the full run only (scripts/test --fast leaves it out).
pytestmark = pytest.mark.slow

# Per database. The seed changes daily (tests/support/fuzz.py), so the short runs add up;
# benchmarks/fuzz_api.py is the long run. Its server and schemathesis keep two processes
# busy the whole time, beside the rest of the suite.
SECONDS = 12


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_generated_requests_find_no_server_error_and_no_schema_violation(
    backend, make_database_url, tmp_path
):
    url = make_database_url(backend, "fuzz")
    migrations.upgrade(url)
    engine = make_engine(url)
    with unit_of_work(make_session_factory(engine)) as session:
        token = create_token(session=session, researcher_name="fuzzer")
    engine.dispose()
    service = ServiceProcesses(url, tmp_path / "data", web_processes=1, workers=1).start()
    try:
        seed(service.url, token)
        log = tmp_path / "schemathesis.log"
        day_seed = fuzz_seed()
        status = run_schemathesis(service.url, token, SECONDS, log, seed_value=day_seed)
    finally:
        service.stop()
    report = log.read_text()
    assert status == 0, f"CLOSER_FUZZ_SEED={day_seed} runs it again\n" + report[-6000:]
    assert "Server error" not in report
