"""A store that is out reads down, comes back up by itself, and loses no queued write.

Real servers of this module's own, faults made for real: PostgreSQL killed (``SIGKILL``: its
connections refused) then restarted on the same port and data directory, or stopped
(``SIGSTOP``) for a while; redis-server killed and restarted. ``failover_store_up`` is read from
a real `CollectorRegistry` through its text exposition. The store breaker opens after
``store_breaker_after`` operations in a row that were out, never on one slow read nor on a
caller's own encoding error. Queued writes the store could not take wait and are written once it
answers (none counted failed); one whose entry expires first is counted failed, once. The
backoff runs on the fake clock; a flush tries the waiting writes at once. No assertion on time.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import suppress
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from prometheus_client import CollectorRegistry

import failover
from failover import Failover
from failover.stores.base import walk
from failover.stores.layers.deadline import DeadlineStore

from .conftest import FakeClock, Upstream
from .execution_support import metric
from .own_servers import children, own_postgres, running, stopped
from .redis_server import RedisServer

TIMEOUT = 0.3  # the store deadline while a fault is on
PATIENT = 30.0  # once the store answers again: a loaded machine is not a hung store
HANG = 10.0  # hang guards
NAME = "svc.get"

Mode = str  # "sync" or "async"


@pytest.fixture(scope="module")
def pg() -> Iterator[Any]:
    """A PostgreSQL server of this module's own: killing it must not break other tests."""
    yield from own_postgres()


@pytest.fixture(scope="module")
def rds() -> Iterator[RedisServer]:
    yield from running(RedisServer())


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state in ("Z", "X")


def kill_postgres(server: Any) -> None:
    """``SIGKILL`` the postmaster and its backends, as a crash would: connections are refused.
    A checkpoint first: the test server commits asynchronously, and what the test stored
    before the crash must survive it (as on a server that commits synchronously)."""
    import sqlalchemy as sa

    admin = sa.create_engine(server.url, poolclass=sa.NullPool, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql("CHECKPOINT")
    admin.dispose()
    postmaster = int((server.data / "postmaster.pid").read_text().split()[0])
    pids = [postmaster, *children(postmaster)]
    for pid in pids:
        with suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    done = threading.Event()
    # A hang guard: the kernel takes a moment to tear the processes down.
    for _ in range(1000):
        if all(_gone(pid) for pid in pids):
            done.set()
            break
        done.wait(0.01)
    assert done.is_set(), "PostgreSQL did not go"
    # Its parent may not reap it here (a zombie still "exists" to the next postmaster's check):
    # the lock file goes, as an operator would remove it after a crash.
    (server.data / "postmaster.pid").unlink(missing_ok=True)
    (server.root / f".s.PGSQL.{server.port}.lock").unlink(missing_ok=True)
    (server.root / f".s.PGSQL.{server.port}").unlink(missing_ok=True)


def restart_postgres(server: Any) -> None:
    """Start the killed server again on its port and data directory (it recovers first)."""
    options = (
        f"-h 127.0.0.1 -p {server.port} -k {server.root} -F "
        "-c full_page_writes=off -c synchronous_commit=off -c max_connections=100"
    )
    server._run(
        "pg_ctl", "start", "-w", "-t", "30", "-D", str(server.data),
        "-l", str(server.root / "server.log"), "-o", options,
    )  # fmt: skip


def postgres_pids(server: Any) -> list[int]:
    postmaster = int((server.data / "postmaster.pid").read_text().split()[0])
    return [postmaster, *children(postmaster)]


def _deadline(engine: Failover) -> DeadlineStore:
    return next(s for s in walk(engine.store) if isinstance(s, DeadlineStore))


def _patient(engine: Failover) -> None:
    _deadline(engine).timeout = PATIENT


def _engine(store: Any, clock: FakeClock, registry: CollectorRegistry, **kw: Any) -> Failover:
    kw.setdefault("store_timeout", TIMEOUT)
    return Failover(store, clock=clock, metrics=registry, **kw)


def _pg_store(server: Any) -> Any:
    from failover.stores.backends.sql import SqlStore

    return SqlStore(server.url, table_prefix=f"t{os.urandom(4).hex()}_")


def store_up(registry: CollectorRegistry, store: str) -> float | None:
    return metric(registry, "failover_store_up", store=store)


def failed(registry: CollectorRegistry) -> float:
    return metric(registry, "failover_writes_total", name=NAME, result="failed") or 0.0


def _caller(engine: Failover, upstream: Upstream, mode: Mode) -> Callable[[int], Any]:
    """A failover on ``engine``, called the ``mode`` way; returns what a call returns."""
    if mode == "sync":

        @failover.failover(NAME, engine=engine, ttl="1h")
        def get(x: int) -> Any:
            return upstream(x)

        return get

    @failover.failover(NAME, engine=engine, ttl="1h")
    async def aget(x: int) -> Any:
        return upstream(x)

    return lambda x: asyncio.run(aget(x))


MODES = pytest.mark.parametrize("mode", ["sync", "async"])


class _Rig(NamedTuple):
    registry: CollectorRegistry
    engine: Failover
    upstream: Upstream
    get: Callable[[int], Any]
    layer: DeadlineStore


def _rig(store: Any, clock: FakeClock, mode: Mode = "sync", **kw: Any) -> _Rig:
    """An engine on ``store`` (``kw``: its settings) exporting to a registry of its own, an
    upstream, its failover called the ``mode`` way, and the engine's deadline layer."""
    registry = CollectorRegistry()
    engine = _engine(store, clock, registry, **kw)
    upstream = Upstream()
    return _Rig(registry, engine, upstream, _caller(engine, upstream, mode), _deadline(engine))


def _redis_url(rds: RedisServer) -> str:
    """``rds``'s URL with a key prefix of the test's own."""
    return f"{rds.url}?prefix=t{os.urandom(4).hex()}:"


# -- a killed PostgreSQL ---------------------------------------------------------------------


@MODES
def test_a_killed_postgres_reads_down_loses_no_write_and_comes_back_up(
    pg: Any, clock: FakeClock, mode: Mode
) -> None:
    registry, engine, upstream, get, _ = _rig(_pg_store(pg), clock, mode, store_timeout=2.0)
    try:
        assert get(0) == 0
        assert engine.flush(HANG)
        assert store_up(registry, "sqlstore") == 1
        kill_postgres(pg)
        try:
            # A healthy upstream: nothing but writes reach the store. Each flush is one more
            # try of everything queued; the store is down within a few of them.
            for x in range(1, 4):
                assert get(x) == x  # live
                assert not engine.flush(HANG)  # tried, and still waiting for the store
            assert store_up(registry, "sqlstore") == 0
            report = engine.health()
            assert report.stores["sqlstore"].status == "down"
            assert report.status != "up"
            assert failed(registry) == 0  # nothing given up
        finally:
            restart_postgres(pg)
        _patient(engine)
        assert get(4) == 4
        assert engine.flush(HANG)  # the waiting writes are made
        assert store_up(registry, "sqlstore") == 1
        assert engine.health().status == "up"
        upstream.fail()
        # Every write made while it was down is stored (only the store can answer now). The
        # one made before the kill may be lost: the test server commits asynchronously.
        assert [get(x) for x in range(1, 5)] == [1, 2, 3, 4]
        assert failed(registry) == 0
    finally:
        engine.close()


@MODES
def test_refused_reads_open_the_store_breaker_after_three_in_a_row(
    pg: Any, clock: FakeClock, mode: Mode
) -> None:
    registry, engine, upstream, get, layer = _rig(
        _pg_store(pg), clock, mode, store_timeout=2.0, async_writes=False
    )
    try:
        assert get(1) == 1
        upstream.fail()
        kill_postgres(pg)
        try:
            for _ in range(3):  # each read refused: a miss, the upstream's error raised
                with pytest.raises(ConnectionError):
                    get(1)
            assert store_up(registry, "sqlstore") == 0
            assert engine.health().status != "up"
            with pytest.raises(ConnectionError):
                get(1)
            assert layer.errors[("find", "breaker_open")] == 1  # skipped: no wait on it
        finally:
            restart_postgres(pg)
        _patient(engine)
        clock.advance(60)  # past store_breaker_reset: the next read is the trial
        assert get(1) == 1  # served stale from the store again (the upstream fails)
        assert store_up(registry, "sqlstore") == 1
    finally:
        engine.close()


# -- a stopped (hung) PostgreSQL ---------------------------------------------------------------


def test_writes_made_while_postgres_is_stopped_are_written_after_it_resumes(
    pg: Any, clock: FakeClock
) -> None:
    registry, engine, upstream, get, layer = _rig(_pg_store(pg), clock)
    try:
        assert get(0) == 0
        assert engine.flush(HANG)
        with stopped(postgres_pids(pg)):
            for x in range(1, 4):
                assert get(x) == x
            # The worker's write timed out at the deadline (not held by the hung store):
            # it waits, queued, to be tried again.
            assert not engine.flush(HANG)
            assert layer.errors[("store_many", "timeout")] >= 1
            assert failed(registry) == 0
        _patient(engine)
        assert engine.flush(HANG)
        upstream.fail()
        assert [get(x) for x in range(4)] == [0, 1, 2, 3]  # stored: the upstream fails
        assert failed(registry) == 0
    finally:
        engine.close()


@MODES
def test_one_slow_read_does_not_skip_the_store_three_in_a_row_do(
    pg: Any, clock: FakeClock, mode: Mode
) -> None:
    registry, engine, upstream, get, layer = _rig(_pg_store(pg), clock, mode, async_writes=False)
    try:
        assert get(1) == 1
        upstream.fail()
        with stopped(postgres_pids(pg)), pytest.raises(ConnectionError):
            get(1)  # one read past its deadline: a miss
        assert layer.errors[("find", "timeout")] == 1
        _patient(engine)
        assert get(1) == 1  # stale: the next read is not skipped
        assert store_up(registry, "sqlstore") == 1
        layer.timeout = TIMEOUT
        with stopped(postgres_pids(pg)):
            for _ in range(3):
                with pytest.raises(ConnectionError):
                    get(1)
            assert store_up(registry, "sqlstore") == 0
            with pytest.raises(ConnectionError):
                get(1)
            assert layer.errors[("find", "breaker_open")] == 1
    finally:
        engine.close()


def test_store_breaker_after_is_a_setting(pg: Any, clock: FakeClock) -> None:
    registry, engine, upstream, get, layer = _rig(
        _pg_store(pg), clock, async_writes=False, store_breaker_after=1
    )
    try:
        assert layer.after == 1
        assert get(1) == 1
        upstream.fail()
        with stopped(postgres_pids(pg)):
            with pytest.raises(ConnectionError):
                get(1)
            assert store_up(registry, "sqlstore") == 0
    finally:
        engine.close()
    for bad in (0, -1, 1.5, True, "many"):
        with pytest.raises(failover.ConfigurationError, match="store_breaker_after"):
            Failover("memory://", metrics=False, store_breaker_after=bad)
    env = {"APP_STORE_BREAKER_AFTER": "5"}
    assert Failover.from_env("APP_", env, metrics=False).store_breaker_after == 5
    with pytest.raises(failover.ConfigurationError, match="APP_STORE_BREAKER_AFTER"):
        Failover.from_env("APP_", {"APP_STORE_BREAKER_AFTER": "0"}, metrics=False)


class Opaque:
    """A result no store can encode: the caller's own error, not the store's."""

    def __init__(self) -> None:
        self.lock = threading.Lock()


def test_a_callers_encoding_error_never_opens_the_store_breaker(pg: Any, clock: FakeClock) -> None:
    registry = CollectorRegistry()
    engine = _engine(_pg_store(pg), clock, registry, async_writes=False, store_breaker_after=1)
    layer = _deadline(engine)

    @failover.failover("svc.opaque", engine=engine)
    def opaque(x: int) -> Any:  # not annotated Opaque: found out by the store, on each write
        return Opaque()

    try:
        for x in range(5):
            assert isinstance(opaque(x), Opaque)  # live; not stored
        assert layer.errors[("store", "error")] >= 1  # refused by the store (then no longer tried)
        assert layer.up
        assert store_up(registry, "sqlstore") == 1
    finally:
        engine.close()


# -- a killed redis-server: expiry while queued, close with the store dead -------------------


def test_a_killed_redis_reads_down_in_health_and_metrics_and_up_again(
    rds: RedisServer, clock: FakeClock
) -> None:
    registry, engine, upstream, get, _ = _rig(
        _redis_url(rds), clock, store_timeout=2.0, async_writes=False
    )
    try:
        assert get(1) == 1
        assert store_up(registry, "redisstore") == 1
        assert engine.health().stores["redisstore"].status == "up"
        upstream.fail()
        rds.kill()
        try:
            for _ in range(3):  # each read refused at the connection: a miss, the error raised
                with pytest.raises(ConnectionError):
                    get(1)
            assert store_up(registry, "redisstore") == 0
            report = engine.health()
            assert report.stores["redisstore"].status == "down"
            assert report.status != "up"
        finally:
            rds.start()
        clock.advance(60)  # past store_breaker_reset: the next read is the trial
        with pytest.raises(ConnectionError):  # answered (a miss: the restart lost the entry)
            get(1)
        assert store_up(registry, "redisstore") == 1
        assert engine.health().stores["redisstore"].status == "up"
    finally:
        engine.close()


def test_a_queued_write_whose_entry_expires_is_counted_failed_once(
    rds: RedisServer, clock: FakeClock
) -> None:
    registry = CollectorRegistry()
    url = _redis_url(rds)
    engine = _engine(url, clock, registry, store_timeout=2.0)
    upstream = Upstream()

    @failover.failover(NAME, engine=engine, ttl="1m")
    def get(x: int) -> Any:
        return upstream(x)

    try:
        assert get(0) == 0
        assert engine.flush(HANG)
        rds.kill()
        try:
            assert get(1) == 1
            assert not engine.flush(HANG)  # refused: it waits
            assert failed(registry) == 0
            upstream.fail()
            assert get(1) == 1  # still served from the queue meanwhile (the upstream fails)
            clock.advance(120)  # past the entry's expiry (and any backoff)
            engine.flush(HANG)
            assert failed(registry) == 1
            engine.flush(HANG)
            assert failed(registry) == 1  # once
        finally:
            rds.start()
    finally:
        engine.close()


def test_close_with_a_dead_store_ends_and_counts_what_it_gave_up(
    rds: RedisServer, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, "failover")
    registry = CollectorRegistry()
    url = _redis_url(rds)
    engine = _engine(url, clock, registry, store_timeout=2.0)
    upstream = Upstream()

    @failover.failover(NAME, engine=engine)
    def get(x: int) -> Any:
        return upstream(x)

    assert get(0) == 0
    assert engine.flush(HANG)
    rds.kill()
    try:
        for x in range(1, 4):
            assert get(x) == x
        assert not engine.flush(HANG)
        assert failed(registry) == 0
        closer = threading.Thread(target=engine.close, daemon=True)
        closer.start()
        closer.join(HANG)
        assert not closer.is_alive(), "close hung on a dead store"
        assert failed(registry) == 3
        given_up = [r for r in caplog.records if "given up at close" in r.getMessage()]
        assert len(given_up) == 1
    finally:
        rds.start()


def test_a_busy_key_never_fills_the_bound_while_the_store_is_out(
    rds: RedisServer, clock: FakeClock
) -> None:
    """Writes of a few keys made again and again while the store is out keep one waiting write
    per key: the older ones are overtaken (written by the newer), never counted failed, and
    the bound (``queue_size``) is never reached by a key's past."""
    from failover.stores import AsyncWriteStore
    from failover.stores.backends.redis import RedisStore

    registry = CollectorRegistry()
    url = _redis_url(rds)
    queue = AsyncWriteStore(RedisStore(url, clock=clock), queue_size=5)
    engine = _engine(queue, clock, registry, store_timeout=2.0)
    upstream = Upstream()

    @failover.failover(NAME, engine=engine)
    def get(x: int) -> Any:
        return upstream(x)

    try:
        assert get(0) == 0
        assert engine.flush(HANG)
        rds.kill()
        try:
            for _ in range(10):
                for key in (1, 2, 3):
                    clock.advance(1)  # each call newer than the last
                    assert get(key) == key
                    engine.flush(HANG)  # tried: refused, it waits
            assert failed(registry) == 0
            assert queue.retrying <= 3
        finally:
            rds.start()
        assert engine.flush(HANG)
        assert failed(registry) == 0
        upstream.fail()
        assert [get.referential(k).up_to_date for k in (1, 2, 3)] == [False] * 3
    finally:
        engine.close()
