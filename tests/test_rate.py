"""``rate=``: a token bucket per failover; a call over it is refused, recovers stale, and is
counted once as the ``rate`` guard's refusal (metrics, health, OpenTelemetry, logs)."""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

import failover
from failover import ConfigurationError, Failover, RateLimited
from failover.execution import ORDER
from failover.execution.rate import RateLimit

from .conftest import FakeClock
from .test_otel import Telemetry


def refusals(registry: CollectorRegistry, name: str, guard: str) -> float:
    text = generate_latest(registry).decode()
    return sum(
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "failover_refused_total" and s.labels == {"name": name, "guard": guard}
    )


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


@pytest.fixture
def eng(clock: FakeClock, registry: CollectorRegistry) -> Iterator[Failover]:
    engine = Failover(clock=clock, metrics=registry)
    yield engine
    engine.close()


class Upstream:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, code: str) -> dict[str, Any]:
        self.calls += 1
        return {"code": code, "n": self.calls}


def test_a_call_over_the_rate_is_refused_and_recovers_stale_counted_once(
    eng: Failover, clock: FakeClock, registry: CollectorRegistry
) -> None:
    upstream = Upstream()

    @failover.failover("fx", engine=eng, rate="2/s")
    def fx(code: str) -> dict[str, Any]:
        return upstream(code)

    assert fx.referential("EUR").up_to_date
    assert fx.referential("EUR").up_to_date
    over = fx.referential("EUR")
    assert not over.up_to_date
    assert over.payload["n"] == 2
    assert upstream.calls == 2  # the upstream was not called
    assert refusals(registry, "fx", "rate") == 1
    assert eng.health().failovers["fx"].refused == {"rate": 1}
    last = eng.health().failovers["fx"].last_failure
    assert last is None or "RateLimited" not in str(last)  # a refusal is not the upstream's


def test_the_bucket_refills_on_the_engines_time(eng: Failover, clock: FakeClock) -> None:
    upstream = Upstream()

    @failover.failover("fx", engine=eng, rate="2/s")
    def fx(code: str) -> dict[str, Any]:
        return upstream(code)

    fx("a")
    fx("a")
    assert not fx.referential("a").up_to_date
    clock.advance(0.5)  # one token back
    assert fx.referential("a").up_to_date
    assert not fx.referential("a").up_to_date
    clock.advance(10)  # never more than a full bucket
    assert [fx.referential("a").up_to_date for _ in range(3)] == [True, True, False]


def test_the_guard_on_its_own_reads_the_injected_time() -> None:
    now = [100.0]
    bucket = RateLimit("alone", 1, 2.0, time=lambda: now[0])
    assert bucket.admit() is None
    with pytest.raises(RateLimited) as caught:
        bucket.admit()
    assert caught.value.guard == "rate"
    assert "'alone'" in str(caught.value)
    assert failover.errors.refused_by(caught.value) == "rate"
    now[0] += 1.0  # half a token
    with pytest.raises(RateLimited):
        bucket.admit()
    now[0] += 1.0
    assert bucket.admit() is None
    now[0] -= 5  # a time going back adds no token
    with pytest.raises(RateLimited):
        bucket.admit()


async def test_async_calls_over_the_rate_recover_stale(
    eng: Failover, clock: FakeClock, registry: CollectorRegistry
) -> None:
    calls = 0

    @failover.failover("afx", engine=eng, rate="1/m")
    async def afx(code: str) -> dict[str, Any]:
        nonlocal calls
        calls += 1
        await asyncio.sleep(0)
        return {"code": code}

    assert (await afx.referential("EUR")).up_to_date
    assert not (await afx.referential("EUR")).up_to_date
    assert calls == 1
    assert eng.health().failovers["afx"].refused == {"rate": 1}
    clock.advance(60)
    assert (await afx.referential("EUR")).up_to_date
    assert refusals(registry, "afx", "rate") == 1


def test_nothing_stored_the_refusal_reaches_the_caller(eng: Failover) -> None:
    @failover.failover("cold", engine=eng, rate="1/h")
    def cold(code: str) -> str:
        return code

    assert cold("a") == "a"
    with pytest.raises(RateLimited):
        cold("b")  # the default policy: nothing stored for "b", the refusal is raised


def test_otel_sees_the_rate_refusal(clock: FakeClock) -> None:
    tel = Telemetry()
    eng = Failover(clock=clock, metrics=False, opentelemetry=tel.otel)
    try:

        @failover.failover("otel.fx", engine=eng, rate="1/s")
        def fx(code: str) -> str:
            return code

        fx("a")
        fx("a")
        points = tel.points("failover.refused")
        key = (("failover.guard", "rate"), ("failover.name", "otel.fx"))
        assert points[key].value == 1
    finally:
        eng.close()


def test_a_rate_refusal_is_logged_as_the_rate_guards(
    eng: Failover, caplog: pytest.LogCaptureFixture
) -> None:
    @failover.failover("logged", engine=eng, rate="1/s")
    def fx(code: str) -> str:
        return code

    fx("a")
    with caplog.at_level(logging.INFO, logger="failover"):
        fx("a")
    assert any("refused by its rate" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("bad", ["0/s", "abc", "-1/s", "10/0s", "1.5/s", "/s", "1/lots", 10])
def test_bad_rates_are_refused_at_decoration_naming_the_failover(eng: Failover, bad: Any) -> None:
    with pytest.raises(ConfigurationError, match=r"failover 'bad': rate= must be"):

        @failover.failover("bad", engine=eng, rate=bad)
        def f() -> int:
            return 1

    assert eng.definitions() == []


@pytest.mark.parametrize(
    ("rate", "shown"),
    [("100/s", "rate(100/s)"), ("10/m", "rate(10/60s)"), ("5/2s", "rate(5/2s)")],
)
def test_the_description_shows_the_rate_outermost(eng: Failover, rate: str, shown: str) -> None:
    @failover.failover("shown", engine=eng, rate=rate, max_concurrency=8, timeout="2s")
    def f() -> int:
        return 1

    assert f.definition.execution == f"{shown} > bulkhead(8) > timeout(2s)"


def test_the_docs_show_the_guards_one_order() -> None:
    docs = Path(__file__).parent.parent / "docs"
    order = " > ".join(kind.name for kind in ORDER)
    assert f"`{order}`" in (docs / "architecture.md").read_text()
    names = "|".join(kind.name for kind in ORDER)
    chain = re.compile(rf"`((?:{names})(?: > (?:{names}))+)`")
    written = {m for page in docs.glob("*.md") for m in chain.findall(page.read_text())}
    assert written == {order}
