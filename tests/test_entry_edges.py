"""The entry path of a call where its settings meet: single flight with a bulkhead, a soft
timeout or a breaker; a bulkhead wait that ends without a permit; ``fresh_for`` (whole or
scatter/gather partial answers) in front of single flight and the guards; the bare fast path
against the entered one. Threads and tasks; events, conditions and joins, no timed sleep; the
fake clock for the store's time (the soft timeouts and permit waits are the library's own)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pybreaker
import pytest
from prometheus_client import CollectorRegistry

import failover
from failover import BulkheadFull, Failover, ListSplitter
from failover.errors import SoftTimeoutError

from .conftest import FakeClock
from .execution_support import WAIT, ABlocking, Blocking, watch

CircuitBreakerError = pybreaker.CircuitBreakerError


class Caller(threading.Thread):
    """One call on a daemon thread, its outcome kept (a call that hangs never hangs the run)."""

    def __init__(self, fn: Callable[..., Any], *args: Any) -> None:
        super().__init__(daemon=True)
        self.fn = fn
        self.args = args
        self.out: Any = None
        self.error: BaseException | None = None
        self.start()

    def run(self) -> None:
        try:
            self.out = self.fn(*self.args)
        except BaseException as exc:
            self.error = exc

    def result(self) -> Any:
        self.join(WAIT)
        assert not self.is_alive(), f"{self.fn} never returned"
        if self.error is not None:
            raise self.error
        return self.out


def fields(e: failover.ReferentialPayload[Any]) -> tuple[Any, ...]:
    """What an envelope says of its value, the value aside."""
    return (e.name, e.key, e.up_to_date, e.as_of, e.expire_on)


# -- single flight, one permit, a soft timeout ----------------------------------------------------


def test_followers_of_a_leader_holding_the_only_permit_get_its_result_sync(
    clock: FakeClock,
) -> None:
    engine = Failover(clock=clock, metrics=False)
    up = Blocking()

    @failover.failover(
        "edge.permit", engine=engine, single_flight=True, max_concurrency=1, timeout=2 * WAIT
    )
    def rates(code: int) -> object:
        return up({"code": code})

    flights = watch(rates)
    bulkhead = engine.bulkhead(rates.definition)
    leader = Caller(rates.referential, 7)
    up.wait_entered()  # the leader holds the only permit, in its upstream
    assert bulkhead.free == 0
    followers = [Caller(rates.referential, 7) for _ in range(4)]
    flights.reach(leads=1, follows=4)
    up.release.set()
    lead = leader.result()
    got = [f.result() for f in followers]
    assert up.calls == 1
    assert lead.payload == {"code": 7}
    assert lead.up_to_date
    for g in got:
        assert g.payload == lead.payload
        assert g.payload is not lead.payload
        assert fields(g) == fields(lead)
    assert (bulkhead.free, bulkhead.waiting) == (1, 0)
    assert rates.referential(8).up_to_date  # the permit is there for the next call
    assert engine.health().pools[bulkhead.pool.name].rejected == {}
    engine.close()


async def test_followers_of_a_leader_holding_the_only_permit_get_its_result_async(
    clock: FakeClock,
) -> None:
    engine = Failover(clock=clock, metrics=False)
    up = ABlocking()

    @failover.failover(
        "edge.apermit", engine=engine, single_flight=True, max_concurrency=1, timeout=2 * WAIT
    )
    async def rates(code: int) -> object:
        return await up({"code": code})

    flights = watch(rates)
    bulkhead = engine.bulkhead(rates.definition)
    leader = asyncio.create_task(rates.referential(7))
    await up.wait_entered()
    assert bulkhead.free == 0
    followers = [asyncio.create_task(rates.referential(7)) for _ in range(4)]
    await flights.areach(leads=1, follows=4)
    up.release.set()
    lead = await leader
    got = await asyncio.wait_for(asyncio.gather(*followers), WAIT)
    assert up.calls == 1
    for g in got:
        assert g.payload == lead.payload == {"code": 7}
        assert g.payload is not lead.payload
        assert fields(g) == fields(lead)
        assert g.up_to_date
    assert (bulkhead.free, bulkhead.waiting) == (1, 0)
    assert (await rates.referential(8)).up_to_date
    await asyncio.to_thread(engine.close)


def _waiting_pair(engine: Failover, timeout: float) -> tuple[Any, Blocking, Any, list[int]]:
    """A pool of one permit; a holder failover on it (no timeout) and a single-flight failover
    with ``timeout`` that waits for the permit without limit."""
    engine.bulkhead_pool("edge.one", permits=1)
    held = Blocking()
    calls = [0]

    @failover.failover("edge.holder", engine=engine, bulkhead="edge.one")
    def holder(x: str) -> object:
        return held(x)

    @failover.failover(
        "edge.waits",
        engine=engine,
        bulkhead="edge.one",
        acquire_timeout=None,
        single_flight=True,
        timeout=timeout,
    )
    def rates(code: int) -> dict[str, int]:
        calls[0] += 1
        return {"code": code, "v": calls[0]}

    return holder, held, rates, calls


def _aheld_pool(engine: Failover, pool: str, name: str) -> tuple[Any, ABlocking, Any]:
    """A pool ``pool`` of one permit and an async holder failover ``name`` on it (no timeout),
    held in its upstream until released."""
    made = engine.bulkhead_pool(pool, permits=1)
    held = ABlocking()

    @failover.failover(name, engine=engine, bulkhead=pool)
    async def holder(x: str) -> object:
        return await held(x)

    return made, held, holder


def test_a_followers_own_soft_timeout_recovers_the_stale_entry_while_its_leader_waits(
    clock: FakeClock,
) -> None:
    engine = Failover(clock=clock, metrics=False)
    holder, held, rates, calls = _waiting_pair(engine, timeout=0.1)
    pool = engine.bulkhead_pool("edge.one", permits=1)
    stored = rates.referential(7)
    clock.advance(minutes=1)
    flights = watch(rates)
    holding = Caller(holder, "x")
    held.wait_entered()  # the only permit is taken
    leader = Caller(rates.referential, 7)
    flights.reach(leads=1)  # it waits for the permit
    got = rates.referential(7)  # follows it, and stops at its own soft timeout
    assert flights.follows == 1
    assert got.payload == {"code": 7, "v": 1}
    assert not got.up_to_date
    assert got.as_of == stored.as_of
    assert isinstance(got.cause, SoftTimeoutError)
    assert "the shared call of this key did not answer" in str(got.cause)
    held.release.set()
    assert holding.result() == "x"
    assert leader.result().payload["code"] == 7  # the leader went on: permit, upstream
    assert (pool.free, pool.waiting) == (1, 0)
    assert holder("y") == "y"
    assert calls == [2]
    engine.close()


async def test_an_async_followers_own_soft_timeout_recovers_while_its_leader_waits(
    clock: FakeClock,
) -> None:
    engine = Failover(clock=clock, metrics=False)
    pool, held, holder = _aheld_pool(engine, "edge.aone", "edge.aholder")
    calls = 0

    @failover.failover(
        "edge.awaits",
        engine=engine,
        bulkhead="edge.aone",
        acquire_timeout=None,
        single_flight=True,
        timeout=0.1,
    )
    async def rates(code: int) -> dict[str, int]:
        nonlocal calls
        calls += 1
        return {"code": code, "v": calls}

    stored = await rates.referential(7)
    clock.advance(minutes=1)
    flights = watch(rates)
    holding = asyncio.create_task(holder("x"))
    await held.wait_entered()
    leader = asyncio.create_task(rates.referential(7))
    await flights.areach(leads=1)
    assert pool.waiting == 1
    got = await rates.referential(7)
    assert flights.follows == 1
    assert (got.payload, got.up_to_date, got.as_of) == ({"code": 7, "v": 1}, False, stored.as_of)
    assert isinstance(got.cause, SoftTimeoutError)
    assert "the shared call of this key did not answer" in str(got.cause)
    held.release.set()
    assert await holding == "x"
    assert (await asyncio.wait_for(leader, WAIT)).payload["code"] == 7
    assert (pool.free, pool.waiting) == (1, 0)
    assert await holder("y") == "y"
    assert calls == 2
    await asyncio.to_thread(engine.close)


# -- single flight and a breaker ------------------------------------------------------------------


def test_an_open_breaker_refuses_the_leader_and_its_followers_recover_sync(
    clock: FakeClock,
) -> None:
    """The leader waits for a permit (so its followers join), then the open breaker refuses it:
    the followers recover from that refusal, and the key is left with no flight in the air."""
    engine = Failover(clock=clock, metrics=False)
    holder, held, _, _ = _waiting_pair(engine, timeout=WAIT)
    pool = engine.bulkhead_pool("edge.one", permits=1)
    cb = pybreaker.CircuitBreaker(fail_max=5, reset_timeout=3600)
    calls = 0

    @failover.failover(
        "edge.breaker",
        engine=engine,
        single_flight=True,
        breaker=cb,
        bulkhead="edge.one",
        acquire_timeout=None,
    )
    def rates(code: int) -> dict[str, int]:
        nonlocal calls
        calls += 1
        return {"code": code, "v": calls}

    rates(7)
    cb.open()
    flights = watch(rates)
    holding = Caller(holder, "x")
    held.wait_entered()
    leader = Caller(rates.referential, 7)
    flights.reach(leads=1)
    followers = [Caller(rates.referential, 7) for _ in range(3)]
    flights.reach(follows=3)
    held.release.set()
    holding.result()
    lead = leader.result()
    got = [f.result() for f in followers]
    for g in [lead, *got]:
        assert (g.payload, g.up_to_date) == ({"code": 7, "v": 1}, False)
        assert isinstance(g.cause, CircuitBreakerError)
    assert all(g.cause is lead.cause for g in got)  # the leader's refusal
    assert calls == 1
    assert (pool.free, pool.waiting) == (1, 0)
    again = Caller(rates.referential, 7)  # no dead flight to wait for: refused at once
    assert isinstance(again.result().cause, CircuitBreakerError)
    assert flights.follows == 3
    health = engine.health().failovers["edge.breaker"]
    assert (health.breaker, health.counts["recovered"]) == ("open", 5)
    cb.close()
    assert rates.referential(7).up_to_date
    assert calls == 2
    engine.close()


async def test_an_open_breaker_refuses_the_leader_and_its_followers_recover_async(
    clock: FakeClock,
) -> None:
    engine = Failover(clock=clock, metrics=False)
    bulkhead_pool, held, holder = _aheld_pool(engine, "edge.abr", "edge.abr.holder")
    cb = pybreaker.CircuitBreaker(fail_max=5, reset_timeout=3600)
    calls = 0

    @failover.failover(
        "edge.abreaker",
        engine=engine,
        single_flight=True,
        breaker=cb,
        bulkhead="edge.abr",
        acquire_timeout=None,
    )
    async def rates(code: int) -> dict[str, int]:
        nonlocal calls
        calls += 1
        return {"code": code, "v": calls}

    await rates(7)
    cb.open()
    flights = watch(rates)
    holding = asyncio.create_task(holder("x"))
    await held.wait_entered()
    leader = asyncio.create_task(rates.referential(7))
    followers = [asyncio.create_task(rates.referential(7)) for _ in range(3)]
    await flights.areach(leads=1, follows=3)
    held.release.set()
    await holding
    got = await asyncio.wait_for(asyncio.gather(leader, *followers), WAIT)
    for g in got:
        assert (g.payload, g.up_to_date) == ({"code": 7, "v": 1}, False)
        assert isinstance(g.cause, CircuitBreakerError)
        assert g.cause is got[0].cause
    assert (bulkhead_pool.free, bulkhead_pool.waiting) == (1, 0)
    again = await asyncio.wait_for(rates.referential(7), WAIT)
    assert isinstance(again.cause, CircuitBreakerError)
    cb.close()
    assert (await rates.referential(7)).up_to_date
    assert calls == 2
    await asyncio.to_thread(engine.close)


def test_the_breaker_counts_one_failure_per_leader_call_not_per_follower(
    clock: FakeClock,
) -> None:
    engine = Failover(clock=clock, metrics=False, breaker_defaults={"fail_max": 3})
    up = Blocking()

    @failover.failover(
        "edge.count", engine=engine, single_flight=True, breaker=True, max_concurrency=1
    )
    def rates(code: int) -> object:
        return up({"code": code})

    cb = engine.breaker(rates.definition)
    up.release.set()
    rates(7)
    up.wait_entered()
    flights = watch(rates)
    up.error = ConnectionError("rates down")
    for flight in range(1, 4):
        up.release.clear()
        leader = Caller(rates.referential, 7)
        up.wait_entered()
        followers = [Caller(rates.referential, 7) for _ in range(4)]
        flights.reach(leads=flight, follows=4 * flight)
        up.release.set()
        got = [leader.result(), *(f.result() for f in followers)]
        assert all(g.cause is up.error and g.payload == {"code": 7} for g in got)
        assert cb.fail_counter == flight  # one failure per upstream call, not five
    assert up.calls == 4
    health = engine.health().failovers["edge.count"]
    assert health.breaker == "open"
    assert health.counts["recovered"] == 15
    assert isinstance(rates.referential(7).cause, CircuitBreakerError)
    assert up.calls == 4
    engine.close()


async def test_the_breaker_counts_one_failure_per_async_leader_call(clock: FakeClock) -> None:
    engine = Failover(clock=clock, metrics=False, breaker_defaults={"fail_max": 2})
    up = ABlocking()

    @failover.failover("edge.acount", engine=engine, single_flight=True, breaker=True)
    async def rates(code: int) -> object:
        return await up({"code": code})

    cb = engine.breaker(rates.definition)
    up.release.set()
    await rates(7)
    await up.wait_entered()
    up.error = ConnectionError("rates down")
    for flight in range(1, 3):
        up.release.clear()
        pending = asyncio.gather(*(rates.referential(7) for _ in range(5)))
        await up.wait_entered()
        up.release.set()
        got = await asyncio.wait_for(pending, WAIT)
        assert all(g.cause is up.error and not g.up_to_date for g in got)
        assert cb.fail_counter == flight
    assert up.calls == 3
    assert engine.health().failovers["edge.acount"].breaker == "open"
    await asyncio.to_thread(engine.close)


# -- a bulkhead wait that ends without a permit ---------------------------------------------------


async def test_a_leader_cancelled_while_waiting_for_a_permit_leaves_its_followers_to_call(
    clock: FakeClock,
) -> None:
    engine = Failover(clock=clock, metrics=False)
    up = ABlocking()

    @failover.failover(
        "edge.cancel", engine=engine, single_flight=True, max_concurrency=1, acquire_timeout=None
    )
    async def rates(code: int) -> object:
        return await up({"code": code})

    flights = watch(rates)
    bulkhead = engine.bulkhead(rates.definition)
    holder = asyncio.create_task(rates(1))
    await up.wait_entered()  # key 1 holds the only permit
    leader = asyncio.create_task(rates(7))
    followers = [asyncio.create_task(rates(7)) for _ in range(3)]
    await flights.areach(leads=2, follows=3)
    assert bulkhead.waiting == 1  # the leader; its followers wait for it, not for a permit
    leader.cancel()
    with pytest.raises(asyncio.CancelledError):
        await leader
    await flights.areach(leads=3, follows=5)  # they fly again: one leads, two follow it
    assert (bulkhead.free, bulkhead.waiting) == (0, 1)
    up.release.set()
    assert await holder == {"code": 1}
    assert await asyncio.wait_for(asyncio.gather(*followers), WAIT) == [{"code": 7}] * 3
    assert up.calls == 2
    assert (bulkhead.free, bulkhead.waiting) == (1, 0)
    assert await rates(8) == {"code": 8}
    await asyncio.to_thread(engine.close)


async def test_a_task_cancelled_waiting_for_a_permit_is_no_breaker_call(clock: FakeClock) -> None:
    """Bulkhead, breaker and soft timeout: a task cancelled in the bulkhead's queue passed no
    guard inside it; the permit and the breaker are as they were."""
    engine = Failover(clock=clock, metrics=False)
    up = ABlocking()

    @failover.failover(
        "edge.chain",
        engine=engine,
        max_concurrency=1,
        acquire_timeout=None,
        breaker=True,
        timeout=2 * WAIT,
    )
    async def rates(code: int) -> object:
        return await up({"code": code})

    cb = engine.breaker(rates.definition)
    bulkhead = engine.bulkhead(rates.definition)
    holder = asyncio.create_task(rates(1))
    await up.wait_entered()
    waiter = asyncio.create_task(rates(2))
    await asyncio.sleep(0)  # its first step runs into the permit queue
    assert bulkhead.waiting == 1
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert (bulkhead.free, bulkhead.waiting) == (0, 0)
    up.release.set()
    assert await holder == {"code": 1}
    assert (bulkhead.free, cb.current_state, cb.fail_counter) == (1, "closed", 0)
    assert await rates(3) == {"code": 3}
    assert up.calls == 2
    await asyncio.to_thread(engine.close)


def test_a_leader_thread_that_waits_in_vain_for_a_permit_hands_its_refusal_on(
    clock: FakeClock,
) -> None:
    engine = Failover(clock=clock, metrics=False)
    up = Blocking()

    @failover.failover(
        "edge.vain",
        engine=engine,
        single_flight=True,
        max_concurrency=1,
        acquire_timeout="500ms",
    )
    def rates(code: int) -> object:
        return up({"code": code})

    up.release.set()
    stored = rates.referential(7)
    up.wait_entered()
    up.release.clear()
    clock.advance(minutes=1)
    flights = watch(rates)
    bulkhead = engine.bulkhead(rates.definition)
    holder = Caller(rates, 1)
    up.wait_entered()
    leader = Caller(rates.referential, 7)
    flights.reach(leads=2)
    followers = [Caller(rates.referential, 7) for _ in range(3)]
    flights.reach(follows=3)
    got = [leader.result(), *(f.result() for f in followers)]  # refused at its deadline
    for g in got:
        assert (g.payload, g.up_to_date, g.as_of) == ({"code": 7}, False, stored.as_of)
        assert isinstance(g.cause, BulkheadFull)
        assert g.cause is got[0].cause
    rejected = engine.health().pools[bulkhead.pool.name].rejected
    assert rejected == {"edge.vain": 1}  # one wait, one refusal
    assert (bulkhead.free, bulkhead.waiting) == (0, 0)
    up.release.set()
    assert holder.result() == {"code": 1}
    assert bulkhead.free == 1
    assert Caller(rates.referential, 7).result().up_to_date  # no dead flight on the key
    assert up.calls == 3
    engine.close()


# -- fresh_for in front of single flight and the bulkhead -----------------------------------------


def test_a_fresh_answer_takes_no_permit_and_joins_no_flight(clock: FakeClock) -> None:
    engine = Failover(clock=clock, metrics=False)
    up = Blocking()

    @failover.failover(
        "edge.fresh", engine=engine, fresh_for="5m", single_flight=True, max_concurrency=1
    )
    def rates(code: int) -> object:
        return up({"code": code})

    up.release.set()
    rates(1)
    clock.advance(minutes=10)
    two = rates.referential(2)
    up.wait_entered(2)
    up.release.clear()
    flights = watch(rates)
    bulkhead = engine.bulkhead(rates.definition)
    leader = Caller(rates.referential, 1)  # past fresh_for: the upstream, the only permit
    up.wait_entered()
    got = [rates.referential(2) for _ in range(3)]  # fresh: no permit needed, no flight
    for g in got:
        assert (g.payload, g.up_to_date, g.as_of, g.key) == ({"code": 2}, True, two.as_of, two.key)
    assert (flights.leads, flights.follows) == (1, 0)
    assert bulkhead.free == 0
    assert engine.health().pools[bulkhead.pool.name].rejected == {}
    with pytest.raises(BulkheadFull):  # a call that is not fresh does need the permit
        rates(3)
    up.release.set()
    assert leader.result().up_to_date
    assert bulkhead.free == 1
    assert engine.health().failovers["edge.fresh"].counts["fresh"] == 3
    engine.close()


async def test_an_async_fresh_answer_takes_no_permit_and_joins_no_flight(clock: FakeClock) -> None:
    engine = Failover(clock=clock, metrics=False)
    up = ABlocking()

    @failover.failover(
        "edge.afresh", engine=engine, fresh_for="5m", single_flight=True, max_concurrency=1
    )
    async def rates(code: int) -> object:
        return await up({"code": code})

    up.release.set()
    await rates(1)
    clock.advance(minutes=10)
    two = await rates.referential(2)
    up.release.clear()
    flights = watch(rates)
    bulkhead = engine.bulkhead(rates.definition)
    leader = asyncio.create_task(rates.referential(1))
    await up.wait_entered(3)
    got = await asyncio.gather(*(rates.referential(2) for _ in range(3)))
    for g in got:
        assert (g.payload, g.up_to_date, g.as_of) == ({"code": 2}, True, two.as_of)
    assert (flights.leads, flights.follows) == (1, 0)
    assert bulkhead.free == 0
    assert engine.health().pools[bulkhead.pool.name].rejected == {}
    up.release.set()
    assert (await leader).up_to_date
    assert bulkhead.free == 1
    await asyncio.to_thread(engine.close)


class Countries:
    """A batch upstream that, once ``gate`` is closed, waits for it; records each call."""

    def __init__(self) -> None:
        self.calls: list[list[int]] = []
        self.gate = threading.Event()
        self.gate.set()
        self.entered = threading.Semaphore(0)
        self._lock = threading.Lock()

    def __call__(self, ids: list[int]) -> list[dict[str, int]]:
        with self._lock:
            self.calls.append(list(ids))
        self.entered.release()
        assert self.gate.wait(WAIT)
        return [{"id": i} for i in ids]

    def wait_entered(self) -> None:
        assert self.entered.acquire(timeout=WAIT)


def test_a_narrowed_scatter_call_shares_its_flight_only_with_calls_of_the_same_slices(
    clock: FakeClock,
) -> None:
    """Some slices fresh: the upstream is asked for the others; a call of those same slices
    shares that call, and a call of all of them (none fresh any more) does not get a part."""
    engine = Failover(clock=clock, metrics=False)
    upstream = Countries()
    countries = failover.failover(
        "edge.countries",
        splitter=ListSplitter("id"),
        fresh_for="5m",
        single_flight=True,
        engine=engine,
    )(upstream)
    countries([1])
    upstream.wait_entered()
    clock.advance(minutes=4)
    flights = watch(countries)
    upstream.gate.clear()
    narrowed = Caller(countries.referential, [1, 2])  # 1 fresh: asks for [2]
    upstream.wait_entered()
    plain = Caller(countries, [2])  # the same slices: shares that call
    flights.reach(leads=1, follows=1)
    clock.advance(minutes=2)  # 1 is six minutes old
    whole = Caller(countries, [1, 2])  # nothing fresh: its own call
    flights.reach(leads=2)
    upstream.wait_entered()
    upstream.gate.set()
    assert [c["id"] for c in narrowed.result().payload] == [1, 2]
    assert plain.result() == [{"id": 2}]
    assert whole.result() == [{"id": 1}, {"id": 2}]
    assert upstream.calls == [[1], [2], [1, 2]]
    engine.close()


async def test_an_async_narrowed_scatter_call_shares_only_with_the_same_slices(
    clock: FakeClock,
) -> None:
    engine = Failover(clock=clock, metrics=False)
    calls: list[list[int]] = []
    release = asyncio.Event()
    release.set()

    @failover.failover(
        "edge.acountries",
        splitter=ListSplitter("id"),
        fresh_for="5m",
        single_flight=True,
        engine=engine,
    )
    async def countries(ids: list[int]) -> list[dict[str, int]]:
        calls.append(list(ids))
        await release.wait()
        return [{"id": i} for i in ids]

    await countries([1])
    clock.advance(minutes=4)
    flights = watch(countries)
    release.clear()
    narrowed = asyncio.create_task(countries([1, 2]))
    plain = asyncio.create_task(countries([2]))
    await flights.areach(leads=1, follows=1)
    clock.advance(minutes=2)
    whole = asyncio.create_task(countries([1, 2]))
    await flights.areach(leads=2)
    release.set()
    got = await asyncio.wait_for(asyncio.gather(narrowed, plain, whole), WAIT)
    assert got == [[{"id": 1}, {"id": 2}], [{"id": 2}], [{"id": 1}, {"id": 2}]]
    assert calls == [[1], [2], [1, 2]]
    await asyncio.to_thread(engine.close)


# -- the leader stores off the loop ---------------------------------------------------------------


async def test_async_followers_are_woken_on_their_loop_when_the_leader_stores_off_it(
    clock: FakeClock, tmp_path: Path
) -> None:
    """A SQLite store without async writes: the leader stores its result on a worker thread
    (`Runtime.off_loop`), and hands it to its followers from there; their loop (in debug
    mode, which refuses a future set from another thread) wakes them."""
    asyncio.get_running_loop().set_debug(True)
    engine = Failover(
        f"sqlite:///{tmp_path / 'f.db'}", async_writes=False, clock=clock, metrics=False
    )
    release = asyncio.Event()
    calls = 0

    @failover.failover("edge.offloop", engine=engine, single_flight=True)
    async def rates(code: int) -> dict[str, int]:
        nonlocal calls
        calls += 1
        await release.wait()
        return {"code": code}

    assert rates._failover_state.runtime().offloads()
    flights = watch(rates)
    pending = asyncio.gather(*(rates.referential(7) for _ in range(4)))
    await flights.areach(leads=1, follows=3)
    release.set()
    got = await asyncio.wait_for(pending, WAIT)
    assert calls == 1
    assert all(g.payload == {"code": 7} and fields(g) == fields(got[0]) for g in got)
    assert got[0].up_to_date
    await asyncio.to_thread(engine.close)


# -- the bare path and the entered one ------------------------------------------------------------

VARIANTS: dict[str, dict[str, Any]] = {
    "bare": {},
    "bulkhead": {"max_concurrency": 2},
    "breaker": {"breaker": True},
    "timeout": {"timeout": 2 * WAIT},
    "single_flight": {"single_flight": True},
    "all": {"max_concurrency": 2, "breaker": True, "timeout": 2 * WAIT, "single_flight": True},
}


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_the_bare_path_and_the_entered_paths_give_the_same_envelopes(
    kind: str, clock: FakeClock
) -> None:
    failing: list[Exception] = []

    def upstream(code: int, *, scale: float = 1.0) -> dict[str, Any]:
        if failing:
            raise failing[0]
        return {"code": code, "rate": scale}

    async def aupstream(code: int, *, scale: float = 1.0) -> dict[str, Any]:
        return upstream(code, scale=scale)

    fn = upstream if kind == "sync" else aupstream
    engines = [Failover(clock=clock, metrics=False) for _ in VARIANTS]
    decorated: dict[str, Any] = {
        variant: failover.failover("edge.same", engine=engine, ttl="1h", **options)(fn)
        for engine, (variant, options) in zip(engines, VARIANTS.items(), strict=True)
    }
    bare = {v: f._failover_state.runtime().bare for v, f in decorated.items()}
    assert bare == {v: v == "bare" for v in VARIANTS}

    async def call(f: Any) -> Any:
        out = f.referential(7, scale=2.0)
        return await out if kind == "async" else out

    live = {v: await call(f) for v, f in decorated.items()}
    clock.advance(minutes=5)
    failing.append(ConnectionError("down"))
    stale = {v: await call(f) for v, f in decorated.items()}
    for variant in VARIANTS:
        got, want = live[variant], live["bare"]
        assert (fields(got), got.payload, got.cause) == (fields(want), want.payload, None)
        assert got.up_to_date
        got, want = stale[variant], stale["bare"]
        assert (fields(got), got.payload) == (fields(want), want.payload)
        assert got.cause is failing[0]
        assert not got.up_to_date
        assert got.as_of == live[variant].as_of
    for engine in engines:
        await asyncio.to_thread(engine.close)


# -- a leader's refusal is counted once, not again by each follower ------------------------------


class RefusingLater:
    """A permit source whose asks wait for the test, then are refused: a leader refused while
    its followers wait for it."""

    kind = "gated"

    def __init__(self) -> None:
        self.asked = threading.Event()
        self.answer = threading.Event()

    def bind(self, pool: str, permits: int, fair: bool) -> RefusingLater:
        return self

    def acquire(self, weight: int, deadline: float | None) -> object | None:
        self.asked.set()
        assert self.answer.wait(WAIT)
        return None

    async def aacquire(self, weight: int, deadline: float | None) -> object | None:
        self.asked.set()
        assert await asyncio.to_thread(self.answer.wait, WAIT)
        return None

    def release(self, lease: object) -> None:
        raise AssertionError("no permit was given")

    def in_use(self) -> int:
        return 0

    def waiting(self) -> int:
        return 0


def _refusals(engine: Failover, registry: CollectorRegistry, name: str) -> tuple[Any, ...]:
    """The refusals of ``name`` as an operator sees them: the metric, health, the pool's."""
    report = engine.health()
    labels = {"name": name, "guard": "bulkhead"}
    return (
        registry.get_sample_value("failover_refused_total", labels),
        report.failovers[name].refused,
        report.pools["gated"].rejected,
    )


def _gated(clock: FakeClock) -> tuple[CollectorRegistry, Failover, RefusingLater]:
    """An engine exporting to a registry of its own, with the pool ``gated`` of one permit
    from a source that refuses once the test says so."""
    registry = CollectorRegistry()
    engine = Failover(clock=clock, metrics=registry)
    source = RefusingLater()
    engine.bulkhead_pool("gated", permits=1, source=source)
    return registry, engine, source


def test_the_followers_of_a_refused_leader_do_not_count_its_refusal_again(
    clock: FakeClock,
) -> None:
    registry, engine, source = _gated(clock)

    @failover.failover(
        "edge.once", engine=engine, single_flight=True, bulkhead="gated", policy="never_throw"
    )
    def rates(code: int) -> object:
        raise AssertionError("refused: the upstream is never called")

    flights = watch(rates)
    leader = Caller(rates.referential, 7)
    assert source.asked.wait(WAIT)  # the leader asks for its permit
    followers = [Caller(rates.referential, 7) for _ in range(3)]
    flights.reach(leads=1, follows=3)
    source.answer.set()  # refused: the leader and its followers recover from that one refusal
    got = [leader.result(), *(f.result() for f in followers)]
    assert all(isinstance(g.cause, BulkheadFull) for g in got)
    assert _refusals(engine, registry, "edge.once") == (1, {"bulkhead": 1}, {"edge.once": 1})
    engine.close()


async def test_the_followers_of_a_refused_async_leader_do_not_count_its_refusal_again(
    clock: FakeClock,
) -> None:
    registry, engine, source = _gated(clock)

    @failover.failover(
        "edge.aonce", engine=engine, single_flight=True, bulkhead="gated", policy="never_throw"
    )
    async def rates(code: int) -> object:
        raise AssertionError("refused: the upstream is never called")

    flights = watch(rates)
    calls = [asyncio.create_task(rates.referential(7)) for _ in range(4)]
    await flights.areach(leads=1, follows=3)
    assert await asyncio.to_thread(source.asked.wait, WAIT)  # the leader asks for its permit
    source.answer.set()  # refused: the leader and its followers recover from that one refusal
    got = await asyncio.gather(*calls)
    assert all(isinstance(g.cause, BulkheadFull) for g in got)
    assert _refusals(engine, registry, "edge.aonce") == (1, {"bulkhead": 1}, {"edge.aonce": 1})
    await asyncio.to_thread(engine.close)
