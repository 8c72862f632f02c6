"""The error-rate breaker (issue 31): ``breaker_defaults={"error_rate": ..., "min_calls": ...,
"period": ...}`` opens when at least ``min_calls`` calls in the last ``period`` seconds failed at
that rate or more; ``fail_max`` keeps its failures-in-a-row meaning. The state stays pybreaker's:
its listeners hear the transitions, its storages (``CircuitRedisStorage``, the engine's fleet)
share them. The window runs on the engine's (fake) clock."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pybreaker
import pytest

import failover
from failover import ConfigurationError, Failover

from . import redis_server
from .conftest import FakeClock

HANG = 10.0  # seconds a test waits for another thread before it fails


def _engine(clock: FakeClock, **breaker: Any) -> Failover:
    defaults = {"error_rate": 0.5, "min_calls": 4, "period": 10, "reset_timeout": 600, **breaker}
    return Failover(clock=clock, metrics=False, breaker_defaults=defaults)


class Upstream:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, fails: bool) -> str:
        self.calls += 1
        if fails:
            raise ConnectionError("upstream down")
        return "ok"


def _causes(fn: Any, outcomes: str) -> list[str]:
    """Call ``fn`` once per letter: ``f`` fails, ``s`` succeeds; each call's cause."""
    return [type(fn.referential(o == "f").cause).__name__ for o in outcomes]


def test_it_opens_at_the_rate_once_enough_calls_were_made(clock: FakeClock) -> None:
    engine = _engine(clock)
    up = Upstream()
    fn = failover.failover("rated", engine=engine, breaker=True, policy="never_throw")(up)
    assert fn.definition.execution == "breaker(error_rate 50% of >= 4 calls in 10s, reset 600s)"
    # 2 failures of 3 calls: over the rate, under min_calls.
    assert _causes(fn, "fsf") == ["ConnectionError", "NoneType", "ConnectionError"]
    assert engine.breaker(fn.definition).current_state == pybreaker.STATE_CLOSED
    assert _causes(fn, "s") == ["NoneType"]  # 4 calls, 2 failed: the rate, but a success
    assert _causes(fn, "f") == ["ConnectionError"]  # 5 calls, 3 failed: opens
    assert engine.breaker(fn.definition).current_state == pybreaker.STATE_OPEN
    calls = up.calls
    assert _causes(fn, "s") == ["CircuitBreakerError"]
    assert up.calls == calls  # open: the upstream is not called
    engine.close()


def test_calls_older_than_the_period_leave_the_window(clock: FakeClock) -> None:
    engine = _engine(clock)
    fn = failover.failover("window", engine=engine, breaker=True, policy="never_throw")(Upstream())
    _causes(fn, "fff")
    clock.advance(10)  # those three are out of the window
    assert _causes(fn, "sss") == ["NoneType"] * 3
    assert _causes(fn, "f") == ["ConnectionError"]  # 1 of 4: under the rate
    assert engine.breaker(fn.definition).current_state == pybreaker.STATE_CLOSED
    clock.advance(5)
    _causes(fn, "f")  # 2 of 5 in the last 10 s
    assert engine.breaker(fn.definition).current_state == pybreaker.STATE_CLOSED
    _causes(fn, "f")  # 3 of 6: opens
    assert engine.breaker(fn.definition).current_state == pybreaker.STATE_OPEN
    engine.close()


def test_async_calls_count_alike(clock: FakeClock) -> None:
    engine = _engine(clock)
    up = Upstream()

    @failover.failover("arated", engine=engine, breaker=True, policy="never_throw")
    async def fn(fails: bool) -> str:
        return up(fails)

    async def scenario() -> list[str]:
        return [type((await fn.referential(f)).cause).__name__ for f in (1, 1, 0, 1, 0)]

    assert asyncio.run(scenario()) == ["ConnectionError"] * 2 + ["NoneType"] + [
        "ConnectionError",
        "CircuitBreakerError",
    ]
    engine.close()


def test_fail_max_keeps_its_failures_in_a_row_meaning(clock: FakeClock) -> None:
    engine = _engine(clock, error_rate=0.9, min_calls=100, fail_max=3)
    fn = failover.failover("both", engine=engine, breaker=True, policy="never_throw")(Upstream())
    assert "fail_max 3" in fn.definition.execution
    assert _causes(fn, "ffff") == ["ConnectionError"] * 3 + ["CircuitBreakerError"]
    engine.close()
    alone = Failover(clock=clock, metrics=False, breaker_defaults={"fail_max": 2})
    fn = failover.failover("alone", engine=alone, breaker=True, policy="never_throw")(Upstream())
    assert _causes(fn, "sfsffs") == [
        "NoneType",
        "ConnectionError",
        "NoneType",
        "ConnectionError",
        "ConnectionError",  # the second in a row opens it
        "CircuitBreakerError",
    ]
    alone.close()


def test_listeners_hear_it_and_it_starts_again_once_closed(clock: FakeClock) -> None:
    engine = _engine(clock, reset_timeout=0)
    fn = failover.failover("heard", engine=engine, breaker=True, policy="never_throw")(Upstream())
    heard: list[str] = []

    class Heard(pybreaker.CircuitBreakerListener):
        def state_change(self, cb: Any, old_state: Any, new_state: Any) -> None:
            heard.append(new_state.name)

    engine.breaker(fn.definition).add_listener(Heard())
    _causes(fn, "ffff")
    assert heard == [pybreaker.STATE_OPEN]
    assert _causes(fn, "s") == ["NoneType"]  # reset 0: the trial, which closes it
    assert heard == [pybreaker.STATE_OPEN, pybreaker.STATE_HALF_OPEN, pybreaker.STATE_CLOSED]
    # The window started again when it closed: three failures are under min_calls.
    assert _causes(fn, "fff") == ["ConnectionError"] * 3
    engine.close()


def test_an_open_state_is_shared_through_a_pybreaker_storage(clock: FakeClock) -> None:
    """Two engines (as two processes) share the breaker's state in redis-server through
    pybreaker's own `CircuitRedisStorage`: a trip by the error rate in one keeps the other off
    the upstream."""
    client = redis_server.server().client()
    namespace = redis_server.unique_prefix()

    def engine() -> Failover:
        return _engine(
            clock,
            state_storage=lambda name: pybreaker.CircuitRedisStorage(
                pybreaker.STATE_CLOSED, client, namespace=f"{namespace}:{name}"
            ),
        )

    here, there = engine(), engine()
    failing, answering = Upstream(), Upstream()
    tripper = failover.failover("shared", engine=here, breaker=True, policy="never_throw")(failing)
    other = failover.failover("shared", engine=there, breaker=True, policy="never_throw")(answering)
    assert _causes(tripper, "ffff")[-1] == "ConnectionError"  # the fourth call opens it
    assert _causes(other, "s") == ["CircuitBreakerError"]
    assert answering.calls == 0
    here.close()
    there.close()
    client.close()


def test_the_fleets_breaker_state_carries_an_error_rate_trip(clock: FakeClock) -> None:
    url = f"{redis_server.server().url}?prefix={redis_server.unique_prefix()}"

    def engine() -> Failover:
        return Failover(
            clock=clock,
            metrics=False,
            fleet=url,
            store_timeout=0.5,
            breaker_defaults={"error_rate": 0.5, "min_calls": 4, "period": 10},
        )

    here, there = engine(), engine()
    try:
        tripper = failover.failover("fleet", engine=here, breaker=True, policy="never_throw")(
            Upstream()
        )
        other = failover.failover("fleet", engine=there, breaker=True, policy="never_throw")(
            Upstream()
        )
        assert _causes(other, "s") == ["NoneType"]
        opened = threading.Event()

        class Heard(pybreaker.CircuitBreakerListener):
            def state_change(self, cb: Any, old_state: Any, new_state: Any) -> None:
                if new_state.name == pybreaker.STATE_OPEN:
                    opened.set()

        there.breaker(other.definition).add_listener(Heard())
        _causes(tripper, "ffff")
        assert opened.wait(HANG)  # the other engine's fleet thread applied the trip
        assert _causes(other, "s") == ["CircuitBreakerError"]
    finally:
        here.close()
        there.close()


@pytest.mark.parametrize(
    ("defaults", "named"),
    [
        ({"error_rate": 0}, "error_rate"),
        ({"error_rate": 1.5}, "error_rate"),
        ({"error_rate": "5%"}, "error_rate"),
        ({"error_rate": True}, "error_rate"),
        ({"error_rate": 0.1, "min_calls": 0}, "min_calls"),
        ({"error_rate": 0.1, "min_calls": 2.5}, "min_calls"),
        ({"error_rate": 0.1, "period": 0}, "period"),
        ({"error_rate": 0.1, "period": "soon"}, "period"),
        ({"min_calls": 5}, "min_calls"),
        ({"period": 30}, "period"),
    ],
)
def test_bad_settings_fail_at_engine_construction(defaults: dict[str, Any], named: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        Failover(metrics=False, breaker_defaults=defaults)
    assert f"breaker_defaults[{named!r}]" in str(caught.value)


def test_the_period_reads_every_duration_spelling(clock: FakeClock) -> None:
    engine = Failover(
        clock=clock, metrics=False, breaker_defaults={"error_rate": 0.2, "period": "1m30s"}
    )
    fn = failover.failover("spelled", engine=engine, breaker=True)(lambda: 1)
    assert fn.definition.execution == "breaker(error_rate 20% of >= 10 calls in 90s, reset 60s)"
    engine.close()
