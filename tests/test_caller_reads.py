"""A SQLite file's reads run on the caller's thread, bounded by the store deadline
(`failover.stores.backends.sql.caller_reads`): no hand-off to a worker thread.

A real SQLite file; another process holding it in exclusive locking mode, for real. Each test
asserts on which thread the read's statement ran, what the caller got and what the deadline
layer counted. No assertion on time; the hang guards are joins far longer than the deadline.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

import failover
from failover import Failover
from failover.scatter import ListSplitter
from failover.stores.backends.sql import SqlStore, caller_reads
from failover.stores.base import walk
from failover.stores.layers.deadline import DeadlineStore

from .conftest import FakeClock
from .test_store_hung import sqlite_locked

GUARD = 10.0  # seconds a read bounded by a 0.05 s deadline may take on a loaded machine


def _deadline(engine: Failover) -> DeadlineStore:
    return next(s for s in walk(engine.store) if isinstance(s, DeadlineStore))


@pytest.fixture(name="seen")
def seen_fixture(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """``("CONNECT", thread name)`` for each connection opened for reads on callers' threads,
    ``(first word, thread name)`` for each statement run on one (and, with `_threads`, on a
    store's engine)."""
    seen: list[tuple[str, str]] = []
    real = caller_reads.connect

    def connect(path: str, timeout: float) -> sqlite3.Connection:
        seen.append(("CONNECT", threading.current_thread().name))
        conn = real(path, timeout)
        conn.set_trace_callback(
            lambda sql: seen.append((sql.split()[0].upper(), threading.current_thread().name))
        )
        return conn

    monkeypatch.setattr(caller_reads, "connect", connect)
    return seen


def _threads(store: SqlStore, seen: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """``seen``, the statements of ``store``'s engine (its workers') added from now on."""
    sa.event.listen(
        store.engine,
        "before_cursor_execute",
        lambda *a: seen.append((a[2].split()[0].upper(), threading.current_thread().name)),
    )
    return seen


class Rates:
    def __init__(self) -> None:
        self.down = False

    def __call__(self, currency: str) -> dict[str, Any]:
        if self.down:
            raise ConnectionError("rates down")
        return {"currency": currency, "rates": [1.0, 2.0]}


def _engine(store: SqlStore, clock: FakeClock, timeout: float = 5.0) -> Failover:
    return Failover(store, clock=clock, metrics=False, async_writes=False, store_timeout=timeout)


def _rates(
    store: SqlStore, clock: FakeClock, timeout: float = 5.0
) -> tuple[Failover, Rates, Callable[[str], Any]]:
    """An engine on ``store`` (sync writes, a deadline of ``timeout``), an upstream, and the
    failover ``rates`` that calls it."""
    engine = _engine(store, clock, timeout)
    upstream = Rates()
    return engine, upstream, failover.failover("rates", engine=engine)(upstream)


@pytest.mark.parametrize("async_writes", [False, True], ids=["sync-writes", "async-writes"])
def test_a_sqlite_recovery_reads_on_the_callers_thread(
    tmp_path: Path, clock: FakeClock, async_writes: bool, seen: list[tuple[str, str]]
) -> None:
    store = SqlStore(f"sqlite:///{tmp_path / 'f.db'}")
    engine = Failover(store, clock=clock, metrics=False, async_writes=async_writes)
    upstream = Rates()
    rates = failover.failover("rates", engine=engine)(upstream)
    try:
        rates("EUR")
        assert engine.flush(10)
        _threads(store, seen)
        upstream.down = True
        assert rates("EUR") == {"currency": "EUR", "rates": [1.0, 2.0]}
        here = threading.current_thread().name
        assert seen == [("CONNECT", here), ("SELECT", here)]
        assert _deadline(engine).errors == {}
    finally:
        engine.close()


def test_a_scatter_recovery_reads_its_slices_on_the_callers_thread(
    tmp_path: Path, clock: FakeClock, seen: list[tuple[str, str]]
) -> None:
    store = SqlStore(f"sqlite:///{tmp_path / 'f.db'}")
    engine = _engine(store, clock)
    upstream = Rates()

    @failover.failover("many", splitter=ListSplitter("currency"), engine=engine)
    def many(currencies: str) -> list[dict[str, Any]]:
        return [upstream(c) for c in currencies.split(",")]

    try:
        codes = ",".join(f"C{i:03d}" for i in range(300))
        many(codes)
        _threads(store, seen)
        upstream.down = True
        assert [r["currency"] for r in many(codes)] == codes.split(",")
        here = threading.current_thread().name
        assert seen == [("CONNECT", here), ("SELECT", here)]
    finally:
        engine.close()


def test_an_async_recovery_reads_on_a_worker_through_the_stores_own_connections(
    tmp_path: Path, clock: FakeClock, seen: list[tuple[str, str]]
) -> None:
    """An async caller's read of a SQLite file stays off the event loop: a worker thread reads
    it within the deadline on one of the store's own `sqlite3` connections, past SQLAlchemy's
    execution layer."""
    store = SqlStore(f"sqlite:///{tmp_path / 'f.db'}")
    engine = _engine(store, clock)
    upstream = Rates()

    @failover.failover("arates", engine=engine)
    async def rates(currency: str) -> dict[str, Any]:
        return upstream(currency)

    async def main() -> tuple[dict[str, Any], str]:
        await rates("EUR")
        upstream.down = True
        return await rates("EUR"), threading.current_thread().name

    try:
        _threads(store, seen)  # the engine's statements too: the write, and no read
        answer, loop_thread = asyncio.run(main())
        assert answer == {"currency": "EUR", "rates": [1.0, 2.0]}
        reads = [(word, thread) for word, thread in seen if word in ("CONNECT", "SELECT")]
        ((_, opened), (_, read)) = reads  # one connection of the store's, one SELECT on it
        assert read == opened != loop_thread
        assert _deadline(engine).errors == {}
    finally:
        engine.close()


def _guarded(fn: Any) -> Any:
    """``fn()`` on a thread of its own, joined for at most `GUARD` seconds: what it returned,
    or the exception it raised."""
    out: list[Any] = []

    def run() -> None:
        try:
            out.append(fn())
        except BaseException as exc:  # handed to the test
            out.append(exc)

    thread = threading.Thread(target=run, name="caller", daemon=True)
    thread.start()
    thread.join(GUARD)
    assert not thread.is_alive(), "the read held its caller past the deadline"
    return out[0]


def test_a_read_waiting_on_another_process_lock_ends_at_the_deadline(
    tmp_path: Path, clock: FakeClock, seen: list[tuple[str, str]]
) -> None:
    path = tmp_path / "f.db"
    store = SqlStore(f"sqlite:///{path}")
    engine, upstream, rates = _rates(store, clock, 0.05)
    try:
        rates("EUR")
        _threads(store, seen)
        upstream.down = True
        store.engine.dispose()  # no connection open: the holder's lock comes first
        with sqlite_locked(path, readers_too=True):
            got = _guarded(lambda: rates("EUR"))
            # Nothing usable within the deadline: the upstream's own error, the read given
            # up on the thread that made it, counted as a timeout (the store is out).
            assert isinstance(got, ConnectionError)
            # Its connection opened there; the statement never started (SQLite reads the
            # schema under the lock first).
            assert seen == [("CONNECT", "caller")]
            assert _deadline(engine).errors == {("find", "timeout"): 1}
        assert rates("EUR") == {"currency": "EUR", "rates": [1.0, 2.0]}  # the lock went
        assert seen[1:] == [("SELECT", threading.current_thread().name)]
    finally:
        engine.close()


def test_a_read_running_past_the_deadline_is_interrupted(
    tmp_path: Path, clock: FakeClock, seen: list[tuple[str, str]]
) -> None:
    """A statement still running at the deadline is interrupted (SQLite's progress handler),
    and its connection serves the next read."""
    url = f"sqlite:///{tmp_path / 'f.db'}"
    writer = _engine(SqlStore(url), clock)
    upstream = Rates()
    splitter = ListSplitter("currency")
    codes = ",".join(f"C{i:04d}" for i in range(5_000))

    def many(currencies: str) -> list[dict[str, Any]]:
        return [upstream(c) for c in currencies.split(",")]

    failover.failover("many", splitter=splitter, engine=writer)(many)(codes)
    writer.close()
    store = SqlStore(url)
    # A deadline past before the statement can end: the read is interrupted while it runs.
    engine = _engine(store, clock, timeout=1e-5)
    upstream.down = True
    reading = failover.failover("many", splitter=splitter, engine=engine)(many)
    try:
        assert isinstance(_guarded(lambda: reading(codes)), ConnectionError)
        assert seen == [("CONNECT", "caller"), ("SELECT", "caller")]
        layer = _deadline(engine)
        assert layer.errors == {("find_many", "timeout"): 1}
        # A point read ends before SQLite first looks at the clock: the same connection,
        # given back after the interrupt, answers it.
        key = next(iter(SqlStore(url).find_all("many"))).key
        found = _guarded(lambda: layer.find("many", key))
        assert found is not None
        assert found.key == key
        assert seen[2:] == [("SELECT", "caller")]  # no connection opened
    finally:
        engine.close()


def test_a_read_the_store_refuses_closes_its_connection(
    tmp_path: Path, clock: FakeClock, seen: list[tuple[str, str]]
) -> None:
    """A read that fails (the table gone) is the store's error, counted as one, and leaves no
    connection behind: one that met an unknown error is closed, not lent again."""
    path = tmp_path / "f.db"
    store = SqlStore(f"sqlite:///{path}")
    engine, upstream, rates = _rates(store, clock)
    reads = store.caller_reads
    assert reads is not None
    try:
        rates("EUR")
        upstream.down = True
        assert rates("EUR")["currency"] == "EUR"
        assert (reads.connections, reads.in_use) == (1, 0)
        with sqlite3.connect(path) as other:
            other.execute("DROP TABLE failover_store")
        assert isinstance(_guarded(lambda: rates("EUR")), ConnectionError)  # nothing usable
        assert _deadline(engine).errors == {("find", "error"): 1}
        assert (reads.connections, reads.in_use) == (0, 0)
    finally:
        engine.close()


def test_a_store_closed_while_a_read_waits_closes_its_connection_when_it_ends(
    tmp_path: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "f.db"
    store = SqlStore(f"sqlite:///{path}")
    engine, upstream, rates = _rates(store, clock, 0.2)
    reads = store.caller_reads
    assert reads is not None
    opened = threading.Event()
    real = caller_reads.connect

    def connect(path: str, timeout: float) -> sqlite3.Connection:
        opened.set()
        return real(path, timeout)

    monkeypatch.setattr(caller_reads, "connect", connect)
    rates("EUR")
    upstream.down = True
    store.engine.dispose()
    out: list[Any] = []
    with sqlite_locked(path, readers_too=True):
        reader = threading.Thread(target=lambda: out.append(_guarded(lambda: rates("EUR"))))
        reader.start()
        assert opened.wait(GUARD)  # the read has its connection, and waits for the lock
        reads.close()  # as the store's close does
        reader.join(GUARD)
    assert not reader.is_alive()
    assert isinstance(out[0], ConnectionError)  # its deadline passed: a miss
    assert (reads.connections, reads.in_use) == (0, 0)
    engine.close()


class OwnReads(SqlStore):
    """A store whose reads do more than the store's (here, nothing more): what they wait on
    is theirs, so the deadline's worker runs them."""

    def find(self, name: str, key: str) -> Any:
        return super().find(name, key)


@pytest.mark.parametrize(
    "how", ["no-connection-to-spare", "in-memory", "own-engine", "uri", "subclass-reads"]
)
def test_reads_go_to_a_worker_where_the_caller_cannot_bound_them(
    tmp_path: Path,
    clock: FakeClock,
    seen: list[tuple[str, str]],
    monkeypatch: pytest.MonkeyPatch,
    how: str,
) -> None:
    """A read never waits for a connection of its own: with none to spare (all in use by other
    callers), a deadline worker reads. An in-memory database (one connection that threads take
    in turn), an engine of your own (its settings are yours), a URI with options and a
    subclass's own reads keep the hand-off."""
    path = tmp_path / "f.db"
    if how == "no-connection-to-spare":
        monkeypatch.setattr(caller_reads, "SIZE", 0)
    target: Any = {
        "in-memory": "sqlite://",
        "own-engine": sa.create_engine(f"sqlite:///{path}"),
        "uri": f"sqlite:///file:{path}?mode=rwc&uri=true",
    }.get(how, f"sqlite:///{path}")
    store = (OwnReads if how == "subclass-reads" else SqlStore)(target)
    engine, upstream, rates = _rates(store, clock)
    try:
        rates("EUR")
        _threads(store, seen)
        upstream.down = True
        assert rates("EUR") == {"currency": "EUR", "rates": [1.0, 2.0]}
        ((word, thread),) = seen
        assert word == "SELECT"
        assert thread.startswith("failover-store")  # a deadline worker's
        assert _deadline(engine).errors == {}
    finally:
        engine.close()
        if isinstance(target, sa.Engine):
            target.dispose()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="POSIX only")
def test_a_forked_child_reads_on_connections_of_its_own(
    tmp_path: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A child forked after the parent read on its own thread never uses the parent's
    connection (its file locks are the parent's): it opens one."""
    opened: list[int] = []  # the process that opened each connection
    real = caller_reads.connect

    def connect(path: str, timeout: float) -> sqlite3.Connection:
        opened.append(os.getpid())
        return real(path, timeout)

    monkeypatch.setattr(caller_reads, "connect", connect)
    store = SqlStore(f"sqlite:///{tmp_path / 'f.db'}")
    engine, upstream, rates = _rates(store, clock)
    rates("EUR")
    upstream.down = True
    assert rates("EUR")["currency"] == "EUR"  # the parent's connection, opened and pooled
    reading, writing = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report through the pipe, never return into pytest
        try:
            said = [
                rates("EUR"),
                sorted(map(list, _deadline(engine).errors)),
                opened.count(os.getpid()),
            ]
            os.write(writing, json.dumps(said).encode())
        finally:
            os._exit(0)
    os.close(writing)
    with os.fdopen(reading) as pipe:
        recovered, errors, opened_there = json.loads(pipe.read())
    os.waitpid(pid, 0)
    try:
        assert (recovered["currency"], errors, opened_there) == ("EUR", [], 1)
        assert rates("EUR")["currency"] == "EUR"  # the parent's connection is still its own
        assert opened == [os.getpid()]
    finally:
        engine.close()
