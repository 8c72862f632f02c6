"""On call: logs, health, Prometheus and OpenTelemetry name the right thing (issue 28, item 6).

An outage after a quiet spell is logged at its first call with the upstream's own exception type;
flapping within an interval is one summary line with counts; a guard's refusal is that guard's
(``failover_refused_total{name,guard}``, ``FailoverHealth.refused``, a ``failover.guard`` span
attribute), never "the upstream fails", and ``last_failure`` stays the upstream's own exception.
Real pybreaker, real bulkhead and soft timeout, real ``CollectorRegistry``, the OTel SDK's
in-memory exporter; the fake clock moves time.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

import failover
from failover import Failover
from tests.conftest import FakeClock
from tests.test_otel import Telemetry

WAIT = 5.0  # hang guard


class ConnectError(ConnectionError):
    """The upstream's own exception, as httpx names it."""


class Flaky:
    """An upstream that raises `ConnectError` while ``down``."""

    def __init__(self) -> None:
        self.down = False

    def __call__(self, x: int) -> int:
        if self.down:
            raise ConnectError("connection refused")
        return x


def lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The warnings of the failovers' state and refusal logs, since the last clear."""
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "failover.health" and r.levelno == logging.WARNING
    ]


@pytest.fixture
def eng(clock: FakeClock) -> Iterator[Failover]:
    engine = Failover(clock=clock, metrics=False, breaker_defaults={"fail_max": 1})
    yield engine
    engine.close()


# -- an outage's start ---------------------------------------------------------------------------


def test_an_outage_after_a_quiet_spell_is_logged_at_its_first_call(
    eng: Failover, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    up = Flaky()

    @failover.failover("orders", engine=eng)
    def get(x: int) -> int:
        return up(x)

    with caplog.at_level(logging.INFO, "failover"):
        assert get(1) == 1
        up.down = True
        get(1)  # a blip: logged (the first change)
        up.down = False
        clock.advance(2)
        assert get(1) == 1  # back within the interval: told later, in a summary
        clock.advance(60)
        assert get(1) == 1  # the summary line
        caplog.clear()
        # A quiet spell (no change for an interval), then an outage 2 s after the last line:
        clock.advance(2)
        up.down = True
        get(1)
        (line,) = lines(caplog)  # logged at its first call, not a minute later
        assert "'orders'" in line
        assert "the upstream fails (ConnectError)" in line
        with caplog.at_level(logging.DEBUG, "failover.health"):
            get(1)  # the outage's calls: their tracebacks at debug, no warning
        (debug,) = [r for r in caplog.records if r.levelno == logging.DEBUG]
        assert debug.exc_info is not None
        assert debug.exc_info[0] is ConnectError
        caplog.clear()
        clock.advance(15)
        up.down = False
        assert get(1) == 1  # a clean outage's end: logged when it happens too
        (end,) = lines(caplog)
    assert "'orders': the upstream answers again" in end


async def test_an_async_outage_after_a_quiet_spell_is_logged_at_its_first_call(
    eng: Failover, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    up = Flaky()

    @failover.failover("aorders", engine=eng)
    async def get(x: int) -> int:
        return up(x)

    with caplog.at_level(logging.INFO, "failover"):
        assert await get(1) == 1
        up.down = True
        await get(1)
        up.down = False
        clock.advance(2)
        assert await get(1) == 1
        clock.advance(60)
        assert await get(1) == 1
        caplog.clear()
        clock.advance(2)
        up.down = True
        await get(1)
        (line,) = lines(caplog)
    assert "'aorders'" in line
    assert "the upstream fails (ConnectError)" in line


def test_flapping_within_an_interval_is_one_summary_line_with_counts(
    eng: Failover, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    up = Flaky()

    @failover.failover("flaps", engine=eng)
    def get(x: int) -> int:
        return up(x)

    with caplog.at_level(logging.INFO, "failover"):
        get(1)
        up.down = True
        get(1)  # the first change: logged when it happens
        (first,) = lines(caplog)
        assert "the upstream fails (ConnectError)" in first
        caplog.clear()
        clock.advance(1)
        up.down = False
        get(1)  # its end, at once: one failure and its recovery are not flapping
        (back,) = lines(caplog)
        assert "the upstream answers again" in back
        caplog.clear()
        for i in range(9):  # nine more changes within the interval: nothing yet
            clock.advance(1)
            up.down = i % 2 == 0
            get(1)
        assert lines(caplog) == []
        clock.advance(60)
        get(1)  # still failing: the interval is over, the summary is due
        get(1)
        (summary,) = lines(caplog)
    assert "'flaps'" in summary
    assert "9 state changes since the last such line" in summary
    assert "failing 5 times: ConnectError x5" in summary
    assert "answering again 4 times" in summary
    assert "serving stored values now" in summary


# -- a guard's refusal is that guard's ----------------------------------------------------------


def test_a_full_bulkhead_is_a_refusal_never_an_upstream_failure(
    eng: Failover, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    up = Flaky()
    entered, release = threading.Event(), threading.Event()

    @failover.failover("narrow", engine=eng, max_concurrency=1)
    def get(x: int, hold: bool = False) -> int:
        if hold:
            entered.set()
            assert release.wait(WAIT)
        return up(x)

    assert get(1) == 1
    up.down = True
    get(1)  # the upstream's own failure
    up.down = False
    assert get(1) == 1  # and it answers again
    with caplog.at_level(logging.INFO, "failover"):
        caplog.clear()
        worker = threading.Thread(target=get, args=(1, True))
        worker.start()
        try:
            assert entered.wait(WAIT)
            out = get.referential(1)  # no permit: served stale
            assert isinstance(out.cause, failover.BulkheadFull)
            get(1)
        finally:
            release.set()
            worker.join(WAIT)
        said = lines(caplog)
    assert not any("the upstream fails" in line for line in said), said
    (refusal,) = said  # once, not per call
    assert "'narrow': refused by its bulkhead" in refusal
    health = eng.health().failovers["narrow"]
    assert health.last_failure is not None
    assert health.last_failure.type == "ConnectError"  # the upstream's, not BulkheadFull
    assert health.refused == {"bulkhead": 2}
    assert eng.health().to_dict()["failovers"]["narrow"]["refused"] == {"bulkhead": 2}


async def test_a_full_bulkhead_refusing_tasks_is_never_an_upstream_failure(
    eng: Failover, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    entered, release = asyncio.Event(), asyncio.Event()

    @failover.failover("anarrow", engine=eng, max_concurrency=1)
    async def get(x: int, hold: bool = False) -> int:
        if hold:
            entered.set()
            await asyncio.wait_for(release.wait(), WAIT)
        return x

    assert await get(1) == 1
    with caplog.at_level(logging.INFO, "failover"):
        holder = asyncio.create_task(get(1, True))
        await asyncio.wait_for(entered.wait(), WAIT)
        out = await get.referential(1)
        assert isinstance(out.cause, failover.BulkheadFull)
        release.set()
        assert await asyncio.wait_for(holder, WAIT) == 1
        said = lines(caplog)
    assert not any("the upstream fails" in line for line in said), said
    (refusal,) = said
    assert "'anarrow': refused by its bulkhead" in refusal
    health = eng.health().failovers["anarrow"]
    assert health.last_failure is None  # the upstream never failed
    assert health.refused == {"bulkhead": 1}


def test_last_failure_stays_the_upstreams_while_an_open_breaker_refuses(
    eng: Failover, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    up = Flaky()

    @failover.failover("tripped", engine=eng, breaker=True)
    def get(x: int) -> int:
        return up(x)

    assert get(1) == 1
    with caplog.at_level(logging.INFO, "failover"):
        up.down = True
        get(1)  # ConnectError: the breaker opens (fail_max=1)
        clock.advance(5)
        for _ in range(3):
            out = get.referential(1)  # refused by the open breaker, served stale
            assert type(out.cause).__name__ == "CircuitBreakerError"
        said = lines(caplog)
    health = eng.health().failovers["tripped"]
    assert health.breaker == "open"
    assert health.last_failure is not None
    assert health.last_failure.type == "ConnectError"
    assert health.refused == {"breaker": 3}
    fails, refusal = said
    assert "the upstream fails (ConnectError)" in fails
    assert "'tripped': refused by its breaker" in refusal
    assert "CircuitBreakerError)" not in fails


# -- one family for every guard's refusals -------------------------------------------------------


def _refusals(clock: FakeClock, engine: Failover) -> None:
    """Two bulkhead refusals, two open-breaker refusals and one soft timeout on ``engine``."""
    entered, release = threading.Event(), threading.Event()

    @failover.failover("full", engine=engine, max_concurrency=1, policy="never_throw")
    def full(x: int, hold: bool = False) -> int:
        if hold:
            entered.set()
            assert release.wait(WAIT)
        return x

    worker = threading.Thread(target=full, args=(1, True))
    worker.start()
    try:
        assert entered.wait(WAIT)
        full(1)
        full(1)
    finally:
        release.set()
        worker.join(WAIT)

    up = Flaky()

    @failover.failover("open", engine=engine, breaker=True)
    def tripped(x: int) -> int:
        return up(x)

    tripped(1)
    up.down = True
    tripped(1)  # the upstream's failure opens it: not a refusal
    tripped(1)
    tripped(1)

    slow_release = threading.Event()

    @failover.failover("slow", engine=engine, timeout=0.05, policy="never_throw")
    def slow(x: int) -> int:
        assert slow_release.wait(WAIT)
        return x

    try:
        out = slow.referential(1)
        assert isinstance(out.cause, failover.SoftTimeoutError)
    finally:
        slow_release.set()
    assert engine.refreshes.wait(WAIT)


def test_failover_refused_total_counts_each_refusal_once_per_guard(clock: FakeClock) -> None:
    registry = CollectorRegistry()
    engine = Failover(clock=clock, metrics=registry, breaker_defaults={"fail_max": 1})
    try:
        _refusals(clock, engine)
        text = generate_latest(registry).decode()
    finally:
        engine.close()
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name in ("failover_refused_total", "failover_bulkhead_rejected_total")
    }
    assert samples == {
        ("failover_refused_total", (("guard", "bulkhead"), ("name", "full"))): 2,
        ("failover_refused_total", (("guard", "breaker"), ("name", "open"))): 2,
        ("failover_refused_total", (("guard", "timeout"), ("name", "slow"))): 1,
        # Kept for dashboards: the bulkhead's refusals, by pool, from the same count.
        ("failover_bulkhead_rejected_total", (("name", "full"), ("pool", "full"))): 2,
    }
    families = {f.name: f.type for f in text_string_to_metric_families(text)}
    assert families["failover_refused"] == "counter"
    # The refused calls are not upstream errors.
    assert "BulkheadFull" not in text
    assert "CircuitBreakerError" not in text


def test_opentelemetry_shows_each_refusal_with_its_guard(clock: FakeClock) -> None:
    tel = Telemetry()
    engine = Failover(
        clock=clock, metrics=False, opentelemetry=tel.otel, breaker_defaults={"fail_max": 1}
    )
    try:
        _refusals(clock, engine)
    finally:
        engine.close()
    spans = [s for s in tel.spans.get_finished_spans() if s.name == "failover.call"]
    refused = [
        (
            (s.attributes or {})["failover.name"],
            (s.attributes or {})["failover.guard"],
            [dict(e.attributes or {}).get("failover.guard") for e in s.events],
        )
        for s in spans
        if "failover.guard" in (s.attributes or {})
    ]
    assert sorted(refused) == [
        ("full", "bulkhead", ["bulkhead"]),
        ("full", "bulkhead", ["bulkhead"]),
        ("open", "breaker", ["breaker"]),
        ("open", "breaker", ["breaker"]),
        ("slow", "timeout", ["timeout"]),
    ]
    points = {
        (dict(k)["failover.name"], dict(k)["failover.guard"]): p.value
        for k, p in tel.points("failover.refused").items()
    }
    assert points == {("full", "bulkhead"): 2, ("open", "breaker"): 2, ("slow", "timeout"): 1}
