"""Hung-store benchmark: what callers wait while the store hangs.

Run with ``.venv/bin/python bench/hung_store.py`` (``--fleet``: the fleet rows alone). A throwaway
PostgreSQL and redis-server on loopback are started as the test suite starts them, then stopped
with ``SIGSTOP`` (the kernel still accepts their TCP data: no socket error ever comes) and resumed;
SQLite's write lock is held by another process (``BEGIN EXCLUSIVE``). For each store, with async
writes on and off, it prints the time of one live success, one recover, and ten recovers in a row,
while the store hangs (``store_timeout`` 0.5 s, the default). A tiered store (``tiered+redis://``,
its writes always queued) with its far Redis stopped shows the hedge: recovers answered from the
near copy.

The fleet rows: calls per second through a breaker made by the engine (``breaker=True``, the
upstream answering, an in-memory store), with no fleet, with ``fleet=`` on a healthy Redis, and
with the fleet's Redis stopped (``SIGSTOP``), sync and async callers.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext, suppress
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # tests/ starts the servers

import failover  # noqa: E402
from failover.stores.backends.sql import SqlStore  # noqa: E402
from tests import postgres  # noqa: E402
from tests.own_servers import children, stopped  # noqa: E402
from tests.redis_server import RedisServer  # noqa: E402
from tests.test_store_hung import sqlite_locked  # noqa: E402


class Down(Exception):
    """The upstream's outage."""


def measure(store: Any, async_writes: bool, hang: Callable[[], AbstractContextManager[Any]]) -> str:
    """One markdown row: live, one recover, ten recovers (milliseconds) while the store hangs."""
    engine = failover.Failover(store, async_writes=async_writes, metrics=False)
    down = [False]

    @failover.failover("bench.hung", engine=engine)
    def get(x: int) -> int:
        if down[0]:
            raise Down(x)
        return x

    def recover() -> None:
        with suppress(Down):
            get(1)

    get(1)
    engine.flush(10)
    try:
        with hang():
            start = time.perf_counter()
            get(2)
            live = time.perf_counter() - start
            down[0] = True
            start = time.perf_counter()
            recover()
            one = time.perf_counter() - start
            start = time.perf_counter()
            for _ in range(10):
                recover()
            ten = time.perf_counter() - start
    finally:
        engine.close()
    mode = "async writes" if async_writes else "sync writes"
    return f"| {mode} | {live * 1000:,.1f} | {one * 1000:,.1f} | {ten * 1000:,.1f} |"


FLEET_CALLS = 20_000


def fleet_rate(
    fleet: str | None,
    hang: Callable[[], AbstractContextManager[Any]],
    storage: Any = None,
    calls: int = FLEET_CALLS,
) -> str:
    """Calls per second, sync and async, through an engine-made breaker while ``hang`` holds
    (``storage``: a ``breaker_defaults['state_storage']`` factory instead of a fleet)."""
    defaults = None if storage is None else {"state_storage": storage}
    engine = failover.Failover("memory://", metrics=False, fleet=fleet, breaker_defaults=defaults)

    @failover.failover("bench.fleet", engine=engine, breaker=True)
    def get(x: int) -> int:
        return x

    @failover.failover("bench.afleet", engine=engine, breaker=True)
    async def aget(x: int) -> int:
        return x

    async def many() -> None:
        for i in range(calls):
            await aget(i % 100)

    get(1)
    asyncio.run(aget(1))
    if engine.fleet is not None:
        engine.fleet.sync()
    try:
        with hang():
            start = time.perf_counter()
            for i in range(calls):
                get(i % 100)
            sync_rate = calls / (time.perf_counter() - start)
            start = time.perf_counter()
            asyncio.run(many())
            async_rate = calls / (time.perf_counter() - start)
    finally:
        engine.close()
    return f"{sync_rate:,.0f} | {async_rate:,.0f}"


def fleet_table(redis: RedisServer) -> None:
    """The fleet rows: no fleet, a healthy fleet, a stopped one."""
    assert redis.process is not None
    pid = redis.process.pid
    fleet = f"{redis.url}?prefix=benchfleet{time.time_ns()}:"
    print("\nBreaker (breaker=True), calls per second\n")
    print("| fleet | sync calls/s | async calls/s |")
    print("|---|---:|---:|")
    print(f"| none | {fleet_rate(None, _nothing)} |")
    print(f"| Redis healthy | {fleet_rate(fleet, _nothing)} |")
    print(f"| Redis stopped (SIGSTOP) | {fleet_rate(fleet, lambda: stopped([pid]))} |")
    import pybreaker
    import redis as redis_py

    client = redis_py.Redis.from_url(redis.url, socket_timeout=0.1, socket_connect_timeout=0.1)
    space = f"benchstorage{time.time_ns()}"

    def storage(name: str) -> Any:
        return pybreaker.CircuitRedisStorage("closed", client, namespace=f"{space}:{name}")

    label = "pybreaker `CircuitRedisStorage` (`socket_timeout=0.1`)"
    print(f"| {label}, Redis healthy | {fleet_rate(None, _nothing, storage, 2_000)} |")
    hung = fleet_rate(None, lambda: stopped([pid]), storage, 10)
    print(f"| {label}, Redis stopped (SIGSTOP) | {hung} |")
    client.close()


def _nothing() -> AbstractContextManager[Any]:
    return nullcontext()


def main() -> None:
    """Print one table per store, then the fleet rows (``--fleet``: those alone)."""
    if "--fleet" in sys.argv[1:]:
        redis = RedisServer().start()
        try:
            fleet_table(redis)
        finally:
            redis.stop()
        return
    bin_dir = postgres.find_bin_dir()
    pg = postgres.PostgresServer(bin_dir) if bin_dir else None
    redis = RedisServer().start()
    try:
        cases: list[tuple[str, Callable[[], Any], Callable[[], Any]]] = []
        tiered = f"tiered+{redis.url}?prefix=bench{time.time_ns()}:"
        folder = Path(tempfile.mkdtemp(prefix="failover-hung-"))
        path = folder / "f.db"
        cases.append(("SQLite (locked)", lambda: f"sqlite:///{path}", lambda: sqlite_locked(path)))
        assert redis.process is not None
        pid = redis.process.pid
        cases.append(("Redis (SIGSTOP)", lambda: redis.url, lambda: stopped([pid])))
        cases.append(("tiered+redis, far Redis (SIGSTOP)", lambda: tiered, lambda: stopped([pid])))
        if pg is not None:
            pg.start()
            master = int((pg.data / "postmaster.pid").read_text().split()[0])
            cases.append(
                (
                    "PostgreSQL (SIGSTOP)",
                    lambda: SqlStore(pg.url, table_prefix=f"b{time.time_ns()}_"),
                    lambda: stopped([master, *children(master)]),
                )
            )
        for title, make, hang in cases:
            print(f"\n{title}, store_timeout 0.5 s (milliseconds)\n")
            print("| writes | live success | one recover | ten recovers |")
            print("|---|---:|---:|---:|")
            for async_writes in (True,) if title.startswith("tiered") else (True, False):
                print(measure(make(), async_writes, hang))
        fleet_table(redis)
    finally:
        redis.stop()
        if pg is not None:
            pg.stop()


if __name__ == "__main__":
    main()
