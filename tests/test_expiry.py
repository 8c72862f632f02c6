"""TTL parsing and expiry policies."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import failover
from failover import ConfigurationError, Failover, FixedTtl, ReferentialPayload
from failover.expiry import parse_ttl

from .conftest import FakeClock, Upstream

UNITS = {"w": timedelta(weeks=1), "d": timedelta(days=1), "h": timedelta(hours=1)}
UNITS |= {"m": timedelta(minutes=1), "s": timedelta(seconds=1), "ms": timedelta(milliseconds=1)}


@given(st.lists(st.integers(0, 10_000), min_size=6, max_size=6), st.sampled_from(["", " "]))
def test_compound_durations_add_up(counts: list[int], sep: str) -> None:
    parts = [(n, unit) for n, unit in zip(counts, UNITS, strict=True) if n]
    text = sep.join(f"{n}{unit}" for n, unit in parts)
    expected = sum((n * UNITS[unit] for n, unit in parts), timedelta())
    if timedelta(0) < expected <= timedelta(days=36_500):
        assert parse_ttl(text) == expected
    else:
        with pytest.raises(ConfigurationError):
            parse_ttl(text)


@pytest.mark.parametrize("ttl", ["3000000d", "36501d", 1e12, timedelta(days=40_000)])
def test_a_ttl_past_a_century_is_refused_before_any_expiry_overflows(ttl: object) -> None:
    with pytest.raises(ConfigurationError, match=r"failover 'long': ttl must be at most a century"):

        @failover.failover("long", ttl=ttl)  # type: ignore[call-overload]
        def f() -> None: ...

    assert parse_ttl("36500d") == timedelta(days=36_500)


@pytest.mark.parametrize(
    ("setting", "forever"),
    [
        ("ttl", timedelta.max),
        ("ttl", timedelta.max - timedelta(milliseconds=1)),  # FusionCache's "infinite"
        ("fresh_for", timedelta.max),
        ("timeout", 1e300),
    ],
)
def test_forever_is_refused_with_the_cap_and_how_to_write_it(setting: str, forever: Any) -> None:
    with pytest.raises(ConfigurationError) as refused:

        @failover.failover("forever", **{setting: forever})  # type: ignore[call-overload]
        def f() -> None: ...

    message = str(refused.value)
    assert f"failover 'forever': {setting}" in message
    assert "at most a century (36500d)" in message
    assert "for 'forever' (timedelta.max elsewhere), write '36500d'" in message

    cap = {setting: "36500d", "ttl": "36500d"}  # fresh_for may not outlast the ttl

    @failover.failover("forever", **cap)  # type: ignore[call-overload]
    def g() -> None: ...

    held = getattr(g.definition, setting)
    assert held in (timedelta(days=36_500), 36_500 * 86_400.0)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (timedelta(minutes=2), timedelta(minutes=2)),
        (90, timedelta(seconds=90)),
        (0.5, timedelta(milliseconds=500)),
        ("30s", timedelta(seconds=30)),
        ("15m", timedelta(minutes=15)),
        ("24h", timedelta(hours=24)),
        ("7d", timedelta(days=7)),
        ("1.5h", timedelta(minutes=90)),
        (" 2w ", timedelta(weeks=2)),
        ("250ms", timedelta(milliseconds=250)),
        ("1h30m", timedelta(minutes=90)),
        ("1d 12h", timedelta(hours=36)),
        ("2m30.5s", timedelta(seconds=150.5)),
        (" 1w2d3h4m5s6ms ", timedelta(7 + 2, hours=3, minutes=4, seconds=5, milliseconds=6)),
        ("1m5ms", timedelta(minutes=1, milliseconds=5)),
    ],
)
def test_parse_ttl(value: Any, expected: timedelta) -> None:
    assert parse_ttl(value) == expected


@pytest.mark.parametrize(
    "value",
    [0, -1, "0s", "-5m", "5 minutes", "m", "", True, None, [1], "30m1h", "1h1h", "1h-30m", "1h 30"],
)
def test_parse_ttl_rejects(value: Any) -> None:
    with pytest.raises(ConfigurationError, match="failover 'x'"):
        parse_ttl(value, "failover 'x'")


def test_fixed_ttl_boundary(engine: Failover, clock: FakeClock, upstream: Upstream) -> None:
    @failover.failover("boundary", ttl=10, engine=engine, policy="never_throw")
    def f(x: str) -> object:
        return upstream(x)

    f("a")
    upstream.fail()
    clock.advance(9.999)
    assert f("a") == "a"
    clock.advance(0.001)  # expire_on is exclusive: at expire_on the entry is gone
    assert f("a") is None


class BusinessHours:
    """A custom policy: entries live until the next 18:00, and never longer than a day."""

    def compute_expiry(self, definition: Any, now: datetime) -> datetime:
        cutoff = now.replace(hour=18, minute=0, second=0, microsecond=0)
        return cutoff if cutoff > now else cutoff + timedelta(days=1)

    def is_expired(self, payload: ReferentialPayload[Any], now: datetime) -> bool:
        return payload.expire_on is not None and now >= payload.expire_on


def test_custom_expiry_policy_overrides_ttl(
    engine: Failover, clock: FakeClock, upstream: Upstream
) -> None:
    @failover.failover("custom", ttl="1m", expiry=BusinessHours(), engine=engine)
    def f(x: str) -> object:
        return upstream(x)

    env = f.referential("a")
    assert env.expire_on == clock().replace(hour=18)
    upstream.fail()
    clock.advance(hours=17)
    assert f("a") == "a"  # far past the 1m ttl, still before 18:00
    clock.advance(hours=1)
    with pytest.raises(ConnectionError):
        f("a")


def test_definition_exposes_the_resolved_ttl(engine: Failover) -> None:
    @failover.failover("def", ttl="15m", engine=engine)
    def f() -> None: ...

    assert f.definition.ttl == timedelta(minutes=15)
    assert f.definition.expiry == FixedTtl(timedelta(minutes=15))


@pytest.mark.parametrize("value", [float("inf"), float("nan"), 1e400, 1e300, "99999999999999999d"])
def test_parse_ttl_rejects_what_is_not_a_finite_duration(value: Any) -> None:
    with pytest.raises(ConfigurationError, match="failover 'x'"):
        parse_ttl(value, "failover 'x'")
