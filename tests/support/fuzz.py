"""Schemathesis against a running Closer, as its users' clients would meet it: every
operation of the OpenAPI schema, with generated valid and invalid input, checked for
server errors and for answers that break the schema (status codes, bodies, headers,
content types, Allow on 405). Used by tests/test_fuzzing.py (a short run in CI) and by
benchmarks/fuzz_api.py (a long one, with a researcher's and an admin's token)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx

API = "/api/v1"
# Business rules (a build needs labelled items, a model kind its features) reject some
# requests the schema allows; that check would count each of them as a failure.
EXCLUDED_CHECKS = "positive_data_acceptance"
# Revoking a token: an admin token may revoke itself, and the fuzzer's would (ids start at
# 1, which it tries first), leaving the rest of the run to 401s. tests/test_tokens.py and
# the access matrix try this route instead.
EXCLUDED_OPERATIONS = ("DELETE /api/v1/tokens/{token_id}",)


def seed(url: str, token: str) -> None:
    """A project with labelled items and features, a build and a model, so the run
    reaches past the 404s of an empty service."""
    auth = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=url, headers=auth, timeout=30) as client:
        project = client.post(f"{API}/projects", json={"name": "fuzzed"}).json()
        rows = "key,label,features\n" + "\n".join(
            f"k{i},{i % 3},{i} {i % 5} {i % 7}" for i in range(30)
        )
        client.post(f"{API}/projects/{project['id']}/items", files={"file": ("i.csv", rows)})
        client.post(f"{API}/projects/{project['id']}/builds", json={"n_trees": 2})
        client.post(
            f"{API}/projects/{project['id']}/models",
            json={"name": "t", "kind": "tete", "train": False},
        )


def fuzz_seed() -> int:
    """The day's seed (CLOSER_FUZZ_SEED to run one again): each day's runs try other
    cases than the last's, so the short runs add up, and a failure can be replayed."""
    return int(os.environ.get("CLOSER_FUZZ_SEED") or time.time() // 86_400)


def run_schemathesis(
    url: str, token: str, seconds: int, log: Path, workers: int = 1, seed_value: int = 1
) -> int:
    """The exit status of one run (0: no failure); its report goes to `log`.

    More than one worker races requests against each other (how the 409 on a write
    racing a delete was found), but its threads parse hypothesis' lambdas with ast.parse
    at once, which CPython 3.11 before 3.11.9 can fail with "AST constructor recursion
    depth mismatch" (python/cpython#106905): a crash of the fuzzer, not of Closer. The
    short run in CI therefore uses one."""
    command = [
        str(Path(sys.executable).with_name("schemathesis")),
        "run",
        f"{url}/openapi.json",
        "--header",
        f"Authorization: Bearer {token}",
        "--checks",
        "all",
        "--exclude-checks",
        EXCLUDED_CHECKS,
        *(option for name in EXCLUDED_OPERATIONS for option in ("--exclude-name", name)),
        "--max-time",
        str(seconds),
        "--workers",
        str(workers),
        "--seed",
        str(seed_value),
    ]
    with open(log, "w") as handle:
        # Its cache goes where it runs: beside the log, not into the repository.
        return subprocess.run(
            command, stdout=handle, stderr=subprocess.STDOUT, cwd=log.parent
        ).returncode
