"""Throwaway ``redis-server`` processes for the test suite and the benchmark.

The binary is Debian's ``redis-server`` package (``.ci/run`` installs it when missing); without
it, the tests that need a server are skipped, saying how to get one. Each server listens on
127.0.0.1 on a free port, in a fresh temporary directory, with persistence off. One server is
shared by the session (`server`, each store on a key prefix of its own: `unique_prefix`); tests
that kill and restart a server start their own (`RedisServer`).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

SKIP_REASON = (
    "redis-server not found; install the Debian package `redis-server` (.ci/run does) to run "
    "the Redis store tests"
)
_START_SECONDS = 10.0


def binary() -> str | None:
    """The ``redis-server`` executable, or ``None``."""
    return shutil.which("redis-server") or (
        "/usr/bin/redis-server" if os.access("/usr/bin/redis-server", os.X_OK) else None
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class RedisServer:
    """One ``redis-server`` in a temporary directory, on a TCP port and a Unix socket (``socket``);
    `start`, `kill`, `start` again (same port), `stop`.

    Args:
        port: the port to listen on; default: a free one.
    """

    def __init__(self, port: int | None = None) -> None:
        executable = binary()
        if executable is None:
            pytest.skip(SKIP_REASON)
        self.executable = executable
        self.root = Path(tempfile.mkdtemp(prefix="failover-redis-"))
        self.port = port or _free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.socket = self.root / "redis.sock"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> RedisServer:
        """Start the server and wait until it answers (a few milliseconds)."""
        self.process = subprocess.Popen(
            [
                self.executable,
                "--bind", "127.0.0.1",
                "--port", str(self.port),
                "--dir", str(self.root),
                "--save", "",
                "--appendonly", "no",
                "--daemonize", "no",
                "--protected-mode", "yes",
                "--logfile", str(self.root / "server.log"),
                "--unixsocket", str(self.socket),
                "--unixsocketperm", "700",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + _START_SECONDS
        while not self._answers():
            if self.process.poll() is not None or time.monotonic() > deadline:
                log = self.root / "server.log"
                tail = log.read_text()[-2000:] if log.exists() else ""
                self.kill()
                raise RuntimeError(f"redis-server did not start on port {self.port}:\n{tail}")
            time.sleep(0.005)
        return self

    def _answers(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as conn:
                conn.sendall(b"PING\r\n")
                return conn.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def kill(self) -> None:
        """Kill the server at once (``SIGKILL``), as a crash would, and wait for it to go."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=10)
        self.process = None

    def stop(self) -> None:
        """Kill the server and remove its directory."""
        try:
            self.kill()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    def client(self, **kwargs: Any) -> Any:
        """A redis-py client on this server (for the tests' own reads and checks)."""
        import redis

        return redis.Redis.from_url(self.url, **kwargs)


_lock = threading.Lock()
_server: RedisServer | None = None


def server() -> RedisServer:
    """The session's server, started on first use; skips the calling test without the binary."""
    global _server
    with _lock:
        if _server is None:
            started = RedisServer()
            try:
                started.start()
            except BaseException:
                started.stop()
                raise
            _server = started
        return _server


def stop() -> None:
    """Stop the session's server, if it was started."""
    global _server
    with _lock:
        if _server is not None:
            _server.stop()
            _server = None


def unique_prefix() -> str:
    """A key prefix no other test uses: every store gets its own, empty key space."""
    return f"t{uuid.uuid4().hex[:12]}:"
