"""The README's walk-through, run as a user runs it: `scripts/run` starts the service on
the embedded default with a fresh data folder, and the shell blocks from "Five minutes
with the API" to the models run verbatim, one after the other, in one shell, as a user
pastes them into a second terminal. Every HTTP request they make is recorded (a `curl`
that notes each status), and each must succeed, except the one the README says is
rejected. Not run here: `scripts/test` (this suite) and the Docker commands (no Docker
engine on our machines)."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

# Subprocesses, servers and crowds: the full run only (scripts/test --fast leaves it out).
pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parent.parent
FIRST, LAST = "## Five minutes with the API", "### Upload formats"


def walk_through_blocks(readme: str) -> list[str]:
    """The ```sh blocks of the walk-through, in order."""
    section = readme[readme.index(FIRST) : readme.index(LAST)]
    return re.findall(r"^```sh\n(.*?)^```$", section, flags=re.S | re.M)


def test_the_walk_through_has_the_blocks_a_reader_sees():
    blocks = walk_through_blocks((REPO / "README.md").read_text())
    assert len(blocks) == 4
    assert "closer create-token" in blocks[0] and "closer simulate" in blocks[1]
    assert all("builds/1" not in block and "models/1" not in block for block in blocks)


def python_blocks(first: str, last: str) -> list[str]:
    """The ```python blocks of the README between the headings `first` and `last`."""
    readme = (REPO / "README.md").read_text()
    section = readme[readme.index(first) : readme.index(last)]
    return re.findall(r"^```python\n(.*?)^```$", section, flags=re.S | re.M)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _recording_curl(folder: Path, log: Path) -> Path:
    """A `curl` that behaves as curl does and appends each response's status to `log`."""
    real = shutil.which("curl")
    if real is None:
        pytest.fail("curl is missing: the README uses it (scripts/test installs it)")
    folder.mkdir()
    shim = folder / "curl"
    shim.write_text(
        "#!/usr/bin/env bash\n"
        f"exec {real} \"$@\" -w '%{{stderr}}HTTP %{{http_code}} %{{method}} %{{url_effective}}\\n'"
        f' 2>>"{log}"\n'
    )
    shim.chmod(0o755)
    return folder


@pytest.fixture
def service(tmp_path):
    """`scripts/run` as the README starts it, on a free port and a fresh data folder."""
    port = _free_port()
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("CLOSER_") and key != "DATABASE_URL"
    }
    env.update(CLOSER_PORT=str(port), CLOSER_DATA_DIR=str(tmp_path / "data"))
    log = open(tmp_path / "server.log", "w")
    server = subprocess.Popen(
        ["scripts/run"],
        cwd=REPO,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    deadline = time.monotonic() + 180
    try:
        while True:
            assert server.poll() is None, (tmp_path / "server.log").read_text()
            try:
                if httpx.get(f"http://127.0.0.1:{port}/api/v1/health").status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "scripts/run did not start the service"
            time.sleep(0.3)
        yield env
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
        log.close()


def test_the_readme_walk_through_runs_verbatim(service, tmp_path):
    server_log = tmp_path / "server.log"
    assert "Demo study: rate at http://127.0.0.1:" in server_log.read_text()
    # The workspace link the server prints signs in as the local admin, who sees the demo.
    link = re.search(r"Workspace: open (\S+) to sign in", server_log.read_text()).group(1)
    with httpx.Client() as browser:
        projects = browser.get(link, follow_redirects=True)
        assert projects.status_code == 200 and "Handwritten digits (demo)" in projects.text
    blocks = walk_through_blocks((REPO / "README.md").read_text())
    script = "set -eo pipefail\n" + "\n".join(blocks)
    work = tmp_path / "terminal"  # the second terminal's folder: the checkout's .venv in it
    work.mkdir()
    (work / ".venv").symlink_to(REPO / ".venv")
    http_log = tmp_path / "http.log"
    shims = _recording_curl(tmp_path / "shims", http_log)
    env = {**service, "PATH": f"{shims}:{service['PATH']}"}
    started = time.monotonic()
    run = subprocess.run(
        ["bash", "-c", script], cwd=work, env=env, capture_output=True, text=True, timeout=600
    )
    seconds = time.monotonic() - started
    http = [line.split(" ", 3)[1:] for line in http_log.read_text().splitlines()]
    http = [(int(status), method, url) for status, method, url in http if status.isdigit()]
    report = (
        f"exit {run.returncode} after {seconds:.0f} s\n--- stdout (end)\n{run.stdout[-4000:]}"
        f"\n--- stderr (end)\n{run.stderr[-4000:]}\n--- http\n"
        + "\n".join(f"{s} {m} {u}" for s, m, u in http[-40:])
    )
    (tmp_path / "walk-through.txt").write_text(run.stdout)  # what the reader sees
    assert run.returncode == 0, report
    assert len(http) > 40, report
    assert [row for row in http if row[0] >= 500] == [], report
    rejected = [row for row in http if row[0] >= 400]
    # The bad upload, the predict token's export and the viewer's rename, only they.
    assert len(rejected) == 3, report
    assert rejected[0][0] == 422 and rejected[0][2].endswith("/triplets"), report
    assert rejected[1][0] == 403 and rejected[1][2].endswith("/triplets/export"), report
    assert rejected[2][:2] == (403, "PATCH") and "/projects/" in rejected[2][2], report
    assert '"role":"viewer","status":"joined"' in run.stdout, report
    # The last command polls the CompRF routing: answered by the simulated crowd; the
    # one before downloads its labels (an even split of the trees is a tie, no label).
    lines = run.stdout.strip().splitlines()
    routed = json.loads(lines[-1])
    assert routed["status"] == "complete", report
    assert set(routed["result"]) == {"p100", "p101", "p102"}
    for found in routed["result"].values():
        assert found["label"] in ("a", "b", "c") or set(found["tied"]) <= {"a", "b", "c"}
    header = lines.index("key,label,probability,support,tied")
    table = lines[header + 1 : -1]
    # Before it, which model labels the test split best: the forest among them, measured
    # on the three test items it routed, of which those not tied got a label.
    standings = {row["kind"]: row for row in json.loads(lines[header - 1])["standings"]}
    labelled = sum(found["label"] is not None for found in routed["result"].values())
    assert standings["comprf"]["test"]["coverage"] == pytest.approx(labelled / 20)
    assert "tripletboost" in standings
    assert {row.split(",")[0]: row.split(",")[1] or None for row in table} == {
        key: found["label"] for key, found in routed["result"].items()
    }


def test_the_readme_library_examples_run_as_written(tmp_path):
    """The Python blocks of "The learning library", in one interpreter, in order."""
    blocks = python_blocks("## The learning library", "## How it is built")
    assert len(blocks) == 5
    run = subprocess.run(
        [sys.executable, "-c", "\n".join(blocks)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-4000:]


@pytest.mark.one_database  # the client reads the exports; tests/test_parquet_exports.py has both
def test_the_readme_python_client_example_runs_against_a_live_server(settings, new_token):
    """The Python block of "The Python client", as a notebook runs it: against a server
    with its worker in process, a token in CLOSER_TOKEN. Its uploads are stored, its
    models serve, and the refused upload is a CloserError naming the unknown key."""
    from tests.support.browser import serve_in_thread

    (block,) = python_blocks("### The Python client", "## Configuration")
    token = new_token("analyst")["Authorization"].split()[1]
    served = settings.model_copy(update={"worker_in_process": True})
    with serve_in_thread(served) as url:
        run = subprocess.run(
            [sys.executable, "-c", block],
            cwd=REPO,
            env={**os.environ, "CLOSER_URL": url, "CLOSER_TOKEN": token},
            capture_output=True,
            text=True,
            timeout=600,
        )
    assert run.returncode == 0, run.stderr[-4000:]
    out = run.stdout
    assert "'rows': " in out and "'replayed': False" in out, out[:2000]
    assert re.search(r"^response_time_ms\s+Int32$", out, re.M), out[:2000]  # typed, nullable
    assert "Two clusters, from Python" in out and "0 judgements" in out
    assert "dim_0" in out and "answered" in out
    # Ten unlabelled points of two clusters far apart, each labelled by its cluster.
    labels = re.findall(r"^q(\d\d)\s+(near|far|None)\s+\d+$", out, flags=re.M)
    assert len(labels) == 10, out[-2000:]
    assert [key for key, _ in labels] == [f"{i:02d}" for i in range(3, 40, 4)]
    assert all(label == ("near" if int(key) < 20 else "far") for key, label in labels), labels
    assert re.search(r"^422 from POST .*row 2, column 'farther': unknown item 'nope'", out, re.M)
