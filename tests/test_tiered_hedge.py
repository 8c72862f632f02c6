"""A tiered store's reads hedge: when the near copy has an answer, the far store gets
``hedge_after`` to answer, then the near copy answers; a far store that fails, or whose store
breaker is open, leaves the near copy to answer at once. Far's trouble is counted and shown like
any store's (``failover_store_errors_total``, ``HealthReport.stores``).

The far store is a real redis-server, stopped with ``SIGSTOP`` (the kernel still accepts its TCP
data: no socket error comes) and always resumed in a ``finally``. Its socket timeout and the
engine's ``store_timeout`` are set far longer than the test may take where a read must not wait
for them: a call that returns at all has answered from the near copy. No assertion on time.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, cast

import pytest
from prometheus_client import CollectorRegistry

import failover
from failover import ConfigurationError, Failover
from failover.stores import InMemoryStore, TieredStore, make_store
from failover.stores.base import walk
from failover.stores.layers.deadline import DeadlineStore
from failover.stores.layers.hedging import HedgingDeadline

from .conftest import FakeClock, Upstream
from .own_servers import running, stopped
from .redis_server import RedisServer

RESET = 5.0


@pytest.fixture
def redis_srv() -> Iterator[RedisServer]:
    """A redis-server of the test's own: it is stopped and killed."""
    yield from running(RedisServer())


def _url(server: RedisServer, socket_timeout: float) -> str:
    return (
        f"tiered+{server.url}?prefix=t{os.urandom(4).hex()}:&socket_timeout={socket_timeout}"
        "&hedge_after=50ms"
    )


def _far(engine: Failover) -> HedgingDeadline:
    found = [s for s in walk(engine.store) if isinstance(s, DeadlineStore)]
    assert all(isinstance(s, HedgingDeadline) for s in found)
    assert len(found) == 1  # far's own: none over the tiered store as a whole
    return cast(HedgingDeadline, found[0])


def _patient(engine: Failover) -> None:
    """Wait for the far store's answer or failure (no hedge, a long deadline), so that the read
    sees it before the test goes on, on a loaded machine too."""
    tiered = next(s for s in walk(engine.store) if isinstance(s, TieredStore))
    tiered.hedge_after = 30.0
    _far(engine).timeout = 60.0


@contextmanager
def stored_once(
    server: RedisServer, clock: FakeClock, store_timeout: float, registry: CollectorRegistry
) -> Iterator[tuple[Failover, Callable[[int], int]]]:
    """An engine on a tiered store over ``server``, ``get(1)`` stored in both tiers, the
    upstream down from then on; closed at the end."""
    engine = Failover(
        _url(server, 60),
        store_timeout=store_timeout,
        clock=clock,
        metrics=registry,
        store_breaker_after=1,  # what an open breaker does: opened by one timeout
    )
    upstream = Upstream()
    try:

        @failover.failover("svc.tiered", engine=engine)
        def get(x: int) -> int:
            return upstream(x)  # type: ignore[return-value]

        assert get(1) == 1
        assert engine.flush(10)
        upstream.fail()
        yield engine, get
    finally:
        engine.close()


def _count(layer: DeadlineStore, reason: str) -> int:
    return sum(n for (_, why), n in layer.errors.items() if why == reason)


def test_hedge_after_is_a_duration_checked_at_construction() -> None:
    assert TieredStore(InMemoryStore(), InMemoryStore(), hedge_after="10ms").hedge_after == 0.01
    assert TieredStore(InMemoryStore(), InMemoryStore()).hedge_after == 0.05
    for bad in (0, -1, "soon", True):
        with pytest.raises(ConfigurationError, match="TieredStore: hedge_after"):
            TieredStore(InMemoryStore(), InMemoryStore(), hedge_after=bad)
    with pytest.raises(ConfigurationError, match="TieredStore: hedge_after"):
        make_store("tiered+redis://127.0.0.1:1/0?hedge_after=soon")


def test_the_url_sets_hedge_after_and_far_does_not_see_it() -> None:
    store = make_store("tiered+redis://127.0.0.1:1/0?hedge_after=20ms&prefix=p:")
    assert isinstance(store, TieredStore)
    assert store.hedge_after == 0.02
    far = store.far.inner  # type: ignore[attr-defined]  # the async-writes queue's store
    assert far.prefix == "p:"
    store.close()


def test_a_hung_far_store_leaves_near_to_answer_sync(
    redis_srv: RedisServer, clock: FakeClock
) -> None:
    registry = CollectorRegistry()
    assert redis_srv.process is not None
    with (
        stored_once(redis_srv, clock, 60, registry) as (engine, get),
        stopped([redis_srv.process.pid]),
    ):
        assert [get(1) for _ in range(3)] == [1, 1, 1]  # near answered
        far = _far(engine)
        assert len(far._late) == 1  # one far read out, not one more per call
        assert far.errors == {}  # not past its deadline: slow is not failed
        assert far.up


def test_a_far_store_past_its_deadline_is_counted_and_skipped(
    redis_srv: RedisServer, clock: FakeClock
) -> None:
    registry = CollectorRegistry()
    assert redis_srv.process is not None
    with stored_once(redis_srv, clock, 0.2, registry) as (engine, get):
        far = _far(engine)
        with stopped([redis_srv.process.pid]):
            assert get(1) == 1  # hedged: near answered, the far read goes on
            # The deadline is on the monotonic clock (not the engine's): let it pass.
            time.sleep(0.25)
            assert get(1) == 1  # the far read is past its deadline: a timeout, breaker open
            assert _count(far, "timeout") == 1
            assert not far.up
            assert get(1) == 1  # skipped: near answers at once
            assert _count(far, "breaker_open") >= 1
            assert engine.health().stores["redisstore"].status == "down"
            timeouts = registry.get_sample_value(
                "failover_store_errors_total",
                {"store": "redisstore", "operation": "find_many", "reason": "timeout"},
            )
            assert timeouts == 1
            assert registry.get_sample_value("failover_store_up", {"store": "redisstore"}) == 0
        _patient(engine)
        clock.advance(RESET + 1)
        assert get(1) == 1  # the trial reaches far, which answers again
        assert far.up


def test_a_failing_far_store_is_counted_and_near_answers(
    redis_srv: RedisServer, clock: FakeClock
) -> None:
    registry = CollectorRegistry()
    assert redis_srv.process is not None
    with stored_once(redis_srv, clock, 0.5, registry) as (engine, get):
        redis_srv.stop()  # refused: far fails at once
        _patient(engine)  # its failure is seen by the read, however loaded the machine
        assert get(1) == 1
        errors = registry.get_sample_value(
            "failover_store_errors_total",
            {"store": "redisstore", "operation": "find_many", "reason": "error"},
        )
        assert errors == 1
        assert engine.health().stores["redisstore"].errors == {"error": 1}


def test_a_hung_far_store_leaves_near_to_answer_async(
    redis_srv: RedisServer, clock: FakeClock
) -> None:
    engine = Failover(_url(redis_srv, 60), store_timeout=60, clock=clock, metrics=False)
    upstream = Upstream()
    assert redis_srv.process is not None
    pid = redis_srv.process.pid

    @failover.failover("svc.atiered", engine=engine)
    async def aget(x: int) -> int:
        return upstream(x)  # type: ignore[return-value]

    async def scenario() -> list[Any]:
        assert await aget(1) == 1
        assert await asyncio.to_thread(engine.flush, 10)
        upstream.fail()
        tiered = next(s for s in walk(engine.store) if isinstance(s, TieredStore))
        with stopped([pid]):
            answers = [await aget(1) for _ in range(3)]
            assert len(tiered._tasks) >= 1  # far's reads still under way, not waited for
        # Resumed: far's reads answer and their connections go back to the pool.
        await asyncio.gather(*tiered._tasks)
        assert _far(engine).errors == {}
        await engine.aclose()
        return answers

    try:
        assert asyncio.run(scenario()) == [1, 1, 1]
    finally:
        engine.close()


def test_an_async_far_store_past_its_deadline_opens_its_breaker(
    redis_srv: RedisServer, clock: FakeClock
) -> None:
    engine = Failover(
        _url(redis_srv, 60), store_timeout=0.2, clock=clock, metrics=False, store_breaker_after=1
    )
    upstream = Upstream()
    assert redis_srv.process is not None
    pid = redis_srv.process.pid

    @failover.failover("svc.atiered", engine=engine)
    async def aget(x: int) -> int:
        return upstream(x)  # type: ignore[return-value]

    async def scenario() -> None:
        assert await aget(1) == 1
        assert await asyncio.to_thread(engine.flush, 10)
        upstream.fail()
        far = _far(engine)
        tiered = next(s for s in walk(engine.store) if isinstance(s, TieredStore))
        with stopped([pid]):
            assert await aget(1) == 1  # hedged
            # The far read runs on as a task under its deadline, which cancels it: wait for it.
            await asyncio.gather(*tiered._tasks, return_exceptions=True)
            assert _count(far, "timeout") == 1
            assert not far.up
            assert await aget(1) == 1  # skipped: near at once
            assert _count(far, "breaker_open") == 1
        _patient(engine)
        clock.advance(RESET + 1)
        assert await aget(1) == 1
        assert far.up
        await engine.aclose()

    try:
        asyncio.run(scenario())
    finally:
        engine.close()
