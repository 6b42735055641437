"""The `closer` command as a user runs it: a real process, real files, real HTTP."""

import os
import re
import socket
import sqlite3
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

# Subprocesses, servers and crowds: the full run only (scripts/test --fast leaves it out).
pytestmark = pytest.mark.slow

CLOSER = [sys.executable, "-m", "app.cli"]
REPO = Path(__file__).resolve().parent.parent


def _clean_environment(**extra: str) -> dict[str, str]:
    """This process's environment without Closer's settings, plus `extra`."""
    environment = {
        k: v for k, v in os.environ.items() if not k.startswith("CLOSER_") and k != "DATABASE_URL"
    }
    environment["PYTHONPATH"] = str(REPO)
    environment.update(extra)
    return environment


def run(args, cwd, env=None, **kwargs):
    return subprocess.run(
        CLOSER + args,
        cwd=cwd,
        env=_clean_environment(**(env or {})),
        capture_output=True,
        text=True,
        timeout=120,
        **kwargs,
    )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_until_up(port: int, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while True:
        try:
            httpx.get(f"http://127.0.0.1:{port}/api/v1/health")
            return
        except httpx.ConnectError:
            assert time.monotonic() < deadline, "server did not start"
            time.sleep(0.2)


def _serve(folder, port: int, kernels: bool = False) -> subprocess.Popen:
    """`closer serve --port PORT` in `folder`, its console output readable line by line.
    Its worker makes the learners' kernels ready as it starts only if `kernels`: a few
    CPU seconds (a minute on a cold cache) that only the test of it needs."""
    return subprocess.Popen(
        CLOSER + ["serve", "--port", str(port)],
        cwd=folder,
        env=_clean_environment(CLOSER_WORKER_COMPILE_KERNELS=str(kernels).lower()),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def test_serve_migrates_the_embedded_default_and_answers(tmp_path):
    token = run(["create-token", "--name", "ada"], cwd=tmp_path).stdout.strip()
    assert token.startswith("closer_")
    port = free_port()
    server = _serve(tmp_path, port)
    try:
        banner = server.stdout.readline()
        assert f"listening on http://127.0.0.1:{port}" in banner
        deadline = time.monotonic() + 30
        while True:
            try:
                response = httpx.post(
                    f"http://127.0.0.1:{port}/api/v1/projects",
                    json={"name": "from the cli"},
                    headers={"Authorization": f"Bearer {token}"},
                )
                break
            except httpx.ConnectError:
                assert time.monotonic() < deadline, "server did not start"
                time.sleep(0.2)
        assert response.status_code == 201
        assert httpx.get(f"http://127.0.0.1:{port}/docs").status_code == 200
        assert "Sign in" in httpx.get(f"http://127.0.0.1:{port}/", follow_redirects=True).text
    finally:
        server.terminate()
        server.wait(timeout=30)
    database = tmp_path / "data" / "closer.db"
    with sqlite3.connect(database) as connection:
        assert connection.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert connection.execute("SELECT version_num FROM alembic_version").fetchone()[0]
    secret = tmp_path / "data" / "secret_key"
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600 and len(secret.read_text()) > 40
    # The database holds password and token hashes: kept as private as the secret.
    for path in (database, database.with_name("closer.db-wal")):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path


def test_an_existing_database_file_readable_by_others_is_made_private(tmp_path):
    """Issue 32, hole 13: the SQLite file was created 0644, its hashes readable by every
    local user; one made so by an older version is tightened when it is next opened."""
    from sqlalchemy import text

    from app.core.db import make_engine

    database = tmp_path / "closer.db"
    sqlite3.connect(database).execute("CREATE TABLE t (x)").connection.close()
    database.chmod(0o644)
    engine = make_engine(f"sqlite:///{database}")
    with engine.begin() as connection:
        connection.execute(text("INSERT INTO t VALUES (1)"))
    engine.dispose()
    assert stat.S_IMODE(database.stat().st_mode) == 0o600


def test_embedded_secret_is_created_once_and_kept(tmp_path):
    from app.core.config import Settings

    first = Settings(data_dir=tmp_path).effective_secret_key
    second = Settings(data_dir=tmp_path).effective_secret_key
    assert first == second and len(first) > 40


def test_production_mode_refuses_to_start_without_a_secret(tmp_path):
    result = run(["serve"], cwd=tmp_path, env={"CLOSER_MODE": "production"})
    assert result.returncode == 2
    assert "CLOSER_SECRET_KEY must be set to at least 32 bytes in production" in result.stderr
    assert not (tmp_path / "data" / "secret_key").exists()


@pytest.mark.parametrize(
    ("env", "said"),
    [
        ({"CLOSER_SECRET_KEY": "x"}, "at least 32 bytes in production mode"),
        ({"CLOSER_SECRET_KEY": "s" * 48}, "CLOSER_PUBLIC_URL must be set in production mode"),
    ],
)
def test_production_mode_wants_a_strong_secret_and_its_public_address(tmp_path, env, said):
    result = run(["serve"], cwd=tmp_path, env={"CLOSER_MODE": "production", **env})
    assert result.returncode == 2 and said in result.stderr


def test_production_mode_wants_migrations_applied_first(tmp_path):
    env = {
        "CLOSER_MODE": "production",
        "CLOSER_SECRET_KEY": "s" * 48,
        "CLOSER_PUBLIC_URL": "https://closer.example.org",
    }
    result = run(["serve"], cwd=tmp_path, env=env)
    assert result.returncode == 2
    assert re.search(r"needs migrations 0001, 0002.*closer migrate", result.stderr)
    assert run(["migrate"], cwd=tmp_path, env=env).returncode == 0


def test_migrate_up_and_down(tmp_path):
    assert run(["migrate"], cwd=tmp_path).returncode == 0
    down = run(["migrate", "--downgrade", "--revision", "base"], cwd=tmp_path)
    assert down.returncode == 0, down.stderr
    with sqlite3.connect(tmp_path / "data" / "closer.db") as connection:
        tables = {
            row[0]
            for row in connection.execute("SELECT name FROM sqlite_master WHERE type='table'")
        }
    assert "projects" not in tables


def test_a_worker_makes_the_learners_kernels_ready_as_it_starts(tmp_path):
    worker = subprocess.Popen(
        CLOSER + ["worker"],
        cwd=tmp_path,
        env=_clean_environment(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        said: list[str] = []
        reader = threading.Thread(
            target=lambda: said.extend(worker.stderr.readline() for _ in range(2)), daemon=True
        )
        reader.start()
        reader.join(timeout=300)  # a cold cache compiles them all: about a minute
        assert len(said) == 2, "the worker said nothing of its kernels in 5 minutes"
        assert said[0].startswith("worker "), said
        assert re.fullmatch(r"learners' kernels ready in \d+\.\d s\n", said[1]), said
    finally:
        worker.terminate()
        worker.wait(timeout=30)


def test_the_embedded_defaults_worker_makes_the_kernels_ready_as_it_starts(tmp_path):
    """`closer serve` runs its worker in the web process: its first fit, like a `closer
    worker`'s, finds the kernels ready instead of waiting seconds for them."""
    server = _serve(tmp_path, free_port(), kernels=True)
    try:
        said: list[str] = []

        def read_until_ready() -> None:
            for line in server.stdout:
                said.append(line)
                if "kernels ready" in line:
                    return

        reader = threading.Thread(target=read_until_ready, daemon=True)
        reader.start()
        reader.join(timeout=300)  # a cold cache compiles them all: about a minute
        assert said and re.fullmatch(r"learners' kernels ready in \d+\.\d s\n", said[-1]), said
    finally:
        server.terminate()
        server.wait(timeout=30)


@pytest.mark.parametrize("url_env", ["DATABASE_URL", "CLOSER_DATABASE_URL"])
def test_database_url_switches_the_database(tmp_path, url_env):
    from app.core.config import Settings

    os.environ[url_env] = "postgresql+psycopg://u@h/db"
    try:
        settings = Settings(data_dir=tmp_path)
    finally:
        del os.environ[url_env]
    assert settings.resolved_database_url == "postgresql+psycopg://u@h/db"
    assert not settings.is_sqlite


def test_demo_creates_a_digits_project_with_a_build_once(tmp_path):
    first = run(["demo", "--items", "40"], cwd=tmp_path, env={"CLOSER_PORT": "9123"})
    assert first.returncode == 0, first.stderr
    found = re.search(
        r"created project 1 'Handwritten digits \(demo\)': build 1 of 10 trees needs about "
        r"([\d,]+) more answers, ([\d,]+) of them open now; rate at "
        r"http://127.0.0.1:9123/r/\S+",
        first.stdout,
    )
    assert found, first.stdout
    needed, open_now = (int(group.replace(",", "")) for group in found.groups())
    assert needed > 2 * open_now  # the whole build, not the first level of its trees
    again = run(["demo", "--items", "40"], cwd=tmp_path, env={"CLOSER_PORT": "9124"})
    assert again.returncode == 0 and again.stdout.startswith("already there: project 1")
    assert "http://127.0.0.1:9124/r/" in again.stdout
    with sqlite3.connect(tmp_path / "data" / "closer.db") as db:
        items = db.execute(
            "SELECT count(*), count(label), count(image_file), count(features) FROM items"
        ).fetchone()
        assert items == (40, 40, 40, 40)
        assert db.execute("SELECT status FROM builds").fetchall() == [("running",)]
        instructions, question = db.execute(
            "SELECT instructions, question FROM projects"
        ).fetchone()
        assert "the shape of the strokes, not by which number" in instructions
        assert question == "Which of the two is drawn more like the one on top?"
        assert db.execute("SELECT kind, status FROM jobs").fetchall() == [
            ("comprf_build_step", "queued")
        ]
    assert len(list((tmp_path / "data" / "media").rglob("*.png"))) == 40

    port = free_port()  # the server says where to rate the demo, on the port it serves
    server = _serve(tmp_path, port)
    try:
        assert "listening on" in server.stdout.readline()
        assert f"Workspace: open http://127.0.0.1:{port}/login/link?key=" in (
            server.stdout.readline()
        )
        banner = server.stdout.readline()
        assert f"Demo study: rate at http://127.0.0.1:{port}/r/" in banner
        assert "needs about" in banner
    finally:
        server.terminate()
        server.wait(timeout=30)


@pytest.fixture
def served(tmp_path):
    """`closer serve` on the embedded default, its port given as CLOSER_PORT only."""
    port = free_port()
    env = {"CLOSER_PORT": str(port), "CLOSER_WORKER_COMPILE_KERNELS": "false"}
    server = subprocess.Popen(
        CLOSER + ["serve"],
        cwd=tmp_path,
        env=_clean_environment(**env),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wait_until_up(port)
    try:
        yield port, env
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_simulate_says_in_one_line_when_no_server_answers(tmp_path):
    port = free_port()
    result = run(
        ["simulate", "--project", "1", "--token", "t", "--seconds", "1"],
        cwd=tmp_path,
        env={"CLOSER_PORT": str(port)},
    )
    assert result.returncode == 2
    assert f"no Closer server answers at http://127.0.0.1:{port}" in result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_simulate_finds_the_server_by_closer_port_and_reports_plainly(tmp_path, served):
    port, env = served
    token = run(["create-token", "--name", "sim"], cwd=tmp_path).stdout.strip()
    auth = {"Authorization": f"Bearer {token}"}
    api = f"http://127.0.0.1:{port}/api/v1"
    project = httpx.post(f"{api}/projects", json={"name": "tiny"}, headers=auth).json()["id"]
    items = "key,features\ncircle,0 0\noval,0.2 0.1\nsquare,3 3\ntriangle,3.5 2.5\n"
    uploaded = httpx.post(
        f"{api}/projects/{project}/items", headers=auth, files={"file": ("i.csv", items)}
    )
    assert uploaded.status_code == 201

    closed = run(
        ["simulate", "--project", str(project), "--token", token, "--answers", "5"],
        cwd=tmp_path,
        env=env,
    )
    assert closed.returncode == 2 and "Traceback" not in closed.stderr
    assert f"project {project}'s study link is closed: raters cannot join" in closed.stderr
    opened = httpx.put(f"{api}/projects/{project}/link", headers=auth, json={"state": "open"})
    assert opened.status_code == 200

    wrong = run(
        ["simulate", "--project", str(project), "--token", token, "--build", "99"],
        cwd=tmp_path,
        env=env,
    )
    assert wrong.returncode == 2 and "Traceback" not in wrong.stderr
    assert "build 99: the server answered 404" in wrong.stderr

    result = run(
        [
            "simulate",
            "--project",
            str(project),
            "--token",
            token,
            "--raters",
            "1",
            "--answers",
            "30",
            "--think-time",
            "0",
        ],
        cwd=tmp_path,
        env=env,
    )
    assert result.returncode == 0, result.stderr
    # 4 items hold 24 distinct comparisons: the person sees them all, ends early with a
    # code, and comes back as a new participant for the last 6.
    assert "answers stored: 30 in" in result.stdout
    assert "2 started: 0 reached the study's answers per rater, 1 ended early" in result.stdout


def _csrf(page: str) -> str:
    return re.search(r'name="csrf_token" value="([0-9a-f]+)"', page).group(1)


def test_researchers_sign_in_by_console_link_by_password_and_tokens_are_revoked(tmp_path):
    created = run(
        ["create-researcher", "--email", "Ada@Lab.example"],
        cwd=tmp_path,
        env={"CLOSER_RESEARCHER_PASSWORD": "a long passphrase"},
    )
    assert created.returncode == 0, created.stderr
    assert "created ada@lab.example" in created.stdout
    short = run(
        ["create-researcher", "--email", "bo@lab.example"],
        cwd=tmp_path,
        env={"CLOSER_RESEARCHER_PASSWORD": "short"},
    )
    assert short.returncode == 2 and "at least 10 characters" in short.stderr
    token = run(["create-token", "--name", "ci", "--label", "nightly"], cwd=tmp_path).stdout.strip()
    port = free_port()
    server = _serve(tmp_path, port)
    base = f"http://127.0.0.1:{port}"
    try:
        link = None
        for _ in range(10):
            line = server.stdout.readline()
            found = re.search(r"Workspace: open (\S+) to sign in", line)
            if found:
                link = found.group(1)
                break
        assert link is not None and link.startswith(f"{base}/login/link?key=")
        wait_until_up(port)
        with httpx.Client(base_url=base) as browser:
            home = browser.get(link, follow_redirects=True)
            assert home.status_code == 200 and "admin (admin)" in home.text
        with httpx.Client(base_url=base) as browser:
            assert browser.get("/").headers.get("location") == "/login"
            form = browser.get("/login").text
            signed_in = browser.post(
                "/login",
                data={
                    "email": "ada@lab.example",
                    "password": "a long passphrase",
                    "csrf_token": _csrf(form),
                },
            )
            assert signed_in.status_code == 303 and signed_in.headers["location"] == "/"
            assert "Ada@Lab.example".lower() in browser.get("/").text
        bearer = {"Authorization": f"Bearer {token}"}
        assert httpx.get(f"{base}/api/v1/projects", headers=bearer).status_code == 200
        project = httpx.post(f"{base}/api/v1/projects", json={"name": "p"}, headers=bearer).json()
        scoped = run(
            [
                "create-token",
                "--name",
                "ci",
                "--scope",
                "predict",
                "--projects",
                str(project["id"]),
            ],
            cwd=tmp_path,
        ).stdout.strip()
        predict = {"Authorization": f"Bearer {scoped}"}
        models = f"{base}/api/v1/projects/{project['id']}/models"
        assert httpx.get(models, headers=predict).status_code == 200
        assert httpx.get(f"{base}/api/v1/projects", headers=predict).status_code == 403
        wrong = run(["create-token", "--name", "ci", "--scope", "root"], cwd=tmp_path)
        assert wrong.returncode == 2 and "'root' is not one of predict" in wrong.stderr
        child = httpx.post(f"{base}/api/v1/tokens", json={"scope": "read"}, headers=bearer).json()
        revoked = run(["revoke-token", token[:13]], cwd=tmp_path)
        assert revoked.returncode == 0 and "nightly" in revoked.stdout, revoked.stderr
        assert "and the 1 token made with it" in revoked.stdout
        assert httpx.get(f"{base}/api/v1/projects", headers=bearer).status_code == 401
        child_bearer = {"Authorization": f"Bearer {child['token']}"}
        assert httpx.get(f"{base}/api/v1/projects", headers=child_bearer).status_code == 401
    finally:
        server.terminate()
        server.wait(timeout=30)
