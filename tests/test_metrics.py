"""Metrics, read back from a real prometheus_client registry through its text exposition."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

import failover
from failover import CleanupScheduler, Failover
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
    assert value(registry, "failover_writes_total", name="countries", result="written") == 2
    assert value(registry, "failover_recoveries_total", name="countries", outcome="recovered") == 1
    assert (
        value(registry, "failover_recoveries_total", name="countries", outcome="not_recovered") == 1
    )
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
    assert value(registry, "failover_writes_total", name="broken", result="failed") == 1
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
        (("name", "n0"), ("result", "written")): 1,
        (("name", "n1"), ("result", "written")): 1,
        (("name", "__other__"), ("result", "written")): 2,
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


# -- the user-impact metrics (read from each failover's call statistics) -------------------------


def test_calls_upstream_time_and_errors(
    registry: CollectorRegistry, clock: FakeClock, upstream: Upstream
) -> None:
    eng = Failover(clock=clock, metrics=registry)

    @failover.failover("countries", engine=eng, policy="never_throw", ttl="2h")
    def f(x: str) -> object:
        return upstream(x)

    f("a")
    f("b")
    upstream.fail()
    f("a")
    f("never-stored")
    upstream.fail(TimeoutError("slow"))
    f("a")
    calls = {
        o: value(registry, "failover_calls_total", name="countries", outcome=o)
        for o in ("live", "recovered", "not_recovered")
    }
    assert calls == {"live": 2, "recovered": 2, "not_recovered": 1}
    assert value(registry, "failover_upstream_seconds_count", name="countries", result="ok") == 2
    assert value(registry, "failover_upstream_seconds_count", name="countries", result="error") == 3
    assert (
        value(
            registry, "failover_upstream_seconds_bucket", name="countries", result="ok", le="+Inf"
        )
        == 2
    )
    errors = {
        e: value(registry, "failover_upstream_errors_total", name="countries", exception=e)
        for e in ("ConnectionError", "TimeoutError")
    }
    assert errors == {"ConnectionError": 2, "TimeoutError": 1}
    assert value(registry, "failover_ttl_seconds", name="countries") == 7200
    info = {
        labels: v for (metric, labels), v in samples(registry).items() if metric == "failover_info"
    }
    assert info == {
        (
            ("effective_name", "countries"),
            ("execution", "basic"),
            ("name", "countries"),
            ("policy", "never_throw"),
            ("store", "InMemoryStore"),
            ("ttl_seconds", "7200"),
        ): 1.0
    }


def test_exception_kinds_are_bounded_per_failover(
    registry: CollectorRegistry, clock: FakeClock
) -> None:
    from failover.recorder import MAX_ERROR_KINDS

    eng = Failover(clock=clock, metrics=registry)
    kinds = [type(f"Error{i}", (Exception,), {}) for i in range(MAX_ERROR_KINDS + 5)]

    @failover.failover("many", engine=eng, policy="never_throw")
    def f(i: int) -> None:
        raise kinds[i]()

    for i in range(len(kinds)):
        f(i)
    errors = {
        dict(labels)["exception"]: v
        for (metric, labels), v in samples(registry).items()
        if metric == "failover_upstream_errors_total"
    }
    assert len(errors) == MAX_ERROR_KINDS + 1
    assert errors["__other__"] == 5


def test_exception_kinds_counted_from_many_threads_lose_no_count(
    registry: CollectorRegistry, clock: FakeClock
) -> None:
    """A kind seen before is counted with no lock (one increment), a new one under the lock:
    threads failing at once with the same kinds lose no count of either."""
    import threading

    eng = Failover(clock=clock, metrics=registry)

    @failover.failover("threads", engine=eng, policy="never_throw")
    def f(i: int) -> None:
        raise (TimeoutError if i % 2 else ConnectionError)()

    start = threading.Barrier(4)

    def worker() -> None:
        start.wait()
        for i in range(400):
            f(i)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert (
        value(registry, "failover_upstream_errors_total", name="threads", exception="TimeoutError")
        == value(
            registry, "failover_upstream_errors_total", name="threads", exception="ConnectionError"
        )
        == 800
    )


def test_engines_on_one_registry_add_up(registry: CollectorRegistry, clock: FakeClock) -> None:
    engines = [Failover(clock=clock, metrics=registry) for _ in range(2)]  # both alive
    for eng in engines:
        failover.failover("shared", engine=eng)(lambda: 1)()
    assert value(registry, "failover_calls_total", name="shared", outcome="live") == 2
    for eng in engines:
        eng.close()


def test_breaker_bulkhead_and_hook_metrics(
    registry: CollectorRegistry, clock: FakeClock, upstream: Upstream
) -> None:
    import threading

    eng = Failover(clock=clock, metrics=registry, breaker_defaults={"fail_max": 1})

    @failover.failover("guarded", engine=eng, breaker=True, policy="never_throw")
    def guarded(x: str) -> object:
        return upstream(x)

    guarded("a")
    assert value(registry, "failover_circuit_state", name="guarded") == 0
    upstream.fail()
    guarded("a")
    assert value(registry, "failover_circuit_state", name="guarded") == 2
    assert eng.health().failovers["guarded"].breaker == "open"

    entered, release = threading.Event(), threading.Event()

    @failover.failover("narrow", engine=eng, max_concurrency=1, policy="never_throw")
    def narrow(wait: bool) -> int:
        if wait:
            entered.set()
            release.wait(5)
        return 1

    worker = threading.Thread(target=narrow, args=(True,))
    worker.start()
    assert entered.wait(5)
    assert narrow(False) is None  # no permit: refused, nothing stored
    release.set()
    worker.join(5)
    assert value(registry, "failover_bulkhead_rejected_total", name="narrow", pool="narrow") == 1
    # The refused call counts as a call the caller got nothing for; the upstream, never called,
    # gets no error and no time for it.
    assert value(registry, "failover_calls_total", name="narrow", outcome="not_recovered") == 1
    assert (
        value(registry, "failover_upstream_errors_total", name="narrow", exception="BulkheadFull")
        == 0
    )
    assert value(registry, "failover_upstream_seconds_count", name="narrow", result="error") == 0
    # A refusal is the bulkhead's, not the upstream's failure (issue 28: it was "BulkheadFull").
    assert eng.health().failovers["narrow"].last_failure is None
    assert eng.health().failovers["narrow"].refused == {"bulkhead": 1}
    assert value(registry, "failover_refused_total", name="narrow", guard="bulkhead") == 1

    eng.metrics.hook_failed("guarded")
    assert value(registry, "failover_hook_errors_total", name="guarded", hook="on_recovered") == 1
    eng.close()


def test_cleanup_and_async_writes_metrics(registry: CollectorRegistry, tmp_path: Path) -> None:
    eng = Failover(f"sqlite:///{tmp_path / 'm.db'}", metrics=registry)

    @failover.failover("stored", engine=eng, ttl=1)
    def one() -> int:
        return 1

    one()
    assert eng.flush(5)
    CleanupScheduler(eng, 3600, metrics=eng.metrics).run_once()
    assert value(registry, "failover_async_writes_queued") == 0
    assert value(registry, "failover_cleanup_seconds_count") == 1
    assert value(registry, "failover_cleanup_last_run_timestamp_seconds") > 0
    eng.close()


CONTRACT = {
    "failover_calls_total": "counter",
    "failover_upstream_seconds": "histogram",
    "failover_upstream_errors_total": "counter",
    "failover_info": "gauge",
    "failover_ttl_seconds": "gauge",
    "failover_writes_total": "counter",
    "failover_write_seconds": "histogram",
    "failover_recoveries_total": "counter",
    "failover_recoveries_partial_total": "counter",
    "failover_recovery_seconds": "histogram",
    "failover_stale_age_seconds": "histogram",
    "failover_circuit_state": "gauge",
    "failover_refused_total": "counter",
    "failover_bulkhead_rejected_total": "counter",
    "failover_bulkhead_permits": "gauge",
    "failover_bulkhead_permits_in_use": "gauge",
    "failover_bulkhead_waiting": "gauge",
    "failover_hook_errors_total": "counter",
    "failover_async_writes_queued": "gauge",
    "failover_async_writes_dropped_total": "counter",
    "failover_async_writes_failed_total": "counter",
    "failover_cleanup_removed_total": "counter",
    "failover_cleanup_seconds": "histogram",
    "failover_cleanup_last_run_timestamp_seconds": "gauge",
    "failover_cleanups_total": "counter",
    "failover_fleet_flights_total": "counter",
    "failover_fleet_messages_total": "counter",
    "failover_fleet_resyncs_total": "counter",
}


# The families an engine adds to its registry: its stores' and its control over entries'.
ENGINE_CONTRACT = {
    "failover_store_up": "gauge",
    "failover_store_errors_total": "counter",
    "failover_invalidations_total": "counter",
}


def test_every_family_of_the_table_is_exported(registry: CollectorRegistry) -> None:
    PrometheusMetrics.for_registry(registry)
    text = generate_latest(registry).decode()
    types = dict(line.split()[2:4] for line in text.splitlines() if line.startswith("# TYPE "))
    assert types == CONTRACT


def test_an_engine_adds_the_families_of_its_stores_and_entries(
    registry: CollectorRegistry, clock: FakeClock
) -> None:
    engine = Failover(clock=clock, metrics=registry)
    try:
        text = generate_latest(registry).decode()
    finally:
        engine.close()
    types = dict(line.split()[2:4] for line in text.splitlines() if line.startswith("# TYPE "))
    assert types == CONTRACT | ENGINE_CONTRACT


def test_an_idle_open_breaker_past_its_reset_timeout_reads_half_open(
    registry: CollectorRegistry, clock: FakeClock, upstream: Upstream
) -> None:
    eng = Failover(clock=clock, metrics=registry, breaker_defaults={"fail_max": 1})
    idle = Failover(
        clock=clock, metrics=registry, breaker_defaults={"fail_max": 1, "reset_timeout": 0}
    )

    @failover.failover("busy", engine=eng, breaker=True, policy="never_throw")
    def busy() -> object:
        return upstream("a")

    @failover.failover("idle", engine=idle, breaker=True, policy="never_throw")
    def quiet() -> object:
        return upstream("a")

    upstream.fail()
    busy()
    quiet()
    # No call since: the gauge is read at scrape time, so FailoverCircuitOpen does not fire for
    # a failover whose next call would be the trial.
    assert value(registry, "failover_circuit_state", name="busy") == 2
    assert value(registry, "failover_circuit_state", name="idle") == 1


def test_the_info_execution_label_reads_like_the_definition(
    registry: CollectorRegistry, clock: FakeClock
) -> None:
    engine = Failover(clock=clock, metrics=registry)

    @failover.failover(
        "guarded", engine=engine, breaker=True, max_concurrency=8, timeout="2s", ttl="1h"
    )
    def guarded() -> int:
        return 1

    guarded()
    (execution,) = (
        dict(labels)["execution"]
        for (metric, labels), _ in samples(registry).items()
        if metric == "failover_info"
    )
    assert execution == guarded.definition.execution
    assert execution == "bulkhead(8) > breaker(fail_max 5, reset 60s) > timeout(2s)"
    engine.close()


def test_a_tally_folds_its_quick_writes_into_the_counts_it_shows() -> None:
    from failover.metrics.tally import Tally

    tally = Tally()
    tally.stored(True, 0.001)  # within the first bucket: the two quick increments
    tally.stored(True, 0.2)
    tally.stored(False, 0.001)
    writes, seconds = tally.written()
    assert writes == [0, 2, 1, 0]  # queued, written, failed, superseded
    assert seconds.counts[0] == 2  # the quick write and the failed one
    assert [type(n) for n in (*writes, *seconds.counts)] == [int] * (4 + len(seconds.counts))
    assert seconds.counts[6] == 1  # 0.2 s: the (0.1, 0.25] bucket
    assert seconds.total == pytest.approx(0.202)
    assert tally.writes == [0, 1, 1, 0]  # what `written` shows is folded, not stored twice
