"""Permits at their edges (issue 20), on real ``redis-server`` processes and real child
processes: a holder or a waiter killed with ``SIGKILL``, weights against a pool, two engines on
one Redis pool, and a Redis stopped (``SIGSTOP``) while calls wait for permits."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

import failover
from failover import BulkheadFull, ConfigurationError
from failover.execution.redis_permits import RedisPermits

from . import redis_server
from .execution_support import WAIT, until
from .redis_server import RedisServer

ROOT = Path(__file__).resolve().parent.parent
# The socket timeout of the sources whose Redis is never stopped (the child's too): what is tested
# is the pool, and a loaded host's round trip may outlast the default 0.25 s (the ask then fails:
# a call refused, a count raising).
ASK = WAIT


@pytest.fixture
def server() -> RedisServer:
    return redis_server.server()


@pytest.fixture
def prefix() -> str:
    return redis_server.unique_prefix()


@pytest.fixture
def own_server() -> Iterator[RedisServer]:
    started = RedisServer().start()
    try:
        yield started
    finally:
        if started.process is not None:
            started.process.send_signal(signal.SIGCONT)
        started.stop()


def redis_ms(client: Any) -> int:
    """Redis's own clock (``TIME``) in milliseconds, the clock leases expire on."""
    seconds, micros = client.time()
    return int(seconds) * 1000 + int(micros) // 1000


# -- a child process that dies holding or waiting for permits ------------------------------------

CHILD = r"""
import sys, threading
from failover.execution.redis_permits import RedisPermits

url, prefix, permits, weight, role = sys.argv[1:6]
source = RedisPermits(url, prefix=prefix, lease="600ms", socket_timeout=5).bind(
    "pool", int(permits), True
)
if role == "hold":
    lease = source.acquire(int(weight), 0.0)
    assert lease is not None
    print(lease[0], flush=True)
else:
    print("asking", flush=True)
    source.acquire(int(weight), None)  # waits in the queue until killed
threading.Event().wait()
"""


def child(server: RedisServer, prefix: str, permits: int, weight: int, role: str) -> Any:
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, server.url, prefix, str(permits), str(weight), role],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def line_of(process: Any) -> str:
    line: str = process.stdout.readline().strip()
    if not line:
        process.kill()
        raise AssertionError(process.communicate()[1])
    return line


def killed(process: Any) -> None:
    os.kill(process.pid, signal.SIGKILL)
    process.wait(WAIT)
    process.communicate()


def test_a_killed_holder_s_permits_come_back_when_its_lease_lapses_never_before(
    server: RedisServer, prefix: str
) -> None:
    source = RedisPermits(server.url, prefix=prefix, lease="600ms", socket_timeout=ASK)
    source = source.bind("pool", 3, True)
    client = server.client()
    holder = child(server, prefix, 3, 2, "hold")
    try:
        lease = line_of(holder)
        # Let the child renew once (every 200 ms): a live holder keeps its permits past its
        # first lease.
        first = float(client.zscore(f"{prefix}{{pool}}:h", lease))
        until(
            lambda: float(client.zscore(f"{prefix}{{pool}}:h", lease) or 0) > first,
            "a renewal by the child",
        )
        killed(holder)
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.communicate()
    expires = client.zscore(f"{prefix}{{pool}}:h", lease)
    assert expires is not None  # nobody renews it now, but it is still held
    if redis_ms(client) < expires:
        assert source.acquire(2, 0.0) is None  # the dead holder's lease has not lapsed yet
        assert source.in_use() == 2
    # A waiter for the whole pool: granted only once Redis's clock passed the lease's end.
    whole = source.acquire(3, None)
    granted_at = redis_ms(client)
    assert whole is not None
    assert granted_at >= expires, (granted_at, expires)
    assert source.in_use() == 3
    source.release(whole)
    assert (source.in_use(), source.queued()) == (0, 0)
    source.close()
    client.close()


def test_a_killed_waiter_at_the_head_of_a_fair_queue_holds_nobody_up(
    server: RedisServer, prefix: str
) -> None:
    source = RedisPermits(server.url, prefix=prefix, lease="600ms", socket_timeout=ASK)
    source = source.bind("pool", 3, True)
    held = source.acquire(1, 0.0)
    assert held is not None
    heavy = child(server, prefix, 3, 3, "wait")  # needs the whole pool: queues at the head
    try:
        assert line_of(heavy) == "asking"
        until(lambda: source.queued() == 1, "the child's place in the queue")
        assert source.acquire(1, 0.0) is None  # fair: two permits free, but the child is first
        killed(heavy)
    finally:
        if heavy.poll() is None:
            heavy.kill()
            heavy.communicate()
    # Its place lapses (a second after its last ask): a light waiter is served then.
    light = source.acquire(2, None)
    assert light is not None
    assert (source.in_use(), source.queued()) == (3, 0)
    source.release(light)
    source.release(held)
    assert source.in_use() == 0
    source.close()


# -- weights ---------------------------------------------------------------------------------------


def test_a_weight_above_a_redis_pool_is_refused_at_decoration_and_at_the_first_call(
    server: RedisServer, prefix: str
) -> None:
    engine = failover.Failover(metrics=False)

    @failover.failover("late-heavy", engine=engine, bulkhead="rp", weight=3)
    def late() -> str:
        return "never"

    engine.bulkhead_pool(
        "rp", permits=2, source=RedisPermits(server.url, prefix=prefix, socket_timeout=ASK)
    )
    with pytest.raises(ConfigurationError, match=r"'early-heavy': weight=3 .* 2 permits"):
        failover.failover("early-heavy", engine=engine, bulkhead="rp", weight=3)(lambda: None)
    with pytest.raises(ConfigurationError, match=r"'late-heavy': weight=3 .* 2 permits"):
        late()
    pool = engine.health().pools["rp"]
    assert (pool.in_use, pool.waiting) == (0, 0)  # the refused call never asked Redis
    engine.close()


def test_a_heavy_waiter_is_not_starved_by_a_stream_of_light_calls(
    server: RedisServer, prefix: str
) -> None:
    """Two engines on one fair Redis pool of 3: light calls of one engine loop without pause;
    a weight-3 call of the other arrives among them and is served, after which the light calls
    go on."""
    light_engine, heavy_engine = failover.Failover(metrics=False), failover.Failover(metrics=False)
    for engine in (light_engine, heavy_engine):
        engine.bulkhead_pool(
            "fairp", permits=3, source=RedisPermits(server.url, prefix=prefix, socket_timeout=ASK)
        )
    stop = threading.Event()
    heavy_done = threading.Event()
    after_heavy = threading.Semaphore(0)
    lock = threading.Lock()
    inside = [0, 0]

    def count(weight: int) -> None:
        with lock:
            inside[0] += weight
            inside[1] = max(inside[1], inside[0])

    @failover.failover("fair.light", engine=light_engine, bulkhead="fairp", acquire_timeout=None)
    def light(i: int) -> int:
        count(1)
        count(-1)
        if heavy_done.is_set():
            after_heavy.release()
        return i

    @failover.failover(
        "fair.heavy", engine=heavy_engine, bulkhead="fairp", weight=3, acquire_timeout=None
    )
    def heavy() -> str:
        count(3)
        count(-3)
        return "heavy"

    started = threading.Barrier(4)

    def loop() -> int:
        started.wait(WAIT)
        n = 0
        while not stop.is_set():
            assert light(n) == n
            n += 1
        return n

    with ThreadPoolExecutor(3) as threads:
        loops = [threads.submit(loop) for _ in range(3)]
        started.wait(WAIT)
        try:
            assert heavy() == "heavy"  # no limit on its wait, yet it comes back
            heavy_done.set()
            for _ in range(3):  # and the light calls are served again
                assert after_heavy.acquire(timeout=WAIT)
        finally:
            stop.set()
        assert all(f.result() > 0 for f in loops)
    assert inside == [0, 3]
    source: Any = light_engine.bulkhead(light.definition).pool.source
    assert (source.in_use(), source.queued()) == (0, 0)
    light_engine.close()
    heavy_engine.close()


# -- two engines, one Redis pool: never more than its permits across both -----------------------


def test_two_engines_threads_and_tasks_never_exceed_the_pool_together(
    server: RedisServer, prefix: str
) -> None:
    permits, threads, tasks, calls = 3, 4, 4, 10
    sync_engine, async_engine = failover.Failover(metrics=False), failover.Failover(metrics=False)
    for engine in (sync_engine, async_engine):
        engine.bulkhead_pool(
            "both",
            permits=permits,
            source=RedisPermits(server.url, prefix=prefix, socket_timeout=ASK),
        )
    lock = threading.Lock()
    inside = [0, 0]  # permits in use now, most seen, across both engines

    def enter(weight: int) -> None:
        with lock:
            inside[0] += weight
            inside[1] = max(inside[1], inside[0])

    def leave(weight: int) -> None:
        with lock:
            inside[0] -= weight

    @failover.failover("both.sync", engine=sync_engine, bulkhead="both", acquire_timeout=None)
    def one(i: int) -> int:
        enter(1)
        threading.Event().wait(0.001)  # hold the permit while others ask
        leave(1)
        return i

    @failover.failover(
        "both.async", engine=async_engine, bulkhead="both", weight=2, acquire_timeout=None
    )
    async def two(i: int) -> int:
        enter(2)
        await asyncio.sleep(0.001)
        leave(2)
        return i

    async def run_tasks() -> int:
        async def worker() -> int:
            return len([await two(i) for i in range(calls)])

        return sum(await asyncio.gather(*(worker() for _ in range(tasks))))

    start = threading.Barrier(threads + 1)

    def thread_worker() -> int:
        start.wait(WAIT)
        return len([one(i) for i in range(calls)])

    with ThreadPoolExecutor(threads) as pool:
        futures = [pool.submit(thread_worker) for _ in range(threads)]
        start.wait(WAIT)
        assert asyncio.run(run_tasks()) == tasks * calls
        assert sum(f.result() for f in futures) == threads * calls
    assert inside[0] == 0
    assert inside[1] <= permits, f"{inside[1]} permits in use across both engines"
    source: Any = sync_engine.bulkhead(one.definition).pool.source
    assert (source.in_use(), source.queued()) == (0, 0)
    sync_engine.close()
    async_engine.close()


# -- Redis stopped while calls wait ---------------------------------------------------------------


@pytest.mark.parametrize("unavailable", ["refuse", "local"])
def test_a_stopped_redis_while_calls_wait_then_resumed_leaks_no_permits(
    own_server: RedisServer, unavailable: str
) -> None:
    engine = failover.Failover(metrics=False)
    source = RedisPermits(own_server.url, unavailable=unavailable, socket_timeout=0.2)
    pool = engine.bulkhead_pool("stopped", permits=2, source=source)
    release = threading.Event()
    entered = threading.Semaphore(0)

    @failover.failover("stopped.hold", engine=engine, bulkhead="stopped", weight=2)
    def hold() -> str:
        entered.release()
        assert release.wait(WAIT)
        return "held"

    @failover.failover("stopped.f", engine=engine, bulkhead="stopped", acquire_timeout="1s")
    def f(i: int) -> str:
        return "live"

    assert f(0) == "live"  # stored, for the refused calls to be served from
    redis_source: Any = pool.source
    with ThreadPoolExecutor(4) as threads:
        holder = threads.submit(hold)
        assert entered.acquire(timeout=WAIT)
        waiters = [threads.submit(f.referential, 0) for _ in range(3)]
        until(lambda: redis_source.queued() == 3, "three waiters in the Redis queue")
        assert own_server.process is not None
        own_server.process.send_signal(signal.SIGSTOP)
        try:
            envs = [w.result(WAIT) for w in waiters]  # never a hang
        finally:
            own_server.process.send_signal(signal.SIGCONT)
        release.set()
        assert holder.result(WAIT) == "held"
    for env in envs:
        if unavailable == "refuse":
            assert not env.up_to_date
            assert isinstance(env.cause, BulkheadFull)
        else:
            assert env.up_to_date, env.cause
    # Redis answers again: nothing of the stopped calls stays taken.
    assert redis_source.waiting() == 0
    assert redis_source.in_use() == 0, "permits taken by calls that gave up"
    assert f(1) == "live"
    whole = redis_source.acquire(2, 0.0)
    assert whole is not None, "the whole pool is not free after Redis resumed"
    redis_source.release(whole)
    engine.close()


@pytest.mark.parametrize("unavailable", ["refuse", "local"])
def test_asks_left_unanswered_by_a_stopped_redis_take_no_permits_when_it_resumes(
    own_server: RedisServer, unavailable: str
) -> None:
    """A call gives up on an ask that Redis, stopped, has not read yet; resumed, Redis runs it
    all the same. The permits it grants then must not stay taken (for a whole lease: 30 s)."""
    engine = failover.Failover(metrics=False)
    source = RedisPermits(own_server.url, unavailable=unavailable, socket_timeout=0.2)
    pool = engine.bulkhead_pool("paused", permits=2, source=source)

    @failover.failover("paused.f", engine=engine, bulkhead="paused")
    def f(i: int) -> str:
        return "live"

    assert f(0) == "live"
    redis_source: Any = pool.source
    assert own_server.process is not None
    own_server.process.send_signal(signal.SIGSTOP)
    try:
        with ThreadPoolExecutor(2) as threads:  # both asks sent, neither answered
            envs = list(threads.map(lambda _: f.referential(0), range(2)))
    finally:
        own_server.process.send_signal(signal.SIGCONT)
    for env in envs:
        assert env.up_to_date == (unavailable == "local"), env.cause
    # Resumed, Redis ran the two asks nobody waits for any more: the next call is served.
    assert f(1) == "live"
    assert redis_source.in_use() == 0
    whole = redis_source.acquire(2, 0.0)
    assert whole is not None, "the pool is taken by asks their callers gave up"
    redis_source.release(whole)
    engine.close()


async def test_asks_of_tasks_left_unanswered_by_a_stopped_redis_take_no_permits(
    own_server: RedisServer,
) -> None:
    engine = failover.Failover(metrics=False)
    source = RedisPermits(own_server.url, socket_timeout=0.2)
    pool = engine.bulkhead_pool("apaused", permits=2, source=source)

    @failover.failover("apaused.f", engine=engine, bulkhead="apaused")
    async def f(i: int) -> str:
        return "live"

    assert await f(0) == "live"
    redis_source: Any = pool.source
    assert own_server.process is not None
    own_server.process.send_signal(signal.SIGSTOP)
    try:  # the asks run on worker threads: the loop goes on, the calls come back refused
        envs = await asyncio.wait_for(asyncio.gather(*(f.referential(0) for _ in range(2))), WAIT)
    finally:
        own_server.process.send_signal(signal.SIGCONT)
    assert [isinstance(env.cause, BulkheadFull) for env in envs] == [True, True]
    assert await f(1) == "live"
    assert await asyncio.to_thread(redis_source.in_use) == 0
    whole = await asyncio.to_thread(redis_source.acquire, 2, 0.0)
    assert whole is not None, "the pool is taken by asks their callers gave up"
    redis_source.release(whole)
    engine.close()
