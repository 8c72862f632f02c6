"""A throwaway ``pgbouncer`` in transaction mode in front of the session's PostgreSQL server.

Debian's package ``pgbouncer`` (``.ci/run`` installs it when missing); without it the tests that
need it are skipped, saying so. It listens on 127.0.0.1 on a free port, in a temporary
directory, trust authentication, a server pool of 4 connections per database, so that a
client's successive transactions land on different server connections (what breaks named
prepared statements). One is shared by the session (`bouncer`); a test that restarts it starts
its own (`PgBouncer`). pgbouncer refuses to run as root: under root it runs as ``postgres``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from failover.stores.backends.sql import make_engine

from . import postgres

SKIP_REASON = (
    "pgbouncer not found; install the Debian package `pgbouncer` (.ci/run does) to run the "
    "PgBouncer tests"
)


def binary() -> str | None:
    """The ``pgbouncer`` executable, or ``None``."""
    return shutil.which("pgbouncer") or (
        "/usr/sbin/pgbouncer" if os.access("/usr/sbin/pgbouncer", os.X_OK) else None
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class PgBouncer:
    """One ``pgbouncer`` (transaction pooling) in front of the session's PostgreSQL; `start`,
    `kill`, `start` again (same port), `stop`.

    Args:
        pool_size: server connections per database and user.
    """

    def __init__(self, pool_size: int = 4) -> None:
        executable = binary()
        if executable is None:
            pytest.skip(SKIP_REASON)
        self.executable = executable
        server = postgres.server()
        self.root = Path(tempfile.mkdtemp(prefix="failover-pgbouncer-"))
        self.port = _free_port()
        db = postgres.DATABASE
        self.url = (
            f"postgresql+psycopg://{postgres.USER}@127.0.0.1:{self.port}/{db}?pgbouncer=transaction"
        )
        (self.root / "users.txt").write_text(f'"{postgres.USER}" ""\n')
        self.config = self.root / "pgbouncer.ini"
        self.config.write_text(
            "[databases]\n"
            f"{db} = host=127.0.0.1 port={server.port} dbname={db} user={postgres.USER}\n"
            "[pgbouncer]\n"
            f"listen_addr = 127.0.0.1\nlisten_port = {self.port}\nunix_socket_dir =\n"
            f"auth_type = trust\nauth_file = {self.root / 'users.txt'}\n"
            "pool_mode = transaction\n"
            f"default_pool_size = {pool_size}\nmax_client_conn = 500\n"
            f"logfile = {self.root / 'log'}\npidfile = {self.root / 'pid'}\n"
            "ignore_startup_parameters = extra_float_digits,options\n"
            "server_reset_query =\n"
        )
        self._as_user: list[str] = []
        if os.geteuid() == 0:
            shutil.chown(self.root, "postgres")
            for path in self.root.iterdir():
                shutil.chown(path, "postgres")
            self._as_user = ["runuser", "-u", "postgres", "--"]
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> PgBouncer:
        """Start the bouncer and wait until it accepts connections."""
        self.process = subprocess.Popen(
            [*self._as_user, self.executable, str(self.config)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while not self._answers():
            if self.process.poll() is not None or time.monotonic() > deadline:
                log = self.root / "log"
                tail = log.read_text()[-2000:] if log.exists() else ""
                self.kill()
                raise RuntimeError(f"pgbouncer did not start on port {self.port}:\n{tail}")
            time.sleep(0.01)
        return self

    def _answers(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                return True
        except OSError:
            return False

    def kill(self) -> None:
        """Kill the bouncer at once (``SIGKILL``): every client connection drops."""
        if self.process is not None and self.process.poll() is None:
            # runuser forwards no SIGKILL: the bouncer's own pid is in its pidfile.
            pidfile = self.root / "pid"
            if pidfile.exists():
                with contextlib.suppress(ValueError, ProcessLookupError):
                    os.kill(int(pidfile.read_text().strip()), signal.SIGKILL)
            self.process.wait(timeout=10)
        self.process = None
        (self.root / "pid").unlink(missing_ok=True)

    def stop(self) -> None:
        """Kill the bouncer and remove its directory."""
        try:
            self.kill()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)


_lock = threading.Lock()
_bouncer: PgBouncer | None = None
_engine: sa.Engine | None = None


def bouncer() -> PgBouncer:
    """The session's bouncer, started on first use; skips without pgbouncer or PostgreSQL."""
    global _bouncer
    with _lock:
        if _bouncer is None:
            started = PgBouncer()
            try:
                started.start()
            except BaseException:
                started.stop()
                raise
            _bouncer = started
        return _bouncer


def engine() -> sa.Engine:
    """One engine (pool) through the session's bouncer, shared by the tests' stores."""
    global _engine
    url = bouncer().url
    with _lock:
        if _engine is None:
            _engine = make_engine(url)
        return _engine


def stop() -> None:
    """Stop the session's bouncer, if it was started."""
    global _bouncer, _engine
    with _lock:
        if _engine is not None:
            _engine.dispose()
            _engine = None
        if _bouncer is not None:
            _bouncer.stop()
            _bouncer = None
