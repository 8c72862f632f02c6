"""A SQLite file's reads run on the caller's thread, bounded by the store deadline
(`failover.stores.backends.sql.caller_reads`): no hand-off to a worker thread.

A real SQLite file; another process holding it in exclusive locking mode, for real. Each test
asserts on which thread the read's statement ran, what the caller got and what the deadline
layer counted. No assertion on time; the hang guards are joins far longer than the deadline.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

import failover
from failover import Failover
from failover.scatter import ListSplitter
from failover.stores.backends.sql import SqlStore
from failover.stores.base import walk
from failover.stores.layers.deadline import DeadlineStore

from .conftest import FakeClock

GUARD = 10.0  # seconds a read bounded by a 0.05 s deadline may take on a loaded machine


def _deadline(engine: Failover) -> DeadlineStore:
    return next(s for s in walk(engine.store) if isinstance(s, DeadlineStore))


def _threads(store: SqlStore) -> list[tuple[str, str]]:
    """``(first word, thread name)`` of each statement ``store``'s engines run from now on."""
    seen: list[tuple[str, str]] = []
    for engine in (store.engine, store.reading_engine):
        assert engine is not None
        sa.event.listen(
            engine,
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


def _engine(store: SqlStore, clock: FakeClock, timeout: float = 5.0, **kw: Any) -> Failover:
    return Failover(
        store, clock=clock, metrics=False, async_writes=False, store_timeout=timeout, **kw
    )


@pytest.mark.parametrize("async_writes", [False, True], ids=["sync-writes", "async-writes"])
def test_a_sqlite_recovery_reads_on_the_callers_thread(
    tmp_path: Path, clock: FakeClock, async_writes: bool
) -> None:
    store = SqlStore(f"sqlite:///{tmp_path / 'f.db'}")
    engine = Failover(store, clock=clock, metrics=False, async_writes=async_writes)
    upstream = Rates()
    rates = failover.failover("rates", engine=engine)(upstream)
    try:
        rates("EUR")
        assert engine.flush(10)
        seen = _threads(store)
        upstream.down = True
        assert rates("EUR") == {"currency": "EUR", "rates": [1.0, 2.0]}
        assert seen == [("SELECT", threading.current_thread().name)]
        assert _deadline(engine).errors == {}
    finally:
        engine.close()


def test_a_scatter_recovery_reads_its_slices_on_the_callers_thread(
    tmp_path: Path, clock: FakeClock
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
        seen = _threads(store)
        upstream.down = True
        assert [r["currency"] for r in many(codes)] == codes.split(",")
        assert seen == [("SELECT", threading.current_thread().name)]
    finally:
        engine.close()


@contextmanager
def held_exclusively(path: Path) -> Iterator[None]:
    """Another process holds the file in exclusive locking mode inside the block: no
    connection opened after it took the lock can read it (one already open in WAL mode keeps
    a shared lock on the file, which the holder would wait for)."""
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sqlite3, sys\n"
            f"c = sqlite3.connect({str(path)!r}, isolation_level=None)\n"
            "c.execute('PRAGMA locking_mode = EXCLUSIVE')\n"
            "c.execute('BEGIN EXCLUSIVE')\n"
            "c.execute('SELECT count(*) FROM sqlite_master').fetchall()\n"
            "print('locked', flush=True)\n"
            "sys.stdin.readline()\n",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "locked"
        yield
    finally:
        assert holder.stdin is not None
        assert holder.stdout is not None
        holder.stdin.close()
        holder.wait(10)
        holder.stdout.close()


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
    tmp_path: Path, clock: FakeClock
) -> None:
    path = tmp_path / "f.db"
    store = SqlStore(f"sqlite:///{path}")
    engine = _engine(store, clock, timeout=0.05)
    upstream = Rates()
    rates = failover.failover("rates", engine=engine)(upstream)
    try:
        rates("EUR")
        seen = _threads(store)
        upstream.down = True
        store.engine.dispose()  # no connection open: the holder's lock comes first
        assert store.reading_engine is not None
        store.reading_engine.dispose()
        sa.event.listen(  # first: before the connection's pragmas meet the lock
            store.reading_engine,
            "connect",
            lambda *a: seen.append(("CONNECT", threading.current_thread().name)),
            insert=True,
        )
        with held_exclusively(path):
            got = _guarded(lambda: rates("EUR"))
            # Nothing usable within the deadline: the upstream's own error, the read given
            # up on the thread that made it, counted as a timeout (the store is out).
            assert isinstance(got, ConnectionError)
            assert seen == [("CONNECT", "caller")]  # its first pragma waited for the lock
            assert _deadline(engine).errors == {("find", "timeout"): 1}
        assert rates("EUR") == {"currency": "EUR", "rates": [1.0, 2.0]}  # the lock went
        here = threading.current_thread().name
        assert seen[1:] == [("CONNECT", here), ("SELECT", here)]
    finally:
        engine.close()


def test_a_read_running_past_the_deadline_is_interrupted(tmp_path: Path, clock: FakeClock) -> None:
    """A statement still running at the deadline is interrupted (SQLite's progress handler),
    and the connection serves the next read."""
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
    seen = _threads(store)
    upstream.down = True
    reading = failover.failover("many", splitter=splitter, engine=engine)(many)
    try:
        assert isinstance(_guarded(lambda: reading(codes)), ConnectionError)
        assert seen == [("SELECT", "caller")]
        assert _deadline(engine).errors == {("find_many", "timeout"): 1}
        assert store.reading_engine is not None
        with store.reading_engine.connect() as conn:  # the interrupted one: still good
            assert conn.exec_driver_sql("SELECT count(*) FROM failover_store").scalar() == 5_000
    finally:
        engine.close()


def test_a_read_that_finds_every_connection_taken_goes_to_a_worker(
    tmp_path: Path, clock: FakeClock
) -> None:
    store = SqlStore(f"sqlite:///{tmp_path / 'f.db'}")
    engine = _engine(store, clock)
    upstream = Rates()
    rates = failover.failover("rates", engine=engine)(upstream)
    assert store.reading_engine is not None
    held = [store.reading_engine.connect() for _ in range(store.reading_engine.pool.size())]
    try:
        rates("EUR")
        seen = _threads(store)
        upstream.down = True
        assert rates("EUR") == {"currency": "EUR", "rates": [1.0, 2.0]}  # never waits for one
        ((word, thread),) = seen
        assert word == "SELECT"
        assert thread.startswith("failover-store")  # a deadline worker's
        assert _deadline(engine).errors == {}
    finally:
        for conn in held:
            conn.close()
        engine.close()


@pytest.mark.parametrize("url", ["sqlite://", "engine"], ids=["in-memory", "own-engine"])
def test_reads_stay_on_workers_where_the_store_cannot_bound_them(
    tmp_path: Path, clock: FakeClock, url: str
) -> None:
    """An in-memory database (one connection that threads take in turn) and an engine of
    your own (its settings are yours) keep the hand-off."""
    target = sa.create_engine(f"sqlite:///{tmp_path / 'f.db'}") if url == "engine" else url
    store = SqlStore(target)
    engine = _engine(store, clock)
    try:
        assert store.reading_engine is None
    finally:
        engine.close()
        if isinstance(target, sa.Engine):
            target.dispose()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="POSIX only")
def test_a_forked_child_reads_on_connections_of_its_own(tmp_path: Path, clock: FakeClock) -> None:
    """A child forked after the parent read on its own thread never uses the parent's
    connection (its file locks are the parent's): it opens one."""
    store = SqlStore(f"sqlite:///{tmp_path / 'f.db'}")
    engine = _engine(store, clock)
    upstream = Rates()
    rates = failover.failover("rates", engine=engine)(upstream)
    rates("EUR")
    upstream.down = True
    assert rates("EUR")["currency"] == "EUR"  # the parent's connection, opened and pooled
    reading, writing = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report through the pipe, never return into pytest
        try:
            said = [rates("EUR"), sorted(map(list, _deadline(engine).errors))]
            os.write(writing, json.dumps(said).encode())
        finally:
            os._exit(0)
    os.close(writing)
    with os.fdopen(reading) as pipe:
        recovered, errors = json.loads(pipe.read())
    os.waitpid(pid, 0)
    try:
        assert (recovered["currency"], errors) == ("EUR", [])
        assert rates("EUR")["currency"] == "EUR"  # the parent's connection is still its own
    finally:
        engine.close()
