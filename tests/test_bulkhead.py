"""Bulkhead (``max_concurrency=``, ``acquire_timeout=``): threads and asyncio tasks."""

from __future__ import annotations

import asyncio
import contextvars
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

import failover
from failover import BulkheadFull, Failover
from failover.execution import Bulkhead

from .conftest import FakeClock
from .execution_support import WAIT, ABlocking, Blocking, auntil, metric, until


class Causes(list[BaseException | None]):
    """An ``on_recovered`` hook that keeps each recovery's cause."""

    def __call__(self, ctx: failover.RecoverContext[Any], value: Any) -> Any:
        self.append(ctx.cause)
        return value


def bulkhead_of(engine: Failover, fn: Any) -> Bulkhead:
    return engine.bulkhead(fn.definition)


# -- N in flight, the rest served stale -----------------------------------------------------------


def test_at_most_n_sync_calls_in_flight_the_rest_served_stale(engine: Failover) -> None:
    up, causes = Blocking(), Causes()
    up.release.set()

    @failover.failover("bh-sync", engine=engine, max_concurrency=2, on_recovered=causes)
    def f(x: str) -> object:
        return up(x)

    assert f("a") == "a"
    up.wait_entered()
    up.release.clear()
    with ThreadPoolExecutor(2) as pool:
        held = [pool.submit(f, "a") for _ in range(2)]
        up.wait_entered(2)
        env = f.referential("a")  # no permit: served stale at once, the upstream not called
        assert (env.payload, env.up_to_date) == ("a", False)
        assert isinstance(causes[-1], BulkheadFull)
        assert up.calls == 3
        assert bulkhead_of(engine, f).free == 0
        up.release.set()
        assert [h.result() for h in held] == ["a", "a"]
    assert bulkhead_of(engine, f).free == 2
    assert up.most == 2


async def test_at_most_n_async_calls_in_flight_the_rest_served_stale(engine: Failover) -> None:
    up, causes = ABlocking(), Causes()
    up.release.set()

    @failover.failover("bh-async", engine=engine, max_concurrency=2, on_recovered=causes)
    async def f(x: str) -> object:
        return await up(x)

    assert await f("a") == "a"
    await up.wait_entered()
    up.release.clear()
    held = [asyncio.create_task(f("a")) for _ in range(2)]
    await up.wait_entered(2)
    env = await f.referential("a")
    assert (env.payload, env.up_to_date) == ("a", False)
    assert isinstance(causes[-1], BulkheadFull)
    assert up.calls == 3
    up.release.set()
    assert await asyncio.gather(*held) == ["a", "a"]
    assert bulkhead_of(engine, f).free == 2


def test_bulkhead_full_with_nothing_stored_rethrows_it(engine: Failover) -> None:
    up = Blocking()

    @failover.failover("bh-empty", engine=engine, max_concurrency=1)
    def f(x: str) -> object:
        return up(x)

    with ThreadPoolExecutor(1) as pool:
        held = pool.submit(f, "a")
        up.wait_entered()
        with pytest.raises(BulkheadFull, match=r"'bh-empty'.*max_concurrency=1") as info:
            f("b")
        assert "nothing recovered" in info.value.__notes__[0]
        up.release.set()
        held.result()


def test_bulkhead_full_recovers_whatever_exceptions_says(engine: Failover) -> None:
    up = Blocking()
    up.release.set()

    @failover.failover("bh-filter", engine=engine, max_concurrency=1, exceptions=(KeyError,))
    def f(x: str) -> object:
        return up(x)

    f("a")
    up.wait_entered()
    up.release.clear()
    with ThreadPoolExecutor(1) as pool:
        held = pool.submit(f, "a")
        up.wait_entered()
        assert f.referential("a").up_to_date is False
        up.release.set()
        held.result()


def test_rejections_are_counted(clock: FakeClock) -> None:
    registry = CollectorRegistry()
    eng = Failover(clock=clock, metrics=registry)
    up = Blocking()

    @failover.failover("bh-metrics", engine=eng, max_concurrency=1, policy="never_throw")
    def f(x: str) -> object:
        return up(x)

    with ThreadPoolExecutor(1) as pool:
        held = pool.submit(f, "a")
        up.wait_entered()
        for _ in range(3):
            assert f("b") is None
        up.release.set()
        held.result()
    rejected = metric(
        registry, "failover_bulkhead_rejected_total", name="bh-metrics", pool="bh-metrics"
    )
    assert rejected == 3
    eng.close()


# -- waiting for a permit -------------------------------------------------------------------------


def test_a_sync_call_waits_up_to_acquire_timeout_and_gets_the_permit(engine: Failover) -> None:
    up = Blocking()

    @failover.failover("bh-wait", engine=engine, max_concurrency=1, acquire_timeout=WAIT)
    def f(x: str) -> object:
        return up(x)

    bulkhead = bulkhead_of(engine, f)
    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(f.referential, "a")
        up.wait_entered()
        second = pool.submit(f.referential, "b")
        until(lambda: bulkhead.waiting == 1, "the second call to wait")
        assert up.calls == 1
        up.release.set()  # the first ends, its permit goes to the waiter
        assert first.result().up_to_date is True
        assert second.result().payload == "b"
        assert second.result().up_to_date is True
    assert up.calls == 2
    assert (bulkhead.free, bulkhead.waiting) == (1, 0)


async def test_an_async_call_waits_up_to_acquire_timeout_and_gets_the_permit(
    engine: Failover,
) -> None:
    up = ABlocking()

    @failover.failover("bh-await", engine=engine, max_concurrency=1, acquire_timeout=WAIT)
    async def f(x: str) -> object:
        return await up(x)

    bulkhead = bulkhead_of(engine, f)
    first = asyncio.create_task(f.referential("a"))
    await up.wait_entered()
    second = asyncio.create_task(f.referential("b"))
    await auntil(lambda: bulkhead.waiting == 1, "the second call to wait")
    up.release.set()
    assert (await first).up_to_date is True
    assert (await second).up_to_date is True
    assert (bulkhead.free, bulkhead.waiting) == (1, 0)


def test_a_call_that_waits_in_vain_is_refused(engine: Failover) -> None:
    up = Blocking()
    causes = Causes()

    @failover.failover(
        "bh-vain",
        engine=engine,
        max_concurrency=1,
        acquire_timeout=0.01,
        policy="never_throw",
        on_recovered=causes,
    )
    def f(x: str) -> object:
        return up(x)

    bulkhead = bulkhead_of(engine, f)
    with ThreadPoolExecutor(1) as pool:
        held = pool.submit(f, "a")
        up.wait_entered()
        assert f("b") is None
        assert isinstance(causes[-1], BulkheadFull)
        assert "acquire_timeout=0.01s" in str(causes[-1])
        assert bulkhead.waiting == 0  # it left the queue
        up.release.set()
        held.result()
    assert bulkhead.free == 1


async def test_an_async_call_that_waits_in_vain_is_refused(engine: Failover) -> None:
    up = ABlocking()

    @failover.failover(
        "bh-avain", engine=engine, max_concurrency=1, acquire_timeout=0.01, policy="never_throw"
    )
    async def f(x: str) -> object:
        return await up(x)

    held = asyncio.create_task(f("a"))
    await up.wait_entered()
    assert await f("b") is None
    up.release.set()
    assert await held == "a"
    assert bulkhead_of(engine, f).free == 1


def test_permits_go_to_waiters_in_arrival_order() -> None:
    bulkhead = Bulkhead("fifo", 1, WAIT)
    token = held_elsewhere(bulkhead)
    order: list[int] = []

    def wait(i: int) -> None:
        t = bulkhead.enter()
        order.append(i)
        bulkhead.exit(t, None)

    threads = []
    for i in range(3):
        threads.append(threading.Thread(target=wait, args=(i,)))
        threads[-1].start()
        until(lambda i=i: bulkhead.waiting == i + 1, f"waiter {i}")  # type: ignore[misc]
    bulkhead.exit(token, None)
    for thread in threads:
        thread.join(WAIT)
    assert order == [0, 1, 2]
    assert bulkhead.free == 1


def held_elsewhere(bulkhead: Bulkhead) -> Any:
    """A permit taken in a context of its own (the test's context would make its tasks
    nested calls, which take no permit)."""
    return contextvars.Context().run(bulkhead.enter)


def test_threads_and_tasks_share_one_count() -> None:
    bulkhead = Bulkhead("mixed", 1, WAIT)
    token = held_elsewhere(bulkhead)  # a thread holds the only permit

    async def task() -> None:
        t = await bulkhead.aenter()
        bulkhead.exit(t, None)

    async def main() -> None:
        waiting = asyncio.create_task(task())
        await auntil(lambda: bulkhead.waiting == 1, "the task to wait")
        threading.Thread(target=bulkhead.exit, args=(token, None)).start()  # another thread
        await asyncio.wait_for(waiting, WAIT)

    asyncio.run(main())
    assert bulkhead.free == 1


# -- nested calls ---------------------------------------------------------------------------------


def test_a_nested_sync_call_does_not_take_a_second_permit(engine: Failover) -> None:
    @failover.failover("bh-nested", engine=engine, max_concurrency=1)
    def f(depth: int) -> int:
        return depth if depth == 0 else f(depth - 1) + 1

    assert f(3) == 3  # a bulkhead of 1 would deadlock or refuse itself otherwise
    assert bulkhead_of(engine, f).free == 1


async def test_a_nested_async_call_does_not_take_a_second_permit(engine: Failover) -> None:
    @failover.failover("bh-anested", engine=engine, max_concurrency=1)
    async def f(depth: int) -> int:
        return depth if depth == 0 else await f(depth - 1) + 1

    assert await f(3) == 3
    assert bulkhead_of(engine, f).free == 1


def test_a_loop_started_inside_a_sync_call_is_nested(engine: Failover) -> None:
    """A sync call that runs ``asyncio.run`` hands its tasks (and the threads they start with
    the context, ``asyncio.to_thread``) the permits it holds: they take none of the pool's."""
    engine.bulkhead_pool("one", permits=1)

    @failover.failover("bh-loop-inner", engine=engine, bulkhead="one")
    async def inner() -> str:
        return await asyncio.to_thread(deepest)

    @failover.failover("bh-loop-deepest", engine=engine, bulkhead="one")
    def deepest() -> str:
        return "deepest"

    @failover.failover("bh-loop-outer", engine=engine, bulkhead="one")
    def outer() -> str:
        return asyncio.run(inner())

    assert outer() == "deepest"  # a pool of one would refuse the inner calls otherwise
    assert bulkhead_of(engine, outer).free == 1


async def test_a_task_started_inside_a_call_takes_permits_once_the_call_ended(
    engine: Failover,
) -> None:
    """A task started inside a call has a copy of the call's context: while the call lasts, the
    task's calls are nested in it and take none of the pool's permits; once it ended, they take
    permits as any other call does (the copy no longer holds the ended call's)."""
    gate = asyncio.Event()
    entered = asyncio.Event()
    tasks: list[asyncio.Task[Any]] = []

    @failover.failover("bh-spawned", engine=engine, max_concurrency=1)
    async def f(key: str) -> str:
        if key == "outer":
            tasks.append(asyncio.create_task(f("during")))  # inside the call: nested
            await tasks[0]
            tasks.append(asyncio.create_task(later()))  # runs after the call ended
        elif key == "held":
            entered.set()
            await gate.wait()
        return key

    async def later() -> str:
        return await f("held")

    assert await f("outer") == "outer"  # the task's call during it took no second permit
    await entered.wait()  # the task's call after it holds the pool's one permit
    assert bulkhead_of(engine, f).free == 0
    with pytest.raises(BulkheadFull):
        await f("refused")  # nothing stored for it: the refusal reaches the caller
    gate.set()
    assert await tasks[1] == "held"
    assert bulkhead_of(engine, f).free == 1


def test_a_thread_given_the_context_of_an_ended_call_takes_permits(engine: Failover) -> None:
    """A copy of a call's context kept past the call's end (a worker handed it) holds no
    permits: its calls take their own, and a pool of one refuses the second at once."""
    copies: list[contextvars.Context] = []
    gate = threading.Event()
    entered = threading.Event()

    @failover.failover("bh-copied", engine=engine, max_concurrency=1)
    def f(key: str) -> str:
        if key == "outer":
            copies.append(contextvars.copy_context())
        elif key == "held":
            entered.set()
            assert gate.wait(WAIT)
        return key

    assert f("outer") == "outer"
    first, second = copies[0].copy(), copies[0].copy()  # two copies: a worker each
    with ThreadPoolExecutor(1) as pool:
        held = pool.submit(first.run, f, "held")
        assert entered.wait(WAIT)
        with pytest.raises(BulkheadFull):
            second.run(f, "refused")  # the ended call's context holds no permit
        gate.set()
        assert held.result(WAIT) == "held"
    assert bulkhead_of(engine, f).free == 1


def test_another_thread_is_not_nested(engine: Failover) -> None:
    """The permit belongs to the context: a thread started inside the call takes its own."""

    @failover.failover("bh-other", engine=engine, max_concurrency=1, policy="never_throw")
    def f(depth: int) -> object:
        if depth == 0:
            return "inner"
        with ThreadPoolExecutor(1) as pool:
            return pool.submit(f, 0).result()

    assert f(1) is None  # the inner call found no permit: recovered to the policy's answer
    assert bulkhead_of(engine, f).free == 1


# -- permits are always given back ----------------------------------------------------------------


def test_permits_come_back_when_the_upstream_raises(engine: Failover) -> None:
    @failover.failover("bh-raise", engine=engine, max_concurrency=2, policy="never_throw")
    def f() -> None:
        raise ConnectionError("down")

    @failover.failover("bh-raise-excluded", engine=engine, max_concurrency=2, exclude=KeyError)
    def g() -> None:
        raise KeyError("x")

    for _ in range(5):
        f()
        with pytest.raises(KeyError):
            g()
    assert bulkhead_of(engine, f).free == 2
    assert bulkhead_of(engine, g).free == 2


async def test_permits_come_back_when_an_async_upstream_raises(engine: Failover) -> None:
    @failover.failover("bh-araise", engine=engine, max_concurrency=2, policy="never_throw")
    async def f() -> None:
        raise ConnectionError("down")

    for _ in range(5):
        await f()
    assert bulkhead_of(engine, f).free == 2


async def test_a_cancelled_task_that_held_a_permit_gives_it_back(engine: Failover) -> None:
    up = ABlocking()

    @failover.failover("bh-cancel-held", engine=engine, max_concurrency=1)
    async def f(x: str) -> object:
        return await up(x)

    task = asyncio.create_task(f("a"))
    await up.wait_entered()
    assert bulkhead_of(engine, f).free == 0
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert up.cancelled == 1
    assert bulkhead_of(engine, f).free == 1
    up.release.set()
    assert await f("b") == "b"


async def test_a_task_cancelled_while_waiting_leaves_the_queue(engine: Failover) -> None:
    up = ABlocking()

    @failover.failover("bh-cancel-wait", engine=engine, max_concurrency=1, acquire_timeout=WAIT)
    async def f(x: str) -> object:
        return await up(x)

    bulkhead = bulkhead_of(engine, f)
    holder = asyncio.create_task(f("a"))
    await up.wait_entered()
    waiter = asyncio.create_task(f("b"))
    await auntil(lambda: bulkhead.waiting == 1, "the waiter")
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert bulkhead.waiting == 0
    up.release.set()
    assert await holder == "a"
    assert (bulkhead.free, up.calls) == (1, 1)


async def test_a_permit_granted_to_a_task_cancelled_meanwhile_goes_back() -> None:
    bulkhead = Bulkhead("granted", 1, WAIT)
    token = held_elsewhere(bulkhead)
    waiter = asyncio.create_task(bulkhead.aenter())
    await auntil(lambda: bulkhead.waiting == 1, "the waiter")
    bulkhead.exit(token, None)  # grants the waiter its permit...
    waiter.cancel()  # ...which is cancelled before it could run
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert (bulkhead.free, bulkhead.waiting) == (1, 0)


def test_a_waiter_whose_loop_closed_is_skipped() -> None:
    bulkhead = Bulkhead("closed-loop", 1, WAIT)
    token = held_elsewhere(bulkhead)
    other = asyncio.new_event_loop()
    orphan = other.create_task(bulkhead.aenter())
    other.run_until_complete(asyncio.sleep(0))  # the orphan queues, then its loop goes away
    assert bulkhead.waiting == 1
    other.close()
    bulkhead.exit(token, None)  # cannot wake the orphan: the permit is free again
    assert (bulkhead.free, bulkhead.waiting) == (1, 0)
    assert not orphan.done()


def test_the_guard_is_a_context_manager_for_both_worlds() -> None:
    bulkhead = Bulkhead("cm", 1)
    refused: list[BaseException] = []

    def other() -> None:
        try:
            with bulkhead.attempt():
                pass
        except BulkheadFull as exc:
            refused.append(exc)

    with bulkhead.attempt():
        assert bulkhead.free == 0
        thread = threading.Thread(target=other)  # another context: refused (acquire_timeout=0)
        thread.start()
        thread.join(WAIT)
    assert len(refused) == 1
    assert bulkhead.free == 1

    async def main() -> None:
        async with bulkhead.attempt():
            assert bulkhead.free == 0
            async with bulkhead.attempt():  # nested in the same context
                assert bulkhead.free == 0
        assert bulkhead.free == 1

    asyncio.run(main())
    assert repr(bulkhead) == "Bulkhead('cm', limit=1, free=1)"


def test_run_takes_a_permit_around_the_call_and_gives_it_back_whatever_the_end() -> None:
    bulkhead = Bulkhead("run", 1)
    seen: list[int] = []

    def upstream(x: int) -> int:
        seen.append(bulkhead.free)
        assert bulkhead.run(lambda: bulkhead.free, (), {}) == 0  # nested: no second permit
        if x < 0:
            raise ValueError(x)
        return x

    assert bulkhead.run(upstream, (1,), {}) == 1
    with pytest.raises(ValueError, match="-1"):
        bulkhead.run(upstream, (-1,), {})
    assert seen == [0, 0]
    assert bulkhead.free == 1
    with bulkhead.attempt():  # held in this context: a run nested in it takes none
        assert bulkhead.run(lambda: bulkhead.free, (), {}) == 0

    def other() -> None:  # another context, no permit free: refused at once
        with pytest.raises(BulkheadFull):
            bulkhead.run(upstream, (2,), {})

    with bulkhead.attempt():
        thread = threading.Thread(target=other)
        thread.start()
        thread.join(WAIT)
    assert (bulkhead.free, seen) == (1, [0, 0])


def test_many_threads_never_exceed_the_limit(engine: Failover) -> None:
    limit, threads = 3, 12
    inside = 0
    most = 0
    lock = threading.Lock()
    together = threading.Barrier(limit)

    @failover.failover("bh-many", engine=engine, max_concurrency=limit, acquire_timeout=WAIT)
    def f(i: int) -> int:
        nonlocal inside, most
        with lock:
            inside += 1
            most = max(most, inside)
        together.wait(WAIT)  # `limit` calls inside at once, never more
        with lock:
            inside -= 1
        return i

    with ThreadPoolExecutor(threads) as pool:
        assert sorted(pool.map(f, range(threads))) == list(range(threads))
    assert most == limit
    assert bulkhead_of(engine, f).free == limit
