"""The fleet told, not read (issue 32): its state changes, flights, messages, resyncs and cleanup
turns are facts on the engine's stream (`Failover.events`), and its health, logs and Prometheus
families are their observers.

A real redis-server of this module's own (stopped with ``SIGSTOP`` to play an unreachable fleet,
always resumed), a tiered store on the suite's shared redis-server, a real `CollectorRegistry`
read back through its text output. Two engines on one fleet stand for two processes. Waits are
events with hang guards; no assertion on time.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

import failover
from failover import Failover
from failover.events import Observer

from .conftest import FakeClock
from .own_servers import running, stopped
from .redis_server import RedisServer, unique_prefix
from .redis_server import server as shared_server
from .test_metrics import samples, value

HANG = 5.0
NAME = "fleet.observed.rates"


@pytest.fixture(scope="module")
def fleet_server() -> Iterator[RedisServer]:
    """A redis-server of this module's own: stopping it stalls no other test."""
    yield from running(RedisServer())


class Facts(Observer):
    """Records the fleet's facts an engine's stream tells (a test observer)."""

    def __init__(self) -> None:
        self.seen: list[tuple[Any, ...]] = []
        self.down = threading.Event()
        self.up = threading.Event()

    def fleet_state(
        self, up: bool, operation: str, cause: BaseException | None, failures: int
    ) -> None:
        self.seen.append(("state", up, operation, type(cause).__name__, failures))
        (self.up if up else self.down).set()

    def fleet_flight(self, name: str, result: str) -> None:
        self.seen.append(("flight", name, result))

    def cleanup_turn(self, ran: bool) -> None:
        self.seen.append(("cleanup", ran))


def _engines(url: str, registry: CollectorRegistry, clock: FakeClock) -> list[Failover]:
    tag = unique_prefix()
    store = shared_server()
    engines = [
        Failover(
            store=f"tiered+{store.url}?prefix={tag}",
            fleet=f"{url}?prefix={tag}",
            clock=clock,
            metrics=registry,
            store_timeout=0.5,
        )
        for _ in range(2)
    ]
    for engine in engines:
        assert engine.fleet is not None
        assert engine.fleet.bus.subscribed.wait(HANG)
    return engines


def test_the_fleets_counts_are_its_streams_facts_exported(
    fleet_server: RedisServer, clock: FakeClock
) -> None:
    registry = CollectorRegistry()
    engines = _engines(fleet_server.url, registry, clock)
    first, second = engines
    try:
        fns = []
        for engine in engines:

            @failover.failover(NAME, engine=engine, single_flight="fleet")
            def rates(base: str) -> int:
                return 1

            fns.append(rates)

        @failover.failover("fleet.observed.async", engine=first, single_flight="fleet")
        async def quotes(base: str) -> int:
            return 2

        async def twice() -> int:
            try:
                return await quotes("EUR")
            finally:
                assert first.fleet is not None
                await first.fleet.aclose()

        assert first.fleet is not None
        assert second.fleet is not None
        second.fleet.backplane.applied.clear()
        assert fns[0]("EUR") == 1  # a flight led, its landing and its write announced
        assert asyncio.run(twice()) == 2
        assert first.flush(HANG)
        assert first.fleet.sync()  # the round that publishes them
        assert second.fleet.backplane.applied.wait(HANG)  # the write heard by the other
        schedulers = [e.start_cleanup(every="1h") for e in engines]
        for s in schedulers:
            s.stop(HANG)
        found = samples(registry)
        assert value(registry, "failover_fleet_flights_total", name=NAME, result="led") == 1
        flights = ("failover_fleet_flights_total", "fleet.observed.async")
        assert value(registry, flights[0], name=flights[1], result="led") == 1
        sent = value(registry, "failover_fleet_messages_total", direction="sent")
        assert sent == first.fleet.bus.sent + second.fleet.bus.sent >= 1
        received = value(registry, "failover_fleet_messages_total", direction="received")
        assert received == first.fleet.bus.received + second.fleet.bus.received >= 1
        assert value(registry, "failover_cleanups_total", result="ran") == 1  # one for the fleet
        assert value(registry, "failover_cleanups_total", result="skipped") == 1
        assert ("failover_fleet_resyncs_total", ()) in found  # none yet: 0, exported
        assert value(registry, "failover_fleet_resyncs_total") == 0
    finally:
        for engine in engines:
            engine.close()


def test_an_outage_is_told_once_and_its_observers_show_log_and_count_it(
    fleet_server: RedisServer, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    """The fleet stopped: one fact (and one log line) for the outage however many rounds and
    flights fail, one line for its first per-process flight, health and ``failover_store_up``
    down from the fact; back: one fact, one line with the outage's counts, the backplane's
    resync told, counted and logged."""
    registry = CollectorRegistry()
    engine = Failover(
        fleet=f"{fleet_server.url}?prefix={unique_prefix()}",
        clock=clock,
        metrics=registry,
        store_timeout=0.25,
    )
    facts = Facts()
    events = engine.events
    try:
        fleet = engine.fleet
        assert fleet is not None
        fleet.bus.heartbeat = 0.2  # a silent backplane noticed within 0.2 + 2 x 0.25 s
        assert fleet.bus.subscribed.wait(HANG)
        # A test observer of its own beside the engine's: the same facts, in order.
        engine.events = type(events)([*events.observers, facts])
        fleet.observe(engine.events)

        @failover.failover(NAME, engine=engine, single_flight="fleet")
        def rates(base: str) -> int:
            return 1

        assert rates("EUR") == 1
        assert value(registry, "failover_store_up", store="fleet") == 1
        caplog.set_level(logging.WARNING, logger="failover.fleet")
        assert fleet_server.process is not None
        with stopped([fleet_server.process.pid]):
            assert not fleet.sync()
            assert not fleet.sync()
            assert facts.down.is_set()
            assert value(registry, "failover_store_up", store="fleet") == 0
            assert engine.health().stores["fleet"].status == "down"
            assert [rates("EUR") for _ in range(3)] == [1, 1, 1]  # per process
            assert fleet.bus.lost.wait(HANG)  # the backplane's outage noticed
        fleet.bus.subscribed.clear()
        assert any(fleet.sync() for _ in range(5))  # a round that gets through
        assert facts.up.is_set()
        assert fleet.bus.subscribed.wait(HANG)  # subscribed again: the resync told before
        states = [f for f in facts.seen if f[0] == "state"]
        assert [s[1] for s in states] == [False, True]  # one fact each way
        assert states[0][2:4] == ("sync", "TimeoutError")
        assert states[1][4] >= 2  # the failed operations of the outage
        assert [f for f in facts.seen if f[0] == "flight"] == [
            ("flight", NAME, "led"),
            ("flight", NAME, "local"),
            ("flight", NAME, "local"),
            ("flight", NAME, "local"),
        ]
        assert value(registry, "failover_store_up", store="fleet") == 1
        assert engine.health().stores["fleet"].status == "up"
        assert value(registry, "failover_fleet_flights_total", name=NAME, result="local") == 3
        assert value(registry, "failover_fleet_resyncs_total") >= 1
        lines = [r.getMessage() for r in caplog.records if r.name == "failover.fleet"]
        assert len([m for m in lines if "unreachable" in m]) == 1
        assert len([m for m in lines if "flies per process" in m]) == 1
        back = [m for m in lines if "answers again" in m]
        assert len(back) == 1
        assert "(3 flights flew per process meanwhile)" in back[0]
        assert len([m for m in lines if "the backplane is back" in m]) >= 1
    finally:
        engine.close()


def test_a_fleet_out_before_its_engine_observes_it_is_told_at_once(clock: FakeClock) -> None:
    """A fleet that never answered (nothing listens on its port): its outage, begun before the
    engine's stream was attached, is told when the stream is, and health says so."""
    engine = Failover(clock=clock, metrics=False, fleet="redis://127.0.0.1:1/0")
    try:
        assert engine.fleet is not None
        assert not engine.fleet.sync()
        facts = Facts()
        engine.fleet.observe(type(engine.events)([facts]))
        assert facts.down.is_set()
        assert engine.health().stores["fleet"].status == "down"
    finally:
        engine.close()


def test_fleet_flights_past_max_names_are_folded() -> None:
    """``failover_fleet_flights_total``'s ``name`` is held to the registry's cardinality guard."""
    from failover.metrics import PrometheusMetrics
    from failover.metrics.tally import OTHER

    registry = CollectorRegistry()
    metrics = PrometheusMetrics(registry, max_names=1)
    metrics.fleet.active = True
    metrics.fleet_flight("one", "led")
    metrics.fleet_flight("two", "led")
    metrics.fleet_flight("three", "waited")
    assert value(registry, "failover_fleet_flights_total", name="one", result="led") == 1
    assert value(registry, "failover_fleet_flights_total", name=OTHER, result="led") == 1
    assert value(registry, "failover_fleet_flights_total", name=OTHER, result="waited") == 1
