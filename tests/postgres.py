"""A throwaway PostgreSQL server for the test suite (and the benchmark), started once per session.

The server binaries are found on ``PATH`` or in ``/usr/lib/postgresql/*/bin`` (Debian's package
``postgresql``, which ``.ci/run`` installs). ``initdb`` refuses to run as root, so under root the
server runs as the ``postgres`` system user, in a fresh temporary directory it owns, listening on
127.0.0.1 on a free port with trust authentication, fsync off. `stop` kills it (immediate mode)
and removes the directory.

Tests use the ``postgres_url`` / ``postgres_engine`` fixtures of ``tests/conftest.py``, or
`pg_store` (each call a fresh table prefix, so every test gets clean tables).
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from failover.stores.backends.sql import SqlStore, make_engine

SKIP_REASON = (
    "PostgreSQL server binaries not found; install the Debian package `postgresql` "
    "(.ci/run does) to run these tests"
)
DATABASE = "failover_test"
USER = "postgres"


def find_bin_dir() -> Path | None:
    """The folder holding ``initdb`` and ``pg_ctl``, or ``None``."""
    on_path = shutil.which("pg_ctl")
    if on_path and shutil.which("initdb"):
        return Path(os.path.realpath(on_path)).parent
    found = [Path(p).parent for p in glob.glob("/usr/lib/postgresql/*/bin/pg_ctl")]
    found.sort(key=lambda d: int(d.parent.name) if d.parent.name.isdigit() else 0)
    return found[-1] if found else None  # the newest version


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class PostgresServer:
    """One PostgreSQL server in a temporary directory."""

    def __init__(self, bin_dir: Path) -> None:
        self.bin_dir = bin_dir
        self.root = Path(tempfile.mkdtemp(prefix="failover-pg-"))
        self.data = self.root / "data"
        self.port = _free_port()
        self.url = f"postgresql+psycopg://{USER}@127.0.0.1:{self.port}/{DATABASE}"
        self._as_user: list[str] = []
        if os.geteuid() == 0:
            try:
                owner = pwd.getpwnam("postgres")
            except KeyError:
                shutil.rmtree(self.root, ignore_errors=True)
                pytest.skip("running as root and there is no `postgres` system user for initdb")
            os.chown(self.root, owner.pw_uid, owner.pw_gid)
            self._as_user = ["runuser", "-u", "postgres", "--"]

    def _run(self, tool: str, *args: str) -> None:
        cmd = [*self._as_user, str(self.bin_dir / tool), *args]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
        if done.returncode != 0:
            log = self.root / "server.log"
            tail = log.read_text()[-2000:] if log.exists() else ""
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{done.stdout}{done.stderr}{tail}")

    def start(self) -> None:
        """Create the cluster and the database, and start the server (a second or so)."""
        self._run(
            "initdb", "-D", str(self.data), "-A", "trust", "-U", USER,
            "-E", "UTF8", "--locale=C", "--no-sync",
        )  # fmt: skip
        options = (
            f"-h 127.0.0.1 -p {self.port} -k {self.root} -F "
            "-c full_page_writes=off -c synchronous_commit=off -c max_connections=100"
        )
        self._run(
            "pg_ctl", "start", "-w", "-t", "30", "-D", str(self.data),
            "-l", str(self.root / "server.log"), "-o", options,
        )  # fmt: skip
        admin = sa.create_engine(
            f"postgresql+psycopg://{USER}@127.0.0.1:{self.port}/postgres",
            isolation_level="AUTOCOMMIT",
            poolclass=sa.NullPool,
        )
        with admin.connect() as conn:
            conn.exec_driver_sql(f"CREATE DATABASE {DATABASE}")
        admin.dispose()

    def stop(self) -> None:
        """Stop the server at once and remove its directory."""
        try:
            if (self.data / "postmaster.pid").exists():
                self._run("pg_ctl", "stop", "-m", "immediate", "-w", "-D", str(self.data))
        finally:
            shutil.rmtree(self.root, ignore_errors=True)


_lock = threading.Lock()
_server: PostgresServer | None = None
_engine: sa.Engine | None = None


def server() -> PostgresServer:
    """The session's server, started on first use; skips the calling test without binaries."""
    global _server
    with _lock:
        if _server is None:
            bin_dir = find_bin_dir()
            if bin_dir is None:
                pytest.skip(SKIP_REASON)
            started = PostgresServer(bin_dir)
            try:
                started.start()
            except BaseException:
                started.stop()
                raise
            _server = started
        return _server


def engine() -> sa.Engine:
    """One engine (pool) on the session's database, shared by the tests' stores."""
    global _engine
    url = server().url
    with _lock:
        if _engine is None:
            _engine = make_engine(url)
        return _engine


def stop() -> None:
    """Dispose the shared engine and stop the server, if they were started."""
    global _server, _engine
    with _lock:
        if _engine is not None:
            _engine.dispose()
            _engine = None
        if _server is not None:
            _server.stop()
            _server = None


def unique_prefix() -> str:
    """A table prefix no other test uses: every test gets its own, empty table."""
    return f"t{uuid.uuid4().hex[:12]}_"


def pg_store(engine: sa.Engine | None = None, **kwargs: Any) -> SqlStore:
    """A `SqlStore` on the session's database (through ``engine``, by default the shared
    one), in a table of its own."""
    kwargs.setdefault("table_prefix", unique_prefix())
    return SqlStore(engine or globals()["engine"](), **kwargs)
