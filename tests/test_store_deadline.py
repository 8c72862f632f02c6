"""The store deadline and the store breaker (`DeadlineStore`): a hung store costs a caller one
deadline, then is skipped; a live result always returns. No assertion on time: what happened is
read from the layer's counts and from what the calls returned."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

import failover
from failover import ConfigurationError, Failover
from failover.stores.backends.memory import InMemoryStore
from failover.stores.base import walk
from failover.stores.layers.deadline import DeadlineStore, StoreTimeout, StoreUnavailable
from tests.conftest import FakeClock


class Upstream(Exception):
    pass


class HungStore(InMemoryStore):
    """A store that does I/O and hangs on reads while ``hung`` is clear; counts what reaches it."""

    does_io = True

    def __init__(self) -> None:
        super().__init__()
        self.running = threading.Event()
        self.running.set()
        self.reached = 0

    def find_many(self, name: str, keys: Iterable[str]) -> dict[str, Any]:
        self.reached += 1
        self.running.wait()
        return super().find_many(name, keys)


def deadline_of(engine: Failover) -> DeadlineStore:
    found = [layer for layer in walk(engine.store) if isinstance(layer, DeadlineStore)]
    assert len(found) == 1
    return found[0]


def test_store_timeout_is_a_duration_checked_at_construction() -> None:
    assert Failover("sqlite://", store_timeout="250ms", metrics=False).store_timeout == 0.25
    for bad in (-1, 0, "soon", True):
        with pytest.raises(ConfigurationError, match="Failover: store_timeout"):
            Failover("sqlite://", store_timeout=bad, metrics=False)


def test_in_process_stores_get_no_deadline_layer() -> None:
    engine = Failover("memory://", metrics=False)
    assert not any(isinstance(layer, DeadlineStore) for layer in walk(engine.store))
    engine = Failover("sqlite://", store_timeout=None, metrics=False)
    assert not any(isinstance(layer, DeadlineStore) for layer in walk(engine.store))


def test_a_hung_read_times_out_then_the_breaker_skips_the_store(clock: FakeClock) -> None:
    store = HungStore()
    layer = DeadlineStore(store, 0.05, clock, open_for=5, after=1)
    store.running.clear()
    with pytest.raises(StoreTimeout):
        layer.find_many("n", ["k"])
    assert layer.errors[("find_many", "timeout")] == 1
    assert not layer.up
    for _ in range(9):
        with pytest.raises(StoreUnavailable):
            layer.find_many("n", ["k"])
    assert store.reached == 1  # the nine were skipped without touching the store
    assert layer.errors[("find_many", "breaker_open")] == 9
    store.running.set()
    clock.advance(5)
    assert layer.find_many("n", ["k"]) == {}  # the trial reaches the store and closes it
    assert layer.up
    assert store.reached == 2
    layer.close()


def test_async_reads_honour_the_deadline(clock: FakeClock) -> None:
    class AsyncHung(HungStore):
        native_async = True

        async def afind_many(self, name: str, keys: Iterable[str]) -> dict[str, Any]:
            await asyncio.Event().wait()  # never answers
            return {}

    layer = DeadlineStore(AsyncHung(), 0.05, clock, after=1)

    async def main() -> None:
        with pytest.raises(StoreTimeout):
            await layer.afind_many("n", ["k"])
        with pytest.raises(StoreUnavailable):
            await layer.afind_many("n", ["k"])

    asyncio.run(main())
    assert layer.errors[("find_many", "timeout")] == 1


LOCKER = """
import sqlite3, sys
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("BEGIN EXCLUSIVE")
print("locked", flush=True)
sys.stdin.readline()
db.execute("COMMIT")
"""


@pytest.fixture
def sqlite_file(tmp_path: Path) -> Path:
    return tmp_path / "store.db"


@pytest.fixture
def locker(sqlite_file: Path) -> Iterator[subprocess.Popen[str]]:
    """Another process that holds ``BEGIN EXCLUSIVE`` on the file, once started."""
    proc: subprocess.Popen[str] | None = None

    def start() -> subprocess.Popen[str]:
        nonlocal proc
        proc = subprocess.Popen(
            [sys.executable, "-c", LOCKER, str(sqlite_file)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "locked"
        return proc

    holder: Any = start
    yield holder
    if proc is not None:
        release(proc)


def release(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        assert proc.stdin is not None
        proc.stdin.write("\n")
        proc.stdin.flush()
    proc.communicate()  # waits, and closes the pipes


def test_sqlite_locked_by_another_process_sync_writes(
    sqlite_file: Path, locker: Any, clock: FakeClock
) -> None:
    registry = CollectorRegistry()
    engine = Failover(
        f"sqlite:///{sqlite_file}",
        async_writes=False,
        store_timeout=0.2,
        clock=clock,
        metrics=registry,
        store_breaker_after=1,  # what an open breaker does: opened by one timeout
    )
    failing = False

    @failover.failover("rates", engine=engine, ttl=3600)
    def rates(value: str) -> str:
        if failing:
            raise Upstream("down")
        return value

    assert rates("v1") == "v1"  # stored: the store answers
    layer = deadline_of(engine)
    proc = locker()
    assert rates("v2") == "v2"  # the live result returns although its write hangs
    assert layer.errors[("store", "timeout")] == 1
    assert not layer.up
    failing = True
    for _ in range(10):  # the breaker is open: no read, the upstream's own exception
        with pytest.raises(Upstream):
            rates("v2")
    assert layer.errors[("find", "breaker_open")] == 10
    # The same, read back from a real registry.
    assert registry.get_sample_value("failover_store_up", {"store": "sqlstore"}) == 0
    timeouts = {"store": "sqlstore", "operation": "store", "reason": "timeout"}
    assert registry.get_sample_value("failover_store_errors_total", timeouts) == 1
    skipped = {"store": "sqlstore", "operation": "find", "reason": "breaker_open"}
    assert registry.get_sample_value("failover_store_errors_total", skipped) == 10
    release(proc)
    clock.advance(10)
    failing = False
    assert rates("v3") == "v3"  # the trial write answers: stored again
    assert layer.up
    assert registry.get_sample_value("failover_store_up", {"store": "sqlstore"}) == 1
    failing = True
    assert rates("v3") == "v3"  # served back stale
    engine.close()


def test_sqlite_locked_with_async_writes_reads_stale(
    sqlite_file: Path, locker: Any, clock: FakeClock
) -> None:
    engine = Failover(f"sqlite:///{sqlite_file}", store_timeout=0.2, clock=clock, metrics=False)
    failing = False

    @failover.failover("rates", engine=engine, ttl=3600)
    def rates(value: str) -> str:
        if failing:
            raise Upstream("down")
        return value

    assert rates("v1") == "v1"
    assert engine.store.flush(5)  # type: ignore[attr-defined]
    proc = locker()
    assert rates("v2") == "v2"  # queued: no thread hop, no wait
    layer = deadline_of(engine)
    assert sum(layer.errors.values()) == 0
    failing = True
    for _ in range(10):  # WAL: readers are not blocked by the writer's lock
        assert rates("v1") == "v1"
    release(proc)
    assert engine.store.flush(10)  # type: ignore[attr-defined]
    assert rates("v2") == "v2"  # the queued write landed once the lock went
    engine.close()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="POSIX only")
def test_a_forked_child_reads_through_workers_of_its_own(tmp_path: Path, clock: FakeClock) -> None:
    """A preforking server's worker forked after the parent read the store: the parent's
    deadline workers did not come along, and the child's reads run on workers of its own
    instead of waiting out the deadline in a pool that no thread serves."""
    engine = Failover(store=f"sqlite:///{tmp_path / 'fork.db'}", clock=clock, metrics=False)
    down = False

    @failover.failover("rates", engine=engine, policy="never_throw", ttl="1d")
    def rates(currency: str) -> object:
        if down:
            raise ConnectionError("rates down")
        return {"currency": currency}

    rates("EUR")
    engine.flush(10)
    down = True
    assert rates("EUR") == {"currency": "EUR"}  # read by the parent's deadline workers
    reading, writing = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report through the pipe, never return into pytest
        try:
            deadline = next(s for s in walk(engine.store) if isinstance(s, DeadlineStore))
            said = [rates("EUR"), sorted(map(list, deadline.errors))]
            os.write(writing, json.dumps(said).encode())
        finally:
            os._exit(0)
    os.close(writing)
    with os.fdopen(reading) as pipe:
        recovered, errors = json.loads(pipe.read())
    os.waitpid(pid, 0)
    engine.close()
    assert (recovered, errors) == ({"currency": "EUR"}, [])
