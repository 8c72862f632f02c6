"""Servers a test module or a test starts for itself (its own PostgreSQL, redis-server, Redis
Cluster or Sentinel set): started for the fixture, stopped after it, also when a test failed."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol, TypeVar


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
    import pytest

    from . import postgres

    bin_dir = postgres.find_bin_dir()
    if bin_dir is None:
        pytest.skip(postgres.SKIP_REASON)
    yield from running(postgres.PostgresServer(bin_dir))
