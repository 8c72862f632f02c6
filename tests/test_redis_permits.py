"""`RedisPermits` (issue 20): one pool for every process, on real ``redis-server`` processes and
real worker processes: never more permits in use than the pool has, a killed holder's permits
back after its lease, and Redis down → the configured choice, never a hang."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pybreaker
import pytest
from prometheus_client import CollectorRegistry

import failover
from failover import BulkheadFull, ConfigurationError
from failover.execution.redis_permits import RedisPermits
from failover.stores.backends.redis import RedisStore

from . import redis_server
from .execution_support import WAIT, ABlocking, Blocking, auntil, metric, until
from .own_servers import running
from .redis_server import RedisServer

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def server() -> RedisServer:
    return redis_server.server()


@pytest.fixture
def prefix() -> str:
    return redis_server.unique_prefix()


# The socket timeout of the sources whose Redis is never stopped: what is tested is the pool, and
# a loaded host's round trip may outlast the default 0.25 s (the ask then fails: a call refused,
# a count raising).
ASK = WAIT


def bound(server: RedisServer, prefix: str, permits: int, fair: bool = True, **kw: Any) -> Any:
    """A pool's source, as one process would bind it."""
    kw.setdefault("socket_timeout", ASK)
    return RedisPermits(server.url, prefix=prefix, **kw).bind("pool", permits, fair)


# -- the semaphore --------------------------------------------------------------------------------


def test_two_sources_of_one_pool_share_its_permits_with_weights(
    server: RedisServer, prefix: str
) -> None:
    a, b = bound(server, prefix, 3), bound(server, prefix, 3)  # two processes, say
    heavy = a.acquire(2, 0.0)
    assert heavy is not None
    assert b.acquire(2, 0.0) is None  # 2 + 2 > 3, and a fail-fast call does not wait
    light = b.acquire(1, 0.0)
    assert light is not None
    assert (a.in_use(), b.in_use()) == (3, 3)
    a.release(heavy)
    again = b.acquire(2, 0.0)
    assert again is not None
    b.release(again)
    b.release(light)
    assert a.in_use() == 0
    for source in (a, b):
        source.close()


def test_waiters_are_served_in_arrival_order_across_processes(
    server: RedisServer, prefix: str
) -> None:
    holder, heavy_source, light_source = (bound(server, prefix, 3) for _ in range(3))
    held = holder.acquire(2, 0.0)
    got: list[str] = []

    def take(source: Any, name: str, weight: int) -> None:
        lease = source.acquire(weight, None)
        got.append(name)
        source.release(lease)

    # The heavy waiter needs the whole pool, so the light one can only be served after the
    # heavy one has released: the order of `got` does not depend on thread scheduling.
    heavy = threading.Thread(target=take, args=(heavy_source, "heavy", 3))
    heavy.start()
    until(lambda: holder.queued() == 1, "the heavy waiter in the Redis queue")
    assert light_source.acquire(1, 0.0) is None  # one permit is free, but a waiter is first
    light = threading.Thread(target=take, args=(light_source, "light", 1))
    light.start()
    until(lambda: holder.queued() == 2, "the light waiter behind it")
    holder.release(held)
    heavy.join(WAIT)
    light.join(WAIT)
    assert got == ["heavy", "light"]
    assert (holder.in_use(), holder.queued()) == (0, 0)
    unfair = bound(server, prefix + "u", 3, fair=False)
    first = unfair.acquire(2, 0.0)
    assert first is not None
    assert unfair.acquire(1, 0.0) is not None  # nobody is ahead in an unfair pool
    for source in (holder, heavy_source, light_source, unfair):
        source.close()


def test_a_waiter_that_gives_up_leaves_the_queue_at_once(server: RedisServer, prefix: str) -> None:
    holder, waiter = bound(server, prefix, 1), bound(server, prefix, 1)
    held = holder.acquire(1, 0.0)
    assert waiter.acquire(1, time.monotonic() + 0.02) is None  # waited its 20 ms in vain
    assert holder.queued() == 0  # its place is gone now, not when it lapses
    holder.release(held)
    assert waiter.acquire(1, 0.0) is not None
    holder.close()
    waiter.close()


def test_a_lease_is_renewed_while_its_call_runs(server: RedisServer, prefix: str) -> None:
    source = bound(server, prefix, 1, lease="300ms")
    lease = source.acquire(1, 0.0)
    client = server.client()
    key = f"{prefix}{{pool}}:h"
    first = client.zscore(key, lease[0])
    # Renewed every 100 ms: the expiry moves on, past the first lease's end.
    until(lambda: (client.zscore(key, lease[0]) or 0) > first + 300, "two renewals")
    assert source.in_use() == 1
    source.release(lease)
    assert source.in_use() == 0
    source.close()
    client.close()


def test_settings_are_checked(server: RedisServer) -> None:
    with pytest.raises(ConfigurationError, match="RedisPermits: lease"):
        RedisPermits(server.url, lease="0s")
    with pytest.raises(ConfigurationError, match="unavailable must be 'refuse' or 'local'"):
        RedisPermits(server.url, unavailable="wait")
    with pytest.raises(ConfigurationError, match="url_or_client"):
        RedisPermits(42)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="not a Redis URL"):
        RedisPermits("http://localhost")
    with pytest.raises(ConfigurationError, match="RedisPermits: socket_timeout"):
        RedisPermits(server.url, socket_timeout=0)


# -- through failovers -----------------------------------------------------------------------------


def test_failovers_share_a_redis_pool_and_nested_calls_take_no_permit(
    server: RedisServer, prefix: str
) -> None:
    engine = failover.Failover(metrics=False)
    pool = engine.bulkhead_pool(
        "r", permits=2, source=RedisPermits(server.url, prefix=prefix, socket_timeout=ASK)
    )
    up = Blocking()

    @failover.failover("r-a", engine=engine, bulkhead="r", policy="never_throw")
    def a(x: str) -> object:
        return up(x)

    @failover.failover("r-b", engine=engine, bulkhead="r", weight=2, policy="never_throw")
    def b(x: str) -> object:
        return a(x)  # nested: the outer call's permits cover it

    up.release.set()
    assert b("nested") == "nested"
    assert pool.free == 2
    up.release.clear()
    with contextlib.ExitStack() as stack:
        threads = stack.enter_context(ThreadPoolExecutor(2))
        held = [threads.submit(a, "x"), threads.submit(a, "y")]
        up.wait_entered(2)
        assert b("z") is None  # refused: the Redis pool is full
        assert engine.health().pools[pool.name].rejected == {"r-b": 1}
        up.release.set()
        assert [h.result() for h in held] == ["x", "y"]
    assert pool.free == 2
    engine.close()


async def test_a_task_cancelled_while_waiting_in_redis_takes_nothing(
    server: RedisServer, prefix: str
) -> None:
    engine = failover.Failover(metrics=False)
    pool = engine.bulkhead_pool(
        "ar", permits=1, source=RedisPermits(server.url, prefix=prefix, socket_timeout=ASK)
    )
    up = ABlocking()

    @failover.failover("ar-f", engine=engine, bulkhead="ar", acquire_timeout=None)
    async def f(x: str) -> object:
        return await up(x)

    source: Any = pool.source
    holder = asyncio.create_task(f("a"))
    await up.wait_entered()
    waiter = asyncio.create_task(f("b"))
    await auntil(lambda: source.waiting() == 1, "the waiter")
    await asyncio.to_thread(until, lambda: source.queued() == 1, "its place in Redis")
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    await asyncio.to_thread(until, lambda: source.queued() == 0, "its place given back")
    up.release.set()
    assert await holder == "a"
    assert await f("c") == "c"  # the next caller is served
    assert await asyncio.to_thread(source.in_use) == 0
    engine.close()


def test_one_redis_client_serves_the_store_the_shared_breaker_and_the_pool(
    server: RedisServer, prefix: str
) -> None:
    client = server.client()  # bytes replies, as pybreaker's storage needs
    engine = failover.Failover(
        RedisStore(client, prefix=prefix),
        metrics=False,
        breaker_defaults={
            "state_storage": lambda name: pybreaker.CircuitRedisStorage(
                pybreaker.STATE_CLOSED, client, namespace=f"{prefix}{name}"
            )
        },
    )
    pool = engine.bulkhead_pool("one-client", permits=2, source=RedisPermits(client, prefix=prefix))

    @failover.failover("one-client.f", engine=engine, bulkhead="one-client", breaker=True)
    def f(x: str) -> dict[str, str]:
        assert pool.free == 1  # this call's permit, counted in Redis
        return {"x": x}

    assert f("a") == {"x": "a"}
    assert engine.flush(WAIT)
    assert f.peek("a") is not None  # stored in the same Redis
    assert pool.free == 2
    engine.close()
    client.ping()  # a client the engine was given stays open
    client.close()


# -- Redis down: the configured choice, never a hang ---------------------------------------------


@pytest.fixture
def own_server() -> Iterator[RedisServer]:
    yield from running(RedisServer())


@pytest.mark.parametrize("unavailable", ["refuse", "local"])
def test_redis_down_refuses_or_falls_back_as_configured(
    own_server: RedisServer, unavailable: str
) -> None:
    registry = CollectorRegistry()
    engine = failover.Failover(metrics=registry)
    source = RedisPermits(own_server.url, unavailable=unavailable, socket_timeout=0.2)
    engine.bulkhead_pool("down", permits=1, source=source)
    answers = iter(["live", "fresh"])

    @failover.failover("down-f", engine=engine, bulkhead="down", acquire_timeout=None)
    def f() -> str:
        return next(answers)

    assert f.referential().payload == "live"  # stored
    own_server.kill()
    env = f.referential()
    if unavailable == "refuse":  # served from the store, BulkheadFull as the cause
        assert (env.payload, env.up_to_date) == ("live", False)
        assert isinstance(env.cause, BulkheadFull)
        assert "could not be had (redis" in str(env.cause)
    else:  # in-process permits meanwhile: the upstream is called
        assert (env.payload, env.up_to_date) == ("fresh", True)
    assert engine.bulkhead(f.definition).pool.source.waiting() == 0
    # Health and metrics still answer: the pool's counts are unknown, never an exception.
    assert engine.health().pools["down"].in_use is None
    assert metric(registry, "failover_bulkhead_permits_in_use", pool="down") is None
    refused = metric(registry, "failover_bulkhead_rejected_total", name="down-f", pool="down")
    assert refused == (1 if unavailable == "refuse" else None)
    engine.close()


def test_a_hung_redis_never_holds_a_waiting_call(own_server: RedisServer) -> None:
    engine = failover.Failover(metrics=False)
    source = RedisPermits(own_server.url, socket_timeout=0.2)
    engine.bulkhead_pool("hung", permits=1, source=source)

    @failover.failover("hung-f", engine=engine, bulkhead="hung", acquire_timeout=None)
    def f() -> str:
        return "live"

    assert f() == "live"
    assert own_server.process is not None
    own_server.process.send_signal(signal.SIGSTOP)  # answers nobody, closes nothing
    try:
        done: list[object] = []
        call = threading.Thread(target=lambda: done.append(f.referential()))
        call.start()
        call.join(WAIT)  # no limit on the wait for permits, yet the call comes back
        assert done, "the call hung on a stopped Redis"
        env: Any = done[0]
        assert (env.payload, env.up_to_date) == ("live", False)
        assert isinstance(env.cause, BulkheadFull)
    finally:
        own_server.process.send_signal(signal.SIGCONT)
    engine.close()


async def test_a_hung_redis_never_holds_a_waiting_task(own_server: RedisServer) -> None:
    engine = failover.Failover(metrics=False)
    source = RedisPermits(own_server.url, socket_timeout=0.2, unavailable="local")
    engine.bulkhead_pool("ahung", permits=1, source=source)

    @failover.failover("ahung-f", engine=engine, bulkhead="ahung", acquire_timeout=None)
    async def f() -> str:
        return "live"

    assert await f() == "live"
    assert own_server.process is not None
    own_server.process.send_signal(signal.SIGSTOP)
    try:
        # No limit on the wait, a stopped Redis: in-process permits answer instead.
        assert await asyncio.wait_for(f(), WAIT) == "live"
    finally:
        own_server.process.send_signal(signal.SIGCONT)
    engine.close()


# -- real processes --------------------------------------------------------------------------------

WORKER = r"""
import json, sys, threading, time
import failover

url, prefix, role, permits, threads, calls = sys.argv[1:7]
permits, threads, calls = int(permits), int(threads), int(calls)
engine = failover.Failover(metrics=False)
engine.bulkhead_pool(
    "cluster",
    permits=permits,
    # A generous socket timeout: a loaded host's round trip past the default 0.25 s would
    # refuse a call (``live`` short of ``calls``); the pool is tested, not the timeout.
    source=failover.RedisPermits(url, prefix=prefix, lease="1s", socket_timeout=5),
)
events = []  # (monotonic ns, +weight on entering, -weight on leaving)


weight = 2 if role == "heavy" else 1


@failover.failover("cluster.f", engine=engine, bulkhead="cluster", weight=weight,
                   acquire_timeout=None)
def f(i: int) -> int:
    events.append((time.monotonic_ns(), weight))  # after the permits were taken
    time.sleep(0.001)  # some work, so that calls overlap
    events.append((time.monotonic_ns(), -weight))  # before they are given back
    return i


if role == "holder":
    f_hold = failover.failover("cluster.hold", engine=engine, bulkhead="cluster", weight=2)
    release = threading.Event()
    f_hold(lambda: (print("held", flush=True), release.wait()))()
    sys.exit(0)
print("ready", flush=True)
sys.stdin.readline()  # go
answers = []
def run():
    answers.extend(f.referential(i).up_to_date for i in range(calls))
workers = [threading.Thread(target=run) for _ in range(threads)]
for w in workers:
    w.start()
for w in workers:
    w.join()
print(json.dumps({"events": events, "live": sum(answers), "calls": len(answers)}), flush=True)
engine.close()
"""


def worker(server: RedisServer, prefix: str, role: str, permits: int, threads: int = 0,
           calls: int = 0) -> subprocess.Popen[str]:  # fmt: skip
    return subprocess.Popen(
        [sys.executable, "-c", WORKER, server.url, prefix, role, str(permits), str(threads),
         str(calls)],
        cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip


def first_line(process: subprocess.Popen[str]) -> str:
    assert process.stdout is not None
    line = process.stdout.readline().strip()
    if not line:
        process.kill()
        raise AssertionError(process.communicate()[1])
    return line


def test_two_processes_never_exceed_the_pool_together(server: RedisServer, prefix: str) -> None:
    permits = 3
    processes = [
        worker(server, prefix, "light", permits, threads=4, calls=20),
        worker(server, prefix, "heavy", permits, threads=3, calls=15),
    ]
    try:
        assert [first_line(p) for p in processes] == ["ready", "ready"]
        for p in processes:
            assert p.stdin is not None
            p.stdin.write("go\n")
            p.stdin.flush()
        results = []
        for p in processes:
            out, err = p.communicate(timeout=60)
            assert p.returncode == 0, err
            results.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for p in processes:
            if p.poll() is None:
                p.kill()
    assert [(r["live"], r["calls"]) for r in results] == [(80, 80), (45, 45)]
    # Merge both processes' records on the one monotonic clock of the host; at equal times a
    # leave sorts first (it happened before the permits went to the other process).
    merged = sorted((t, w) for r in results for t, w in r["events"])
    in_use = most = 0
    for _, weight in merged:
        in_use += weight
        most = max(most, in_use)
    assert in_use == 0
    assert most <= permits, f"{most} permits in use together, the pool has {permits}"
    spans = [(min(t for t, _ in r["events"]), max(t for t, _ in r["events"])) for r in results]
    assert spans[0][0] < spans[1][1], "the processes overlapped"
    assert spans[1][0] < spans[0][1], "the processes overlapped"


def test_a_killed_holder_gives_its_permits_back_within_the_lease(
    server: RedisServer, prefix: str
) -> None:
    source = RedisPermits(server.url, prefix=prefix, socket_timeout=ASK).bind("cluster", 3, True)
    holder = worker(server, prefix, "holder", 3)
    try:
        assert first_line(holder) == "held"
        assert source.in_use() == 2  # a weight-2 lease, renewed while the holder lives
        assert source.acquire(2, 0.0) is None
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(WAIT)
    finally:
        if holder.poll() is None:
            holder.kill()
        holder.communicate()
    # Nobody renews the lease any more: Redis lets it lapse (1 s), and the permits come back.
    until(lambda: source.in_use() == 0, "the dead holder's lease to lapse")
    lease = source.acquire(3, 0.0)
    assert lease is not None
    source.release(lease)
    source.close()
