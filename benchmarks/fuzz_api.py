"""Schemathesis against Closer for a long while, on both databases, with a researcher's
and an admin's token (issue 15's fuzzing promise; tests/test_fuzzing.py is the short run
CI makes). Every check schemathesis has runs except the one that counts business rules
(a build needs labelled items) as failures; each run's report is kept.

    .venv/bin/python benchmarks/fuzz_api.py [--seconds 600] [--workers 2]
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from app.auth.service import create_token  # noqa: E402
from app.core import migrations  # noqa: E402
from app.core.db import make_engine, make_session_factory, unit_of_work  # noqa: E402
from tests.support.fuzz import run_schemathesis, seed  # noqa: E402
from tests.support.postgres import start_postgres  # noqa: E402
from tests.support.service import ServiceProcesses  # noqa: E402


def _tokens(url: str) -> dict[str, str]:
    engine = make_engine(url)
    try:
        with unit_of_work(make_session_factory(engine)) as session:
            return {
                "researcher": create_token(session=session, researcher_name="fuzzer"),
                "admin": create_token(session=session, researcher_name="root", admin=True),
            }
    finally:
        engine.dispose()


def _summary(report: str) -> str:
    generated = re.search(r"(\d+) generated", report)
    failures = re.findall(r"❌ (ST\d+ [^:\n]+): (\d+)", report)
    found = ", ".join(f"{name} {count}" for name, count in failures) or "none"
    return f"{generated.group(1) if generated else '?'} cases, failures: {found}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=600, help="per database and token")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="closer-fuzz-"))
    server = start_postgres()
    failed = False
    try:
        databases = {
            "sqlite": f"sqlite:///{folder / 'fuzz.db'}",
            "postgresql": server.create_database("fuzz_bench"),
        }
        for backend, url in databases.items():
            migrations.upgrade(url)
            tokens = _tokens(url)
            service = ServiceProcesses(
                url, folder / backend, web_processes=1 if backend == "sqlite" else 2
            ).start()
            try:
                for who, token in tokens.items():
                    seed(service.url, token)
                    log = folder / f"{backend}-{who}.log"
                    status = run_schemathesis(service.url, token, args.seconds, log, args.workers)
                    failed |= status != 0
                    print(f"{backend:<11} {who:<10} {_summary(log.read_text())}  ({log})")
            finally:
                service.stop()
    finally:
        server.stop()
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
