"""Servers a test module or a test starts for itself (its own PostgreSQL, redis-server, Redis
Cluster or Sentinel set): started for the fixture, stopped after it, also when a test failed;
and their processes stopped (``SIGSTOP``) for a while, to play a hung store."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Protocol, TypeVar

import pytest

from . import postgres


class Startable(Protocol):
    def start(self) -> object: ...

    def stop(self) -> None: ...


S = TypeVar("S", bound=Startable)


def running(server: S) -> Iterator[S]:
    """``server`` started, for a fixture to ``yield from``; stopped when the fixture ends."""
    try:
        server.start()
        yield server
    finally:
        server.stop()


def own_postgres() -> Iterator[object]:
    """A PostgreSQL server of the caller's own (stopping it stalls no other test), or a skip
    when the server binaries are missing."""

    bin_dir = postgres.find_bin_dir()
    if bin_dir is None:
        pytest.skip(postgres.SKIP_REASON)
    yield from running(postgres.PostgresServer(bin_dir))


def children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (a PostgreSQL postmaster's backends)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid:
                found.append(int(entry.name))
    return found


@contextmanager
def stopped(pids: list[int]) -> Iterator[None]:
    """The processes stopped (``SIGSTOP``) inside the block, resumed whatever happens."""
    try:
        for pid in pids:
            _signal(pid, signal.SIGSTOP)
        yield
    finally:
        for pid in pids:
            _signal(pid, signal.SIGCONT)


def _signal(pid: int, sig: signal.Signals) -> None:
    # A backend may end between the listing and the signal: it must not keep the others stopped.
    with suppress(ProcessLookupError):
        os.kill(pid, sig)
