"""OpenTelemetry: spans per upstream call and per recovery, OTel metrics, read back through the
SDK's in-memory exporter and reader (real SDK, fake clock)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pybreaker
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import failover
from failover.otel import OpenTelemetry
from tests.conftest import FakeClock


class Telemetry:
    def __init__(self) -> None:
        self.spans = InMemorySpanExporter()
        tracer = TracerProvider()
        tracer.add_span_processor(SimpleSpanProcessor(self.spans))
        self.reader = InMemoryMetricReader()
        self.otel = OpenTelemetry(tracer, MeterProvider(metric_readers=[self.reader]))

    def points(self, metric: str) -> dict[tuple[Any, ...], Any]:
        data = self.reader.get_metrics_data()
        out: dict[tuple[Any, ...], Any] = {}
        assert data is not None
        for rm in data.resource_metrics:
            for sm in rm.scope_metrics:
                for m in sm.metrics:
                    if m.name == metric:
                        for p in m.data.data_points:
                            out[tuple(sorted(p.attributes.items()))] = p
        return out


@pytest.fixture
def tel() -> Telemetry:
    return Telemetry()


@pytest.fixture
def otel_engine(clock: FakeClock, tel: Telemetry) -> Iterator[failover.Failover]:
    eng = failover.Failover(clock=clock, metrics=False, opentelemetry=tel.otel)
    yield eng
    eng.close()


def test_live_and_recovered_calls_make_spans_with_outcome_cause_and_stale_age(
    otel_engine: failover.Failover, clock: FakeClock, tel: Telemetry
) -> None:
    down: list[Exception] = []

    @failover.failover("prices", engine=otel_engine)
    def price(sku: str) -> int:
        if down:
            raise down[0]
        return 3

    assert price("a") == 3
    clock.advance(90)
    down.append(ConnectionError("down"))
    assert price("a") == 3

    calls = [s for s in tel.spans.get_finished_spans() if s.name == "failover.call"]
    assert [s.attributes["failover.outcome"] for s in calls] == ["live", "recovered"]  # type: ignore[index]  # attributes is set on finished spans
    recovered = calls[1].attributes
    assert recovered is not None
    assert recovered["failover.name"] == "prices"
    assert recovered["failover.cause"] == "ConnectionError"
    assert recovered["failover.stale_age_s"] == 90.0
    assert not calls[1].status.is_ok
    reads = [s for s in tel.spans.get_finished_spans() if s.name == "failover.recover"]
    assert len(reads) == 1
    assert reads[0].attributes == {
        "failover.name": "prices",
        "failover.outcome": "recovered",
        "failover.stale_age_s": 90.0,
    }

    counts = {k: p.value for k, p in tel.points("failover.calls").items()}
    assert counts == {
        (("failover.name", "prices"), ("failover.outcome", "live")): 1,
        (("failover.name", "prices"), ("failover.outcome", "recovered")): 1,
    }
    (age,) = tel.points("failover.stale.age").values()
    assert age.count == 1
    assert age.sum == 90.0
    (writes,) = tel.points("failover.store.writes").values()
    assert writes.value == 1


def test_breaker_state_is_an_attribute_and_a_refusal_is_an_event(
    otel_engine: failover.Failover, tel: Telemetry
) -> None:
    cb = pybreaker.CircuitBreaker(fail_max=1, reset_timeout=60)
    down: list[Exception] = []

    @failover.failover("quotes", engine=otel_engine, breaker=cb)
    def quote(sku: str) -> int:
        if down:
            raise down[0]
        return 5

    assert quote("a") == 5
    down.append(ConnectionError("down"))
    assert quote("a") == 5  # trips the breaker
    assert quote("a") == 5  # refused: the upstream is not called
    calls = [s for s in tel.spans.get_finished_spans() if s.name == "failover.call"]
    assert [dict(s.attributes or {}).get("failover.breaker.state") for s in calls] == [
        "closed",
        "open",
        "open",
    ]
    assert [[e.name for e in s.events] for s in calls] == [[], [], ["failover.guard_refused"]]
    assert (calls[2].attributes or {})["failover.cause"] == "CircuitBreakerError"


def test_not_recovered_and_raised_outcomes(otel_engine: failover.Failover, tel: Telemetry) -> None:
    @failover.failover("empty", engine=otel_engine)
    def empty(sku: str) -> int:
        raise ConnectionError("down")

    with pytest.raises(ConnectionError):
        empty("a")
    outcomes = [
        (s.name, (s.attributes or {})["failover.outcome"]) for s in tel.spans.get_finished_spans()
    ]
    assert ("failover.call", "not_recovered") in outcomes


def test_off_by_default_and_bad_values_are_configuration_errors(clock: FakeClock) -> None:
    eng = failover.Failover(clock=clock, metrics=False)
    assert eng.wiring.otel is None
    eng.close()
    with pytest.raises(failover.ConfigurationError, match="Failover: opentelemetry"):
        failover.Failover(clock=clock, metrics=False, opentelemetry="yes")
    eng = failover.Failover(clock=clock, metrics=False, opentelemetry=True)
    assert isinstance(eng.wiring.otel, OpenTelemetry)
    eng.close()


def test_fresh_answers_are_calls_without_an_upstream_duration(
    otel_engine: failover.Failover, clock: FakeClock, tel: Telemetry
) -> None:
    @failover.failover("rates", fresh_for="5m", engine=otel_engine)
    def rates(code: str) -> dict[str, float]:
        return {"rate": 1.1}

    for _ in range(3):
        rates("GBP")
    counts = {k: p.value for k, p in tel.points("failover.calls").items()}
    assert counts == {
        (("failover.name", "rates"), ("failover.outcome", "live")): 1,
        (("failover.name", "rates"), ("failover.outcome", "fresh")): 2,
    }
    (upstream,) = tel.points("failover.upstream.duration").values()
    assert upstream.count == 1  # the one call that reached the upstream
    outcomes = [s.attributes["failover.outcome"] for s in tel.spans.get_finished_spans()]
    assert outcomes == ["live", "fresh", "fresh"]
