"""A throwaway PostgreSQL server for tests and benchmarks.

The server binaries come from Debian's ``postgresql`` package. ``initdb`` refuses to
run as root, so as root the server runs as an unprivileged system user.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

SERVER_USER = "postgres"


def find_bindir() -> Path:
    """The folder holding initdb/pg_ctl, on PATH or in Debian's versioned folders."""
    on_path = shutil.which("pg_ctl")
    if on_path:
        return Path(os.path.realpath(on_path)).parent
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), reverse=True)
    if candidates:
        return Path(candidates[0]).parent
    raise RuntimeError(
        "PostgreSQL server binaries not found (pg_ctl). Install them with "
        "'apt-get install postgresql' or set CLOSER_TEST_POSTGRES_URL."
    )


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _system_tool(name: str) -> str:
    """Admin tools live in sbin, which a non-login PATH (CI, cron) may lack."""
    found = shutil.which(name, path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")
    if found is None:
        raise RuntimeError(f"'{name}' not found; it is needed to run PostgreSQL as a non-root user")
    return found


def _run_as_server_user(args: list[str], **kwargs) -> subprocess.CompletedProcess:
    if os.geteuid() == 0:
        args = [_system_tool("runuser"), "-u", SERVER_USER, "--", *args]
    return subprocess.run(args, check=True, capture_output=True, text=True, **kwargs)


def _ensure_server_user() -> None:
    if os.geteuid() != 0:
        return
    try:
        pwd.getpwnam(SERVER_USER)
    except KeyError:
        subprocess.run(
            [
                _system_tool("useradd"),
                "--system",
                "--no-create-home",
                "--shell",
                "/usr/sbin/nologin",
                SERVER_USER,
            ],
            check=True,
        )


@dataclass
class PostgresServer:
    datadir: Path
    bindir: Path
    port: int
    options: str = ""
    user: str = "closer"

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+psycopg://{self.user}@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str) -> str:
        import psycopg

        with psycopg.connect(
            f"host=127.0.0.1 port={self.port} user={self.user} dbname=postgres", autocommit=True
        ) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def crash(self) -> None:
        """Stop as a power cut would (`pg_ctl stop -m immediate`): no checkpoint, every
        connection dropped; the data stay for `start`, which recovers from the WAL."""
        _run_as_server_user(
            [str(self.bindir / "pg_ctl"), "-D", str(self.datadir), "-m", "immediate", "-w", "stop"]
        )

    def start(self) -> None:
        _run_as_server_user(
            [
                str(self.bindir / "pg_ctl"),
                "-D",
                str(self.datadir),
                "-o",
                self.options,
                "-l",
                str(self.datadir.parent / "log"),
                "-w",
                "start",
            ]
        )

    def stop(self) -> None:
        try:
            _run_as_server_user(
                [
                    str(self.bindir / "pg_ctl"),
                    "-D",
                    str(self.datadir),
                    "-m",
                    "immediate",
                    "-w",
                    "stop",
                ]
            )
        except subprocess.CalledProcessError:
            pass
        shutil.rmtree(self.datadir.parent, ignore_errors=True)


def start_postgres(durable: bool = False) -> PostgresServer:
    """Initialise and start a server on a free loopback port; ``stop()`` removes it.
    Unless `durable`, it runs without fsync: a test server holds nothing worth surviving
    a power cut (a crash suite wants the server's real promises)."""
    bindir = find_bindir()
    _ensure_server_user()
    root = Path(tempfile.mkdtemp(prefix="closer-pg-"))
    datadir = root / "data"
    if os.geteuid() == 0:
        shutil.chown(root, SERVER_USER)
    os.chmod(root, 0o755)
    _run_as_server_user(
        [
            str(bindir / "initdb"),
            "-D",
            str(datadir),
            "-U",
            "closer",
            "-A",
            "trust",
            "-E",
            "UTF8",
            "--no-sync",
            "--locale=C",
        ]
    )
    port = _free_port()
    options = f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c max_connections=100"
    if not durable:
        options += " -F"
    server = PostgresServer(datadir=datadir, bindir=bindir, port=port, options=options)
    server.start()
    deadline = time.monotonic() + 30
    while True:
        try:
            import psycopg

            psycopg.connect(f"host=127.0.0.1 port={port} user=closer dbname=postgres").close()
            return server
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
