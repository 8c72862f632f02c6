"""Every fact on one stream: a breaker's state changes reach health, the metrics and
OpenTelemetry as the failover's `breaker_state` fact, not through a side channel."""

from __future__ import annotations

import pybreaker
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

import failover
from failover import Failover
from failover.events import FACTS, Observer

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
