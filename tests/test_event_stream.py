"""Every fact on one stream: a breaker's state changes reach health, the metrics and
OpenTelemetry as the failover's `breaker_state` fact, not through a side channel."""

from __future__ import annotations

import logging

import pybreaker
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

import failover
from failover import Failover
from failover.events import FACTS, Observer
from failover.log_observer import LogObserver

from .conftest import FakeClock
from .test_otel import Telemetry


def gauge(registry: CollectorRegistry, name: str) -> float | None:
    text = generate_latest(registry).decode()
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "failover_circuit_state" and s.labels == {"name": name}:
                return s.value
    return None


def test_the_breaker_state_is_a_fact_of_the_stream() -> None:
    assert "breaker_state" in FACTS
    assert callable(Observer.breaker_state)


def test_breaker_changes_reach_health_metrics_and_otel(clock: FakeClock) -> None:
    registry, tel = CollectorRegistry(), Telemetry()
    eng = Failover(clock=clock, metrics=registry, opentelemetry=tel.otel)
    cb = pybreaker.CircuitBreaker(fail_max=1, reset_timeout=60)
    down: list[Exception] = []
    try:

        @failover.failover("stream.quotes", engine=eng, breaker=cb, policy="never_throw")
        def quote(sku: str) -> int:
            if down:
                raise down[0]
            return 5

        assert quote("a") == 5
        assert eng.health().failovers["stream.quotes"].breaker == "closed"
        assert gauge(registry, "stream.quotes") == 0
        down.append(ConnectionError("down"))
        quote("a")  # trips the breaker
        assert eng.health().failovers["stream.quotes"].breaker == "open"
        assert gauge(registry, "stream.quotes") == 2
        cb.close()  # outside any call: still a fact of the failover's stream
        assert eng.health().failovers["stream.quotes"].breaker == "closed"
        down.clear()
        quote("a")
        spans = [s for s in tel.spans.get_finished_spans() if s.name == "failover.call"]
        states = [dict(s.attributes or {}).get("failover.breaker.state") for s in spans]
        assert states == ["closed", "open", "closed"]
    finally:
        eng.close()


def test_the_logs_observe_live_calls_only_while_a_failover_is_not_up(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    """The success path does not pay for the logs while all is well: the stream's ``live``
    goes to the logs observer only while callers are not answered live (or a summary is
    owed), and the recovery is still logged when it comes."""
    caplog.set_level(logging.WARNING, "failover")
    eng = Failover(clock=clock, metrics=False)
    down: list[Exception] = []
    try:

        @failover.failover("stream.rates", engine=eng)
        def rate(ccy: str) -> int:
            if down:
                raise down[0]
            return 1

        rate("EUR")
        events = rate._failover_state.runtime().events  # type: ignore[attr-defined]
        stats = next(o for o in events.observers if not isinstance(o, LogObserver))

        def live_observers() -> set[type]:
            bound = events.live
            owner = getattr(bound, "__self__", None)
            if owner is not None:  # one observer, called directly
                return {type(owner)}
            cells = [c.cell_contents for c in bound.__closure__ or ()]
            return {type(getattr(m, "__self__", None)) for m in cells}

        assert live_observers() == {type(stats)}  # up: the logs are not called
        clock.advance(120)  # a quiet spell
        down.append(ConnectionError("refused"))
        assert rate("EUR") == 1  # stale
        assert LogObserver in live_observers()  # not up: the logs watch for the recovery
        down.clear()
        clock.advance(1)
        assert rate("EUR") == 1  # live again
        assert "answers again" in caplog.text
        assert live_observers() == {type(stats)}
    finally:
        eng.close()
