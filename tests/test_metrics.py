"""Metrics, read back from a real prometheus_client registry through its text exposition."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

import failover
from failover import Failover
from failover.metrics import PrometheusMetrics

from .conftest import BrokenStore, FakeClock, Upstream


def samples(registry: CollectorRegistry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = generate_latest(registry).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(registry: CollectorRegistry, metric: str, /, **labels: str) -> float:
    return samples(registry).get((metric, tuple(sorted(labels.items()))), 0.0)


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


def test_store_and_recover_outcomes(
    registry: CollectorRegistry, clock: FakeClock, upstream: Upstream
) -> None:
    eng = Failover(clock=clock, metrics=registry)

    @failover.failover("countries", engine=eng, policy="never_throw")
    def f(x: str) -> object:
        return upstream(x)

    f("a")
    f("b")
    clock.advance(90)
    upstream.fail()
    f("a")
    f("never-stored")
    assert value(registry, "failover_writes_total", name="countries", result="ok") == 2
    assert value(registry, "failover_recoveries_total", name="countries", outcome="recovered") == 1
    assert value(registry, "failover_recoveries_total", name="countries", outcome="not_recovered") == 1
    assert value(registry, "failover_stale_age_seconds_sum", name="countries") == 90
    assert value(registry, "failover_write_seconds_count", name="countries") == 2
    assert value(registry, "failover_recovery_seconds_count", name="countries") == 2


def test_store_and_recover_errors_are_counted(
    registry: CollectorRegistry, clock: FakeClock, upstream: Upstream
) -> None:
    eng = Failover(BrokenStore(), clock=clock, metrics=registry)

    @failover.failover("broken", engine=eng, policy="never_throw")
    def f(x: str) -> object:
        return upstream(x)

    assert f("a") == "a"
    upstream.fail()
    assert f("a") is None
    assert value(registry, "failover_writes_total", name="broken", result="error") == 1
    assert value(registry, "failover_recoveries_total", name="broken", outcome="error") == 1


def test_cardinality_guard_folds_names(registry: CollectorRegistry, clock: FakeClock) -> None:
    metrics = PrometheusMetrics(registry, max_names=2)
    eng = Failover(clock=clock, metrics=metrics)
    for i in range(4):
        fn = failover.failover(f"n{i}", engine=eng)(lambda: 1)
        fn()
    stored = {
        labels: v
        for (name, labels), v in samples(registry).items()
        if name == "failover_writes_total"
    }
    assert stored == {
        (("name", "n0"), ("result", "ok")): 1,
        (("name", "n1"), ("result", "ok")): 1,
        (("name", "__other__"), ("result", "ok")): 2,
    }


def test_metrics_never_raise_into_a_call(
    registry: CollectorRegistry, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    metrics = PrometheusMetrics(registry)
    metrics._names = None  # type: ignore[assignment]  # any update now fails inside the metric
    eng = Failover(clock=clock, metrics=metrics)
    fn = failover.failover("safe", engine=eng)(lambda: 7)
    assert fn() == 7


def test_engines_share_one_instance_per_registry(registry: CollectorRegistry) -> None:
    first = Failover(metrics=registry)
    second = Failover(metrics=registry)  # a registry refuses duplicate metrics: must not raise
    assert first.metrics is second.metrics
    failover.configure()
    failover.configure()  # the default registry, twice


def test_metrics_off_adds_no_layer() -> None:
    from failover.handlers import DefaultHandler

    assert type(Failover(metrics=False).handler) is DefaultHandler


def test_bad_metrics_setting() -> None:
    with pytest.raises(failover.ConfigurationError, match="metrics must be"):
        Failover(metrics="prometheus")


def test_custom_metrics_objects(clock: FakeClock) -> None:
    from failover.metrics import Metrics

    class OnlyStores(Metrics):
        def __init__(self) -> None:
            self.stored_names: list[str] = []

        def stored(self, name: str, ok: bool, seconds: float) -> None:
            self.stored_names.append(name)

    mine = OnlyStores()
    eng = Failover(clock=clock, metrics=mine)
    failover.failover("custom", engine=eng)(lambda: 1)()
    assert mine.stored_names == ["custom"]

    class Incomplete:
        def stored(self, name: str, ok: bool, seconds: float) -> None: ...

    with pytest.raises(failover.ConfigurationError, match="lacks recovered, partial"):
        Failover(metrics=Incomplete())


def test_a_failing_custom_metrics_object_never_breaks_a_call(
    clock: FakeClock, upstream: Upstream
) -> None:
    from failover.metrics import Metrics

    class Failing(Metrics):
        def stored(self, name: str, ok: bool, seconds: float) -> None:
            raise RuntimeError("metrics backend down")

        def recovered(
            self, name: str, outcome: str, seconds: float, stale_age: float | None = None
        ) -> None:
            raise RuntimeError("metrics backend down")

    eng = Failover(clock=clock, metrics=Failing())

    @failover.failover("failing-metrics", engine=eng)
    def f(x: str) -> object:
        return upstream(x)

    assert f("a") == "a"
    assert len(eng.raw_store.find_all("failing-metrics")) == 1  # stored, whatever the metric
    upstream.fail()
    assert f("a") == "a"  # the hit is served: a failing metric does not turn it into a miss
