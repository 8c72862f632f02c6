"""Single flight (``single_flight=True``, failover/flight.py): concurrent calls with the same key
share one upstream call and one store write, sync and async; a slow shared call holds no caller
past its own soft timeout; the shared call's exception reaches every caller's recovery."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

import failover
from failover.errors import ConfigurationError, SoftTimeoutError

from .conftest import FakeClock
from .execution_support import Watched, watch

CALLERS = 100


class CountingStore(failover.InMemoryStore):
    """A real in-memory store that counts the entries written to it."""

    def __init__(self) -> None:
        super().__init__()
        self.writes = 0

    def store(self, payload: Any) -> None:
        self.writes += 1
        super().store(payload)


class Gate:
    """An upstream that waits until released, then answers or raises ``error``."""

    def __init__(self) -> None:
        self.calls = 0
        self.release = threading.Event()
        self.entered = threading.Event()
        self.error: Exception | None = None

    def answer(self, code: int) -> dict[str, Any]:
        if self.error is not None:
            raise self.error
        return {"code": code, "rates": [1.0]}


def followers(fn: Any) -> int:
    """How many callers wait for ``fn``'s flights now."""
    flights = fn._failover_state.runtime().flights
    return sum(f.followers for f in list(flights._flights.values()))


def wait_for_followers(fn: Any, count: int) -> None:
    """Until ``count`` callers wait for ``fn``'s flight (its flights watched before the calls)."""
    flights = fn._failover_state.runtime().flights
    assert isinstance(flights, Watched), "watch(fn) before the calls"
    flights.reach(follows=count)
    assert followers(fn) == count


def test_single_flight_must_be_a_bool() -> None:
    with pytest.raises(ConfigurationError, match="'f': single_flight= must be True or False"):
        failover.failover("f", single_flight="yes")(lambda: 1)  # type: ignore[call-overload]


def test_sync_callers_of_one_key_share_one_upstream_call_and_one_write(clock: FakeClock) -> None:
    store = CountingStore()
    engine = failover.Failover(store, clock=clock, metrics=False)
    gate = Gate()

    @failover.failover("sf.sync", engine=engine, single_flight=True)
    def rates(code: int) -> dict[str, Any]:
        gate.calls += 1
        gate.entered.set()
        gate.release.wait(10)
        return gate.answer(code)

    watch(rates)
    got: list[Any] = [None] * CALLERS
    leader = threading.Thread(target=lambda: got.__setitem__(0, rates(7)))
    leader.start()
    threads = [
        threading.Thread(target=lambda i=i: got.__setitem__(i, rates(7))) for i in range(1, CALLERS)
    ]
    gate.entered.wait(10)  # the leader's flight is up before the followers come
    for t in threads:
        t.start()
    wait_for_followers(rates, CALLERS - 1)
    gate.release.set()
    for t in [leader, *threads]:
        t.join()
    assert gate.calls == 1
    assert store.writes == 1
    assert all(g == {"code": 7, "rates": [1.0]} for g in got)
    assert len({id(g) for g in got}) == CALLERS  # each its own copy
    engine.close()


async def test_async_callers_of_one_key_share_one_upstream_call_and_one_write(
    clock: FakeClock,
) -> None:
    store = CountingStore()
    engine = failover.Failover(store, clock=clock, metrics=False)
    release = asyncio.Event()
    calls = 0

    @failover.failover("sf.async", engine=engine, single_flight=True)
    async def rates(code: int) -> dict[str, Any]:
        nonlocal calls
        calls += 1
        await release.wait()
        return {"code": code}

    pending = asyncio.gather(*(rates(7) for _ in range(CALLERS)), rates(8))
    await asyncio.sleep(0)  # every call has joined its key's flight (one loop turn)
    assert followers(rates) == CALLERS - 1
    release.set()
    got = await pending
    assert calls == 2  # one per key
    assert store.writes == 2
    assert got == [{"code": 7}] * CALLERS + [{"code": 8}]
    assert len({id(g) for g in got}) == CALLERS + 1
    engine.close()


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_the_shared_exception_reaches_every_callers_recovery(
    kind: str, clock: FakeClock
) -> None:
    engine = failover.Failover("memory://", clock=clock, metrics=False)
    error = ConnectionError("rates down")
    fail = threading.Event()
    started = threading.Event()

    def upstream_sync(code: int) -> dict[str, Any]:
        if fail.is_set():
            started.set()
            release.wait(10)
            raise error
        return {"code": code}

    async def upstream_async(code: int) -> dict[str, Any]:
        if fail.is_set():
            await asyncio.to_thread(release.wait, 10)
            raise error
        return {"code": code}

    release = threading.Event()
    upstream = upstream_sync if kind == "sync" else upstream_async
    rates: Any = failover.failover("sf.error", engine=engine, single_flight=True)(upstream)
    if kind == "sync":
        watch(rates)
        rates(7)
        fail.set()
        got: list[Any] = [None] * 20

        def call(i: int) -> None:
            got[i] = rates.referential(7)

        threads = [threading.Thread(target=call, args=(i,)) for i in range(20)]
        threads[0].start()
        started.wait(10)
        for t in threads[1:]:
            t.start()
        wait_for_followers(rates, 19)
        release.set()
        for t in threads:
            t.join()
    else:
        await rates(7)
        fail.set()
        pending = asyncio.gather(*(rates.referential(7) for _ in range(20)))
        await asyncio.sleep(0)
        assert followers(rates) == 19
        release.set()
        got = await pending
    assert all(g.payload == {"code": 7} and not g.up_to_date for g in got)
    assert all(g.cause is error for g in got)
    engine.close()


async def test_a_slow_shared_call_holds_no_async_caller_past_its_timeout(
    clock: FakeClock,
) -> None:
    engine = failover.Failover("memory://", clock=clock, metrics=False)
    release = asyncio.Event()
    slow = False

    @failover.failover("sf.slow", engine=engine, single_flight=True, timeout=0.05)
    async def rates(code: int) -> dict[str, Any]:
        if slow:
            await release.wait()
        return {"code": code}

    await rates(7)
    slow = True
    got = await asyncio.gather(*(rates.referential(7) for _ in range(10)))
    assert not release.is_set()  # the shared call is still out
    assert all(g.payload == {"code": 7} and not g.up_to_date for g in got)
    assert all(isinstance(g.cause, SoftTimeoutError) for g in got)
    release.set()
    await asyncio.to_thread(engine.close)


def test_a_slow_shared_call_holds_no_sync_caller_past_its_timeout(clock: FakeClock) -> None:
    engine = failover.Failover("memory://", clock=clock, metrics=False)
    release = threading.Event()
    entered = threading.Event()
    slow = threading.Event()

    @failover.failover("sf.slow.sync", engine=engine, single_flight=True, timeout=0.05)
    def rates(code: int) -> dict[str, Any]:
        if slow.is_set():
            entered.set()
            release.wait(10)
        return {"code": code}

    rates(7)
    slow.set()
    got: list[Any] = [None] * 5

    def call(i: int) -> None:
        got[i] = rates.referential(7)

    threads = [threading.Thread(target=call, args=(i,)) for i in range(5)]
    threads[0].start()
    entered.wait(10)
    for t in threads[1:]:
        t.start()
    for t in threads:
        t.join()
    assert not release.is_set()
    assert all(g.payload == {"code": 7} and not g.up_to_date for g in got)
    assert all(isinstance(g.cause, SoftTimeoutError) for g in got)
    release.set()
    engine.close()


async def test_followers_of_a_cancelled_leader_call_for_themselves(clock: FakeClock) -> None:
    engine = failover.Failover("memory://", clock=clock, metrics=False)
    release = asyncio.Event()
    calls = 0

    @failover.failover("sf.cancelled", engine=engine, single_flight=True)
    async def rates(code: int) -> dict[str, Any]:
        nonlocal calls
        calls += 1
        call = calls
        await release.wait()
        return {"code": code, "call": call}

    leader = asyncio.ensure_future(rates(7))
    await asyncio.sleep(0)  # the leader is in flight
    follower = asyncio.ensure_future(rates(7))
    await asyncio.sleep(0)
    assert followers(rates) == 1
    leader.cancel()
    with pytest.raises(asyncio.CancelledError):
        await leader
    release.set()
    assert await follower == {"code": 7, "call": 2}  # its own call, not the leader's
    assert calls == 2
    engine.close()


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_followers_take_no_bulkhead_permit(kind: str, clock: FakeClock) -> None:
    """One permit, failing fast: the leader holds it, and its followers, who call nothing,
    are not refused for want of one."""
    engine = failover.Failover("memory://", clock=clock, metrics=False)
    gate = Gate()
    options: dict[str, Any] = {"engine": engine, "single_flight": True, "max_concurrency": 1}
    if kind == "sync":

        @failover.failover("sf.permits.sync", **options)
        def rates(code: int) -> dict[str, Any]:
            gate.calls += 1
            gate.entered.set()
            assert gate.release.wait(10)
            return gate.answer(code)

        watch(rates)
        got: list[Any] = []
        threads = [threading.Thread(target=lambda: got.append(rates(7))) for _ in range(5)]
        threads[0].start()
        assert gate.entered.wait(10)  # the leader holds the permit
        for t in threads[1:]:
            t.start()
        wait_for_followers(rates, 4)
        gate.release.set()
        for t in threads:
            t.join(10)
    else:
        release = asyncio.Event()

        @failover.failover("sf.permits.async", **options)
        async def arates(code: int) -> dict[str, Any]:
            gate.calls += 1
            await release.wait()
            return gate.answer(code)

        pending = asyncio.gather(*(arates(7) for _ in range(5)))
        await asyncio.sleep(0)
        assert followers(arates) == 4
        release.set()
        got = await pending
    assert got == [{"code": 7, "rates": [1.0]}] * 5
    assert gate.calls == 1
    engine.close()
