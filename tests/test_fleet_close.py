"""The fleet at close and under cancellation (issue 32): writes a tiered store's queue lands while
its engine closes are announced on the backplane; an engine closing while its calls wait for
another process's flight releases them; an async caller cancelled while it holds a flight's
lease, waits for one, or asks for one leaves no key stuck.

Two engines on one fleet stand for two processes (each its own fleet token, its own bus); the
fleet and the far store are redis-servers of this module's own (stopped with ``SIGSTOP`` or
paused with ``CLIENT PAUSE`` for a while, always resumed). Waits are events and joins with hang
guards; no assertion on time.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import redis

import failover
from failover import Failover
from failover.stores.layers.tiered import TieredStore

from . import redis_ha
from .conftest import FakeClock
from .own_servers import running, stopped
from .redis_server import RedisServer, unique_prefix

HANG = 5.0  # the hang guard of every wait
NAME = "fleet.close.rates"


@pytest.fixture(scope="module")
def fleet_server() -> Iterator[RedisServer]:
    """The fleet's redis-server, this module's own."""
    yield from running(RedisServer())


@pytest.fixture(scope="module")
def far_server() -> Iterator[RedisServer]:
    """The far store's redis-server, this module's own: stopping it stalls no other test."""
    yield from running(RedisServer())


def _near(engine: Failover) -> TieredStore:
    tiered = engine.raw_store
    assert isinstance(tiered, TieredStore)
    return tiered


@pytest.mark.parametrize("how", ["close", "aclose"])
def test_writes_landed_while_the_engine_closes_are_announced(
    how: str, fleet_server: RedisServer, far_server: RedisServer, clock: FakeClock
) -> None:
    """A write still queued when its engine closes (its far store did not answer, and the
    retry's backoff runs on the engine's clock, which stands still) lands during the close: the
    other process hears of it and drops its near copy."""
    tag = unique_prefix()
    engines = [
        Failover(
            store=f"tiered+{far_server.url}?prefix={tag}",
            fleet=f"{fleet_server.url}?prefix={tag}",
            clock=clock,
            metrics=False,
            store_timeout=0.25,
            store_breaker_after=100,  # the far store's timeouts here never open its breaker
        )
        for _ in range(2)
    ]
    closing, other = engines
    version = [1]
    try:
        fns = []
        for engine in engines:
            assert engine.fleet is not None
            assert engine.fleet.bus.subscribed.wait(HANG)

            @failover.failover(NAME, engine=engine, fresh_for="1m")
            def rates(base: str) -> int:
                return version[0]

            fns.append(rates)
        assert fns[1]("EUR") == 1  # the other process holds a near copy of version 1
        assert other.flush(HANG)
        assert len(_near(other).near.find_all(NAME)) == 1
        assert far_server.process is not None
        version[0] = 2
        with stopped([far_server.process.pid]):
            assert fns[0]("EUR") == 2  # far times out: the upstream answers, the write queues
            assert not closing.flush(HANG)  # tried, timed out: it waits for its retry
        assert len(_near(other).near.find_all(NAME)) == 1  # nothing announced yet
        assert other.fleet is not None
        other.fleet.backplane.applied.clear()
        if how == "close":
            closing.close()
        else:
            asyncio.run(closing.aclose())
        assert other.fleet.backplane.applied.wait(HANG)  # the write landed at close: told
        assert _near(other).near.find_all(NAME) == []
        assert fns[1]("EUR") == 2  # from far, not the near copy of version 1
    finally:
        for engine in engines:
            engine.close()


# -- flights at close and under cancellation ---------------------------------------------------


class Held:
    """An upstream whose first call (the fleet's flight holder's) waits on ``release``, and
    that counts its calls."""

    def __init__(self) -> None:
        self.calls = 0
        self.entered = threading.Event()
        self.release = threading.Event()

    def __call__(self, who: str) -> str:
        self.calls += 1
        if self.calls == 1:
            self.entered.set()
            assert self.release.wait(3 * HANG)
        return who


def _pair(fleet_server: RedisServer) -> list[Failover]:
    """Two engines on one fleet, each with a store of its own: a waiter released early finds
    nothing stored by the holder, and calls its own upstream."""
    url = f"{fleet_server.url}?prefix={unique_prefix()}"
    engines = [Failover(fleet=url, metrics=False, store_timeout=2.0) for _ in range(2)]
    for engine in engines:
        assert engine.fleet is not None
        assert engine.fleet.bus.subscribed.wait(HANG)
        # Long enough that the hang guard, not a lapse or a budget, ends a wait that is stuck.
        engine.fleet.flights.lease = 30.0
        engine.fleet.flights.wait = 60.0
    return engines


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_an_engine_closing_releases_the_calls_waiting_for_another_processs_flight(
    kind: str, fleet_server: RedisServer
) -> None:
    holder, closing = _pair(fleet_server)
    upstream = Held()
    try:
        fns = []
        for engine in (holder, closing):
            if kind == "sync":

                @failover.failover(NAME, engine=engine, single_flight="fleet")
                def rates(who: str) -> str:
                    return upstream(who)

            else:

                @failover.failover(NAME, engine=engine, single_flight="fleet")
                async def rates(who: str) -> str:  # type: ignore[misc]
                    return await asyncio.to_thread(upstream, who)

            fns.append(rates)

        def call(fn: Any, engine: Failover, out: list[Any]) -> None:
            if kind == "sync":
                out.append(fn("k"))
                return

            async def once() -> Any:
                try:
                    return await fn("k")
                finally:  # the fleet's client of this loop, closed on it
                    assert engine.fleet is not None
                    await engine.fleet.aclose()

            out.append(asyncio.run(once()))

        held: list[Any] = []
        first = threading.Thread(target=call, args=(fns[0], holder, held), daemon=True)
        first.start()
        assert upstream.entered.wait(HANG)  # the holder's flight holds the key's lease
        waited: list[Any] = []
        second = threading.Thread(target=call, args=(fns[1], closing, waited), daemon=True)
        second.start()
        assert closing.fleet is not None
        assert closing.fleet.flights.waited.wait(HANG)  # it waits for the holder's flight
        closing.close()
        second.join(HANG)
        assert not second.is_alive()  # released by the close: not held until the lease ends
        assert waited == ["k"]  # it called its own upstream
        assert upstream.calls == 2
        upstream.release.set()
        first.join(HANG)
        assert held == ["k"]
    finally:
        upstream.release.set()
        for engine in (holder, closing):
            engine.close()


@pytest.mark.parametrize("where", ["holding", "waiting"])
def test_a_cancelled_async_flight_leaves_no_key_stuck(
    where: str, fleet_server: RedisServer
) -> None:
    """An async caller cancelled while it holds the key's lease gives it back at once (the
    other process's waiter takes over, not after the lease's time to live); one cancelled while
    it waits for another process's flight stops waiting, and that flight lands as before."""
    first, second = _pair(fleet_server)
    calls: list[str] = []

    async def scenario() -> tuple[Any, Any]:
        gate = asyncio.Event()
        entered = asyncio.Event()

        def make(engine: Failover, who: str) -> Any:
            @failover.failover(NAME, engine=engine, single_flight="fleet")
            async def rates(key: str) -> str:
                calls.append(who)
                if len(calls) == 1:
                    entered.set()
                    await gate.wait()
                return who

            return rates

        fns = [make(first, "first"), make(second, "second")]
        holding = asyncio.ensure_future(fns[0]("k"))
        async with asyncio.timeout(HANG):
            await entered.wait()  # the first engine's call holds the lease
        waiting = asyncio.ensure_future(fns[1]("k"))
        assert second.fleet is not None
        assert await asyncio.to_thread(second.fleet.flights.waited.wait, HANG)
        cancelled, other = (holding, waiting) if where == "holding" else (waiting, holding)
        cancelled.cancel()
        with pytest.raises(asyncio.CancelledError):
            await cancelled
        if where == "waiting":
            gate.set()
        async with asyncio.timeout(HANG):  # the hang guard: never the lease's 30 s
            answer = await other
        for engine in (first, second):  # nothing held nor waited for is left behind
            assert engine.fleet is not None
            assert await asyncio.to_thread(engine.fleet.sync)
            assert engine.fleet.flights._held == {}
            assert engine.fleet.flights._waiters == {}
            await engine.aclose()
        return answer, calls

    answer, called = asyncio.run(scenario())
    try:
        if where == "holding":
            assert answer == "second"  # the waiter took the lease given back, and called
            assert called == ["first", "second"]
        else:
            assert answer == "first"  # the holder's flight landed as before
            assert called == ["first"]
    finally:
        for engine in (first, second):
            engine.close()


def test_an_async_caller_cancelled_while_it_asks_for_the_lease_leaves_no_key_stuck() -> None:
    """On a Sentinel set's master (no async client there: the lease is asked on a worker
    thread), paused for writes (``CLIENT PAUSE``) while an async caller asks for a key's lease:
    the caller is cancelled, then the ask goes through and takes the lease all the same. It is
    given back at once (held, it would be renewed for ever), and another process's call of the
    key takes it and calls its upstream."""
    sentinels = redis_ha.sentinels()
    prefix = unique_prefix()
    url = f"{sentinels.url}?prefix={prefix}"
    port = sentinels.master_port()
    assert port is not None
    master = redis.Redis(port=port)
    engines = [Failover(fleet=url, metrics=False, store_timeout=2.0) for _ in range(2)]
    calls: list[str] = []
    try:
        for engine in engines:
            assert engine.fleet is not None
            assert engine.fleet.bus.subscribed.wait(HANG)
            engine.fleet.flights.lease = 30.0  # a lease left behind outlives the hang guard
            engine.fleet.flights.wait = 60.0

        @failover.failover(NAME, engine=engines[0], single_flight="fleet")
        def first(key: str) -> str:
            calls.append("first")
            return "first"

        @failover.failover(NAME, engine=engines[1], single_flight="fleet")
        async def second(key: str) -> str:
            calls.append("second")
            return "second"

        def leased() -> bool:
            return bool(master.keys(f"{prefix}flight:*"))

        async def cancelled() -> None:
            task = asyncio.ensure_future(second("k"))
            await asyncio.to_thread(
                redis_ha.wait_for,
                lambda: int(master.info("clients")["blocked_clients"]) >= 1,
                "the lease's ask to be paused",
                HANG,
            )
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            master.execute_command("CLIENT", "UNPAUSE")  # the ask goes through now
            # It takes the lease; given back as soon as its answer is heard, the lease may be
            # gone before anyone looks, so wait for the ask to be answered instead.
            await asyncio.to_thread(
                redis_ha.wait_for,
                lambda: int(master.info("clients")["blocked_clients"]) == 0,
                "the paused ask to be answered",
                HANG,
            )
            others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            await asyncio.gather(*others, return_exceptions=True)  # its answer heard here
            fleet = engines[1].fleet
            assert fleet is not None
            await fleet.aclose()  # this loop's connections, before the loop ends

        master.execute_command("CLIENT", "PAUSE", int(3 * HANG * 1000), "WRITE")
        try:
            asyncio.run(cancelled())
        finally:
            master.execute_command("CLIENT", "UNPAUSE")
        # Given back once its answer was heard, by the fleet thread's next round: awaited, as
        # that round may come late on a busy machine.
        redis_ha.wait_for(lambda: not leased(), "the abandoned lease to be given back", HANG)
        out: list[str] = []
        caller = threading.Thread(target=lambda: out.append(first("k")), daemon=True)
        caller.start()
        caller.join(HANG)
        assert not caller.is_alive()  # not held off by a lease renewed for a cancelled call
        assert out == ["first"]
        assert calls == ["first"]  # the cancelled caller never called its upstream
    finally:
        master.close()
        for engine in engines:
            engine.close()


def test_a_sync_holder_interrupted_gives_its_lease_back(fleet_server: RedisServer) -> None:
    """The sync counterpart of a cancellation: the holder's upstream interrupted by a
    ``BaseException`` (a ``KeyboardInterrupt``, a ``SystemExit`` in its thread). Its lease is
    given back at once: the other process's waiter takes over, not after the lease's 30 s."""
    holder, other = _pair(fleet_server)
    entered, interrupt = threading.Event(), threading.Event()
    calls: list[str] = []
    try:

        @failover.failover(NAME, engine=holder, single_flight="fleet")
        def first(key: str) -> str:
            calls.append("first")
            entered.set()
            assert interrupt.wait(HANG)
            raise KeyboardInterrupt

        @failover.failover(NAME, engine=other, single_flight="fleet")
        def second(key: str) -> str:
            calls.append("second")
            return "second"

        stopped_by: list[BaseException] = []

        def hold() -> None:
            try:
                first("k")
            except BaseException as exc:  # the interruption, seen by its own thread
                stopped_by.append(exc)

        holding = threading.Thread(target=hold, daemon=True)
        holding.start()
        assert entered.wait(HANG)
        out: list[str] = []
        waiting = threading.Thread(target=lambda: out.append(second("k")), daemon=True)
        waiting.start()
        assert other.fleet is not None
        assert other.fleet.flights.waited.wait(HANG)
        interrupt.set()
        holding.join(HANG)
        waiting.join(HANG)
        assert not waiting.is_alive()
        assert [type(e) for e in stopped_by] == [KeyboardInterrupt]
        assert out == ["second"]
        assert calls == ["first", "second"]
    finally:
        interrupt.set()
        for engine in (holder, other):
            engine.close()
