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

import failover
from failover import Failover
from failover.stores.layers.tiered import TieredStore

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
