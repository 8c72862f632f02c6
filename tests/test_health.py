"""engine.health(): statuses over the sliding window, from what the callers got."""

from __future__ import annotations

import logging

import pytest

import failover
from failover import ConfigurationError, Failover
from failover.dashboard import make_wsgi_app
from failover.health import WINDOW, HealthReport
from failover.recorder import FailoverStats

from .conftest import FakeClock, Upstream


def test_no_failover_is_idle(engine: Failover) -> None:
    report = engine.health()
    assert report.status == "idle"
    assert report.failovers == {}
    assert report.to_dict()["status"] == "idle"


def test_statuses_follow_what_the_callers_got(
    engine: Failover, clock: FakeClock, upstream: Upstream
) -> None:
    @failover.failover("countries", engine=engine, policy="never_throw")
    def countries(code: str) -> object:
        return upstream(code)

    @failover.failover("quiet", engine=engine)
    def quiet() -> int:
        return 1

    assert engine.health().failovers["countries"].status == "idle"  # registered, never called
    countries("FR")
    report = engine.health()
    assert report.status == "up"
    assert report.failovers["countries"].counts == {
        "live": 1,
        "recovered": 0,
        "not_recovered": 0,
        "fresh": 0,
    }
    assert report.failovers["quiet"].status == "idle"

    clock.advance(30)
    upstream.fail()
    assert countries("FR") == "FR"  # served stale
    health = engine.health().failovers["countries"]
    assert health.status == "degraded"
    assert health.stale_age == 30
    assert health.last_failure is not None
    assert health.last_failure.type == "ConnectionError"
    assert health.last_failure.at == clock.now

    assert countries("DE") is None  # never stored: nothing usable
    # One call that got nothing (an unknown id) is not an outage: degraded, not down.
    assert engine.health().status == "degraded"
    for _ in range(4):
        assert countries("DE") is None
    report = engine.health()  # 5 of 7 calls got nothing usable: at least 5, at least half
    assert report.status == "down"
    assert list(report.failovers) == ["countries", "quiet"]  # worst first
    assert report.failovers["countries"].counts == {
        "live": 1,
        "recovered": 1,
        "not_recovered": 5,
        "fresh": 0,
    }
    # The thresholds are settings of health(): stricter ones keep it degraded.
    assert engine.health(down_min=6).status == "degraded"
    assert engine.health(down_ratio=0.8).status == "degraded"
    assert engine.health(down_ratio=0.7, down_min=5).status == "down"

    # The window slides: a minute of live calls later, the failover is up again.
    upstream.recover()
    clock.advance(WINDOW)
    countries("FR")
    health = engine.health().failovers["countries"]
    assert health.status == "up"
    assert health.counts == {"live": 1, "recovered": 0, "not_recovered": 0, "fresh": 0}
    assert health.last_failure is not None  # still said, outside the window

    clock.advance(WINDOW)
    assert engine.health().failovers["countries"].status == "idle"


def test_counts_are_per_second_over_the_last_minute(engine: Failover, clock: FakeClock) -> None:
    fn = failover.failover("ticks", engine=engine)(lambda x: x)
    for i in range(2 * WINDOW):  # one call a second for two minutes
        fn(i)
        clock.advance(1)
    counts = engine.health().failovers["ticks"].counts
    assert counts["live"] == WINDOW - 1  # the calls of the last 59 s; this second has none yet
    stats = engine.registry.stats["ticks"]
    assert len(stats._ring) == 4 * WINDOW  # constant memory, however many calls


def test_a_clock_going_back_counts_in_its_own_second(engine: Failover, clock: FakeClock) -> None:
    fn = failover.failover("back", engine=engine)(lambda x: x)
    fn(1)
    clock.advance(-5)
    fn(2)
    clock.advance(5)
    assert engine.health().failovers["back"].counts["live"] == 2


def test_an_excluded_exception_is_the_upstreams_answer(engine: Failover) -> None:
    @failover.failover("lookup", engine=engine, exclude=KeyError)
    def lookup(code: str) -> str:
        raise KeyError(code)

    with pytest.raises(KeyError):
        lookup("XX")
    health = engine.health().failovers["lookup"]
    assert health.status == "up"
    assert health.counts["live"] == 1
    assert health.last_failure is None


async def test_async_calls_are_counted(engine: Failover, upstream: Upstream) -> None:
    @failover.failover("async", engine=engine, policy="never_throw")
    async def fetch(code: str) -> object:
        return upstream(code)

    await fetch("FR")
    upstream.fail()
    await fetch("FR")
    await fetch("DE")
    assert engine.health().failovers["async"].counts == {
        "live": 1,
        "recovered": 1,
        "not_recovered": 1,
        "fresh": 0,
    }


def test_an_open_breaker_is_degraded(clock: FakeClock, upstream: Upstream) -> None:
    engine = Failover(clock=clock, metrics=False, breaker_defaults={"fail_max": 2})

    @failover.failover("payments", engine=engine, breaker=True, policy="never_throw")
    def pay(x: str) -> object:
        return upstream(x)

    pay("a")
    assert engine.health().failovers["payments"].breaker == "closed"
    upstream.fail()
    pay("a")
    pay("a")  # the second failure opens the breaker
    clock.advance(WINDOW + 1)  # the stale calls leave the window; the breaker stays open
    health = engine.health().failovers["payments"]
    assert health.breaker == "open"
    assert health.status == "degraded"
    engine.close()


def test_the_report_serializes(engine: Failover, upstream: Upstream) -> None:
    fn = failover.failover("s", engine=engine, policy="never_throw")(upstream)
    fn(1)
    upstream.fail(TimeoutError("slow"))
    fn(1)
    data = engine.health().to_dict()
    assert data["status"] == "degraded"
    assert data["window_seconds"] == WINDOW
    entry = data["failovers"]["s"]
    assert entry["last_failure"]["type"] == "TimeoutError"
    assert entry["stale_age_seconds"] == 0
    assert HealthReport.of([]).status == "idle"


def test_state_changes_log_once_each_without_keys_or_values(
    engine: Failover, clock: FakeClock, upstream: Upstream, caplog: pytest.LogCaptureFixture
) -> None:
    @failover.failover("accounts", engine=engine, policy="never_throw")
    def account(owner: str) -> object:
        return upstream({"iban": f"FR76-{owner}"})

    with caplog.at_level(logging.INFO, logger="failover"):
        account("alice-secret")
        upstream.fail()
        clock.advance(120)
        for _ in range(5):
            account("alice-secret")  # served stale five times: one line
        clock.advance(61)  # a state is logged at most once a minute (failover.logs)
        account("bob-secret")  # nothing stored for bob: callers get the policy's answer
        upstream.recover()
        clock.advance(61)
        for _ in range(3):
            account("alice-secret")
    records = [r for r in caplog.records if r.name == "failover.health"]
    assert [r.levelno for r in records] == [logging.WARNING] * 3
    stale, down, back = (r.getMessage() for r in records)
    assert "'accounts'" in stale
    assert "ConnectionError" in stale
    assert "stale age 120s" in stale
    assert "nothing usable is stored" in down
    assert "answers again" in back
    assert "secret" not in caplog.text
    assert "FR76" not in caplog.text


def test_statistics_never_raise_into_a_call(clock: FakeClock) -> None:
    def broken_clock() -> object:
        raise OSError("no time")

    stats = FailoverStats("x", broken_clock)  # type: ignore[arg-type]
    stats.not_recovered(0.1, ValueError())  # logged once, dropped
    stats.live(None, 0.1)  # the clock failed on the success path: counted, outside the window
    assert stats.calls == [1, 0, 0, 0]


@pytest.mark.parametrize(
    ("setting", "value"),
    [
        ("down_ratio", 0),
        ("down_ratio", 1.5),
        ("down_ratio", True),
        ("down_min", 0),
        ("down_min", 2.5),
    ],
)
def test_health_thresholds_are_checked(engine: Failover, setting: str, value: object) -> None:
    with pytest.raises(ConfigurationError, match=f"Failover.health: {setting}"):
        engine.health(**{setting: value})  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match=f"make_wsgi_app: {setting}"):
        make_wsgi_app(engine, **{setting: value})  # type: ignore[arg-type]


def test_down_needs_half_the_calls_and_at_least_five(engine: Failover, upstream: Upstream) -> None:
    @failover.failover("mostly", engine=engine, policy="never_throw")
    def mostly(x: str) -> str | None:
        return upstream(x)  # type: ignore[return-value]

    for i in range(6):
        mostly(f"ok{i}")
    upstream.fail()
    for i in range(5):
        mostly(f"unknown{i}")  # never stored
    assert engine.health().status == "degraded"  # 5 of 11: fewer than half
    mostly("unknown5")
    assert engine.health().status == "down"  # 6 of 12: half, and more than 5
