"""Every fact on one stream: a breaker's state changes reach health, the metrics and
OpenTelemetry as the failover's `breaker_state` fact, not through a side channel."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import pybreaker
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

import failover
from failover import Failover
from failover.events import FACTS, Events, Observer
from failover.log_observer import LogObserver
from failover.stores import SqlStore

from .conftest import BrokenStore, FakeClock
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


class Trouble(Observer):
    """An observer of a call's own trouble: what it is told, nothing asked of the runtime."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, str]] = []

    def trouble(self, kind: str, error: BaseException, subject: str) -> None:
        self.seen.append((kind, type(error).__name__, subject))

    def hook_failed(self, error: Exception) -> None:
        self.seen.append(("hook", type(error).__name__, ""))


def observed(fn: Any) -> Trouble:
    """A `Trouble` added to the stream of ``fn``'s failover (made on its first call)."""
    rt = fn._failover_state.runtime()
    seen = Trouble()
    rt.events = Events([*rt.events.observers, seen])
    return seen


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
def test_a_calls_own_trouble_is_told_on_the_stream(
    clock: FakeClock, is_async: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """A failed write, a failed recovery read and a failing hook are facts of the stream
    (`Observer.trouble`, `Observer.hook_failed` with the error), which the logs observe."""
    caplog.set_level(logging.WARNING, "failover")
    eng = Failover(BrokenStore(), clock=clock, metrics=False, async_writes=False)
    down: list[Exception] = []

    def hook(ctx: Any, value: Any) -> Any:
        raise KeyError("hook bug")

    try:
        if is_async:

            @failover.failover("trouble.a", engine=eng, policy="never_throw", on_recovered=hook)
            async def fetch_a(sku: str) -> int:
                if down:
                    raise down[0]
                return 5

            def fetch(sku: str) -> Any:
                return asyncio.run(fetch_a(sku))

            fn: Any = fetch_a
        else:

            @failover.failover("trouble.s", engine=eng, policy="never_throw", on_recovered=hook)
            def fetch(sku: str) -> Any:
                if down:
                    raise down[0]
                return 5

            fn = fetch
        fetch("a")  # the stream is made on the first call
        seen = observed(fn)
        assert fetch("a") == 5  # the write fails: the caller gets its result
        down.append(ConnectionError("down"))
        assert fetch("a") is None  # the read fails: a miss; the hook raises
        assert seen.seen == [
            ("store", "OSError", ""),
            ("recover", "OSError", ""),
            ("hook", "KeyError", ""),
        ]
        text = caplog.text
        assert "storing the live result failed" in text
        assert "recovering failed; treated as a miss" in text
        assert "on_recovered raised" in text
    finally:
        eng.close()


def test_a_result_the_store_cannot_encode_is_told_once(tmp_path: Path, clock: FakeClock) -> None:
    store = SqlStore(f"sqlite:///{tmp_path / 'f.db'}")
    eng = Failover(store, clock=clock, metrics=False, async_writes=False)
    try:

        @failover.failover("trouble.opaque", engine=eng)
        def fetch() -> object:
            return 1 + 2j  # JSON holds no complex numbers

        fetch.peek()  # the runtime is made on first use
        seen = observed(fetch)
        assert fetch() == 1 + 2j
        assert fetch() == 1 + 2j  # not offered to the store again
        assert seen.seen == [("encode", "SerializationError", "builtins.complex")]
    finally:
        eng.close()
