"""A hung *server* holds no caller past ``store_timeout`` (`DeadlineStore`), and its store
breaker skips it; the connection an abandoned operation used is never lent again.

Real servers stopped for real: PostgreSQL and redis-server with ``SIGSTOP`` (the kernel still
accepts their TCP data, so no socket error ever comes; always resumed in a ``finally``), and a
SQLite file whose write lock another process holds (``BEGIN EXCLUSIVE``). Sync and async callers,
async writes on and off. Each case asserts what the caller got while the store was still stopped,
what the deadline layer counted, and that once the store answers again a new success is stored
and served back stale. No assertion on time.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

import failover
from failover import ConfigurationError, Failover
from failover.stores.backends.sql import SqlStore
from failover.stores.base import walk
from failover.stores.layers.deadline import DeadlineStore

from .conftest import FakeClock, Upstream
from .own_servers import children, own_postgres, running, stopped
from .redis_server import RedisServer

TIMEOUT = 0.2
RESET = 5.0  # the store breaker's open time, on the fake clock: the tests move it past


@contextmanager
def sqlite_locked(path: Path, *, readers_too: bool = False) -> Iterator[None]:
    """Another process holds the file's write lock (``BEGIN EXCLUSIVE``) inside the block;
    ``readers_too``: in exclusive locking mode, which keeps out the readers of every connection
    opened after it took the lock (one already open in WAL mode keeps a shared lock on the file,
    which the holder would wait for)."""
    mode = "c.execute('PRAGMA locking_mode = EXCLUSIVE')\n" if readers_too else ""
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sqlite3, sys\n"
            f"c = sqlite3.connect({str(path)!r}, isolation_level=None)\n"
            f"{mode}"
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
        holder.kill()
        holder.communicate(timeout=10)  # reaps it and closes its pipes


@pytest.fixture(scope="module")
def pg_server() -> Iterator[Any]:
    """A PostgreSQL server of this module's own: stopping it must not stall other tests."""
    yield from own_postgres()


@pytest.fixture(scope="module")
def redis_srv() -> Iterator[Any]:
    """A redis-server of this module's own."""
    yield from running(RedisServer())


Hang = Callable[[], Any]


@pytest.fixture(params=["sqlite", "postgresql", "redis"], name="hung_store")
def hung_store_fixture(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, Any, Hang]:
    """(kind, the store or its URL, a context manager factory that hangs the store)."""
    kind = request.param
    if kind == "sqlite":
        path = tmp_path / "f.db"
        return kind, f"sqlite:///{path}", lambda: sqlite_locked(path)
    if kind == "postgresql":
        server = request.getfixturevalue("pg_server")
        postmaster = int((server.data / "postmaster.pid").read_text().split()[0])
        store = SqlStore(server.url, table_prefix=f"t{os.urandom(4).hex()}_")
        return kind, store, lambda: stopped([postmaster, *children(postmaster)])
    server = request.getfixturevalue("redis_srv")
    prefix = f"t{os.urandom(4).hex()}:"
    assert server.process is not None
    pid = server.process.pid
    return kind, f"{server.url}?prefix={prefix}", lambda: stopped([pid])


def _deadline(engine: Failover) -> DeadlineStore:
    return next(s for s in walk(engine.store) if isinstance(s, DeadlineStore))


def _resumed(engine: Failover) -> None:
    """The store answers again: a patient deadline from now on, so that a store just resumed,
    on a loaded machine, is not taken for a hung one (what follows tests the store's answers)."""
    for layer in walk(engine.store):
        if isinstance(layer, DeadlineStore):
            layer.timeout = 30.0


def _count(layer: DeadlineStore, reason: str) -> int:
    return sum(n for (_, why), n in layer.errors.items() if why == reason)


def _engine(store: Any, async_writes: bool, clock: FakeClock) -> Failover:
    return Failover(
        store,
        async_writes=async_writes,
        store_timeout=TIMEOUT,
        clock=clock,
        metrics=False,
        store_breaker_after=1,  # these tests are about what an open breaker does
    )


@pytest.mark.parametrize("async_writes", [False, True], ids=["sync-writes", "async-writes"])
def test_a_hung_store_holds_no_sync_caller(
    hung_store: tuple[str, Any, Hang], async_writes: bool, clock: FakeClock
) -> None:
    kind, url, hang = hung_store
    engine = _engine(url, async_writes, clock)
    upstream = Upstream()
    try:

        @failover.failover("svc.get", engine=engine)
        def get(x: int) -> int:
            return upstream(x)  # type: ignore[return-value]

        assert get(1) == 1
        assert engine.flush(10)
        layer = _deadline(engine)
        with hang():
            assert get(2) == 2  # live, at once: the write is queued, or dropped at its deadline
            upstream.fail()
            answers = []
            for _ in range(11):  # a recover, then ten in a row
                try:
                    answers.append(get(1))
                except ConnectionError:  # nothing usable: the upstream's own exception
                    answers.append(None)
            if kind != "sqlite" or not async_writes:
                # Reads hung (or the write timed out and opened the breaker): one deadline,
                # then the store breaker skips the store without touching it.
                assert answers == [None] * 11
                assert _count(layer, "timeout") >= 1
                assert _count(layer, "breaker_open") >= 10
            else:
                # SQLite in WAL mode: readers pass another process's write lock.
                assert answers == [1] * 11
        _resumed(engine)
        clock.advance(RESET + 1)  # the breaker lets a trial through
        upstream.recover()
        assert get(3) == 3
        assert engine.flush(30)
        upstream.fail()
        assert get(3) == 3  # served stale from the store
        assert layer.up
    finally:
        engine.close()


@pytest.mark.parametrize("async_writes", [False, True], ids=["sync-writes", "async-writes"])
def test_a_hung_store_holds_no_async_caller(
    hung_store: tuple[str, Any, Hang], async_writes: bool, clock: FakeClock
) -> None:
    kind, url, hang = hung_store
    engine = _engine(url, async_writes, clock)
    upstream = Upstream()

    @failover.failover("svc.aget", engine=engine)
    async def aget(x: int) -> int:
        return upstream(x)  # type: ignore[return-value]

    async def recovers(n: int) -> list[int | None]:
        answers: list[int | None] = []
        for _ in range(n):
            try:
                answers.append(await aget(1))
            except ConnectionError:
                answers.append(None)
        return answers

    async def scenario() -> None:
        assert await aget(1) == 1
        assert await asyncio.to_thread(engine.flush, 10)
        layer = _deadline(engine)
        with hang():
            assert await aget(2) == 2
            upstream.fail()
            answers = await recovers(11)
            if kind != "sqlite" or not async_writes:
                assert answers == [None] * 11
                assert _count(layer, "timeout") >= 1
                assert _count(layer, "breaker_open") >= 10
            else:
                assert answers == [1] * 11
        _resumed(engine)
        clock.advance(RESET + 1)
        upstream.recover()
        assert await aget(3) == 3
        assert await asyncio.to_thread(engine.flush, 30)
        upstream.fail()
        assert await aget(3) == 3
        await engine.aclose()

    try:
        asyncio.run(scenario())
    finally:
        engine.close()


def test_a_connection_given_up_at_its_deadline_is_never_lent_again(
    pg_server: Any, clock: FakeClock
) -> None:
    import sqlalchemy as sa

    store = SqlStore(pg_server.url, table_prefix=f"t{os.urandom(4).hex()}_")
    engine = _engine(store, False, clock)
    upstream = Upstream()
    discarded = threading.Event()
    sa.event.listen(store.engine, "invalidate", lambda *_: discarded.set())
    postmaster = int((pg_server.data / "postmaster.pid").read_text().split()[0])
    try:

        @failover.failover("svc.conn", engine=engine)
        def get(x: int) -> int:
            return upstream(x)  # type: ignore[return-value]

        assert get(1) == 1
        layer = _deadline(engine)
        with stopped([postmaster, *children(postmaster)]):
            assert get(2) == 2  # its write is given up at the deadline
            assert _count(layer, "timeout") == 1
            assert not discarded.is_set()  # the operation is still stuck on the stopped server
        # Resumed: the operation ends on its worker, and its connection is closed, not kept.
        assert discarded.wait(30)
        _resumed(engine)
        clock.advance(RESET + 1)
        assert get(3) == 3
        upstream.fail()
        assert get(3) == 3  # stored on a good connection, served stale
    finally:
        engine.close()


def test_postgres_connections_carry_the_driver_bounds(pg_server: Any) -> None:
    store = SqlStore(pg_server.url, table_prefix=f"t{os.urandom(4).hex()}_")
    try:
        with store.engine.connect() as conn:
            timeout = conn.exec_driver_sql("SHOW statement_timeout").scalar()
            keepalives = conn.connection.driver_connection.info.get_parameters()
        assert timeout == "30s"
        assert keepalives.get("keepalives") == "1"
    finally:
        store.close()


def test_a_store_down_shows_in_health_and_on_the_dashboard(
    tmp_path: Path, clock: FakeClock
) -> None:
    import json

    from failover.dashboard import make_wsgi_app

    from .servers import fetch, serve_wsgi

    path = tmp_path / "f.db"
    engine = _engine(f"sqlite:///{path}", False, clock)
    upstream = Upstream()
    try:

        @failover.failover("svc.h", engine=engine)
        def get(x: int) -> int:
            return upstream(x)  # type: ignore[return-value]

        assert get(1) == 1
        report = engine.health()
        assert report.status == "up"
        assert report.stores["sqlstore"].status == "up"
        with sqlite_locked(path):
            assert get(2) == 2  # its write times out: the store breaker opens
        report = engine.health()
        assert report.failovers["svc.h"].status == "up"  # every call answered live
        assert report.status == "degraded"  # but the store is down
        assert report.stores["sqlstore"].status == "down"
        assert report.stores["sqlstore"].errors == {"timeout": 1}
        with serve_wsgi(make_wsgi_app(engine)) as base:
            status, body = fetch(f"{base}/health")
            assert status == 200
            assert json.loads(body)["stores"] == {
                "sqlstore": {"status": "down", "errors": {"timeout": 1}}
            }
            status, page = fetch(f"{base}/")
            assert 'id="stores"' in page
            assert 'data-store="sqlstore"' in page
            assert "timeout: 1" in page
        _resumed(engine)
        clock.advance(RESET + 1)
        assert get(3) == 3  # the trial answers: up again
        assert engine.health().stores["sqlstore"].status == "up"
    finally:
        engine.close()


def test_store_breaker_reset_is_a_duration_checked_at_construction(clock: FakeClock) -> None:
    engine = Failover("sqlite://", store_breaker_reset="30s", metrics=False)
    assert engine.store_breaker_reset == 30.0
    assert _deadline(engine).open_for.total_seconds() == 30.0
    engine.close()
    for bad in (0, -1, "soon", True, None):
        with pytest.raises(ConfigurationError, match="Failover: store_breaker_reset"):
            Failover("sqlite://", store_breaker_reset=bad, metrics=False)


def test_the_store_breaker_skips_the_store_for_store_breaker_reset(
    tmp_path: Path, clock: FakeClock
) -> None:
    path = tmp_path / "f.db"
    engine = Failover(
        f"sqlite:///{path}",
        async_writes=False,
        store_timeout=TIMEOUT,
        store_breaker_after=1,
        store_breaker_reset="30s",
        clock=clock,
        metrics=False,
    )
    upstream = Upstream()
    try:

        @failover.failover("svc.reset", engine=engine)
        def get(x: int) -> int:
            return upstream(x)  # type: ignore[return-value]

        assert get(1) == 1
        layer = _deadline(engine)
        with sqlite_locked(path):
            assert get(2) == 2  # its write times out: the breaker opens for 30 s
        upstream.fail()
        _resumed(engine)
        clock.advance(RESET + 1)  # past the default open time, not past the setting
        with pytest.raises(ConnectionError):
            get(1)  # skipped: the store is not asked although it answers again
        assert _count(layer, "breaker_open") == 1
        clock.advance(30)
        assert get(1) == 1  # the trial answers: served stale
        assert layer.up
    finally:
        engine.close()


def test_writes_queued_while_the_store_breaker_is_open_are_written_when_it_answers(
    pg_server: Any, clock: FakeClock
) -> None:
    store = SqlStore(pg_server.url, table_prefix=f"t{os.urandom(4).hex()}_")
    engine = _engine(store, True, clock)
    upstream = Upstream()
    postmaster = int((pg_server.data / "postmaster.pid").read_text().split()[0])
    try:

        @failover.failover("svc.queued", engine=engine)
        def get(x: int) -> int:
            return upstream(x)  # type: ignore[return-value]

        assert get(0) == 0
        assert engine.flush(10)
        layer = _deadline(engine)
        with stopped([postmaster, *children(postmaster)]):
            upstream.fail()
            with pytest.raises(ConnectionError):
                get(0)  # its read times out: the store breaker opens
            assert not layer.up
            upstream.recover()
            assert [get(x) for x in range(1, 6)] == [1, 2, 3, 4, 5]  # live, queued
            assert not engine.flush(0)  # held by the stopped server, not refused
        assert engine.flush(30)  # resumed: every queued write written
        _resumed(engine)
        clock.advance(RESET + 1)
        upstream.fail()
        assert [get(x) for x in range(1, 6)] == [1, 2, 3, 4, 5]  # each served stale
    finally:
        engine.close()


def test_caller_runs_writes_wait_no_longer_than_the_store_deadline(
    tmp_path: Path, clock: FakeClock
) -> None:
    from failover.stores.layers.async_write import AsyncWriteStore

    path = tmp_path / "f.db"
    queue = AsyncWriteStore(SqlStore(f"sqlite:///{path}"), queue_size=1, rejection="caller_runs")
    engine = Failover(
        queue, store_timeout=TIMEOUT, clock=clock, metrics=False, store_breaker_after=1
    )
    upstream = Upstream()
    try:

        @failover.failover("svc.runs", engine=engine)
        def get(x: int) -> int:
            return upstream(x)  # type: ignore[return-value]

        assert get(0) == 0
        assert engine.flush(10)
        layer = _deadline(engine)
        with sqlite_locked(path):
            # The worker's write waits its deadline too (then is retried); meanwhile a write
            # finds the queue full and runs on the caller's thread, under the deadline.
            assert [get(x) for x in range(1, 5)] == [1, 2, 3, 4]
            assert layer.errors[("store_many", "timeout")] >= 1
            assert not layer.up
        # The store answers again; its breaker lets a trial through once due. Only then do the
        # writes still waiting for it land (flush says False while they wait for an out store).
        _resumed(engine)
        clock.advance(RESET + 1)
        assert engine.flush(30)
        assert get(9) == 9  # written on a caller's thread or queued, once the store answers
        assert engine.flush(30)
        upstream.fail()
        assert get(9) == 9  # served stale
    finally:
        engine.close()
