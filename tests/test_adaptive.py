"""Durations the answer decides (issue 31): ``ttl=`` and ``fresh_for=`` as callables of the
result and the call's arguments, and ``ttl_jitter=``; per slice for scatter/gather."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest

import failover
from failover import ConfigurationError, Failover, ListSplitter

from .conftest import FakeClock
from .support_entries import unique


def max_age(result: dict[str, Any], code: str) -> float | None:
    """The answer's own max-age, as a ``Cache-Control`` header would give it."""
    age = result.get("max_age")
    return None if age is None else float(age)


def test_ttl_from_the_answer_sync(real: Failover, clock: FakeClock) -> None:
    answers = {"FR": {"max_age": 120}, "DE": {}}
    country = failover.failover(unique("adaptive"), engine=real, ttl=max_age)(
        lambda code: answers[code]
    )
    country("FR")
    country("DE")
    fr, de = country.peek("FR"), country.peek("DE")
    assert fr is not None
    assert de is not None
    assert fr.expire_on == clock() + timedelta(seconds=120)
    assert de.expire_on == clock() + timedelta(hours=1)  # None: the default ttl
    assert country.referential("FR").expire_on == clock() + timedelta(seconds=120)
    clock.advance(120)
    assert country.peek("FR") is None  # expired by its own ttl
    assert country.peek("DE") is not None


def test_ttl_from_the_answer_async(real: Failover, clock: FakeClock) -> None:
    @failover.failover(unique("aadaptive"), engine=real, ttl=lambda r, code: timedelta(minutes=r))
    async def minutes(code: str) -> int:
        return 5

    async def scenario() -> None:
        await minutes("FR")
        found = minutes.peek("FR")
        assert found is not None
        assert found.expire_on == clock() + timedelta(minutes=5)
        real.close()  # on the loop: its async store clients close with it

    asyncio.run(scenario())


def test_the_callable_gets_the_arguments_as_the_function_does(engine: Failover) -> None:
    seen: list[tuple[Any, ...]] = []

    def ttl(result: int, *args: Any, **kwargs: Any) -> str:
        seen.append((result, args, kwargs))
        return "1m"

    class Rates:
        @failover.failover("args", engine=engine, ttl=ttl)
        def rate(self, base: str, *, quote: str = "USD") -> int:
            return 7

    Rates().rate("EUR", quote="GBP")
    assert seen == [(7, ("EUR",), {"quote": "GBP"})]  # without self


def test_fresh_for_from_the_answer(real: Failover, clock: FakeClock) -> None:
    calls: list[str] = []

    def fetch(code: str) -> dict[str, Any]:
        calls.append(code)
        return {"fresh": 60 if code == "FR" else None}

    country = failover.failover(unique("fresh"), engine=real, fresh_for=lambda r, code: r["fresh"])(
        fetch
    )
    country("FR")
    country("DE")
    clock.advance(30)
    assert country.referential("FR").up_to_date  # fresh for 60 s: from the store
    country("DE")  # None: never fresh, the upstream is called
    assert calls == ["FR", "DE", "DE"]
    clock.advance(30)
    country("FR")  # 60 s old: no longer fresh
    assert calls == ["FR", "DE", "DE", "FR"]


def test_fresh_for_from_the_answer_async(engine: Failover, clock: FakeClock) -> None:
    calls: list[str] = []

    @failover.failover("afresh", engine=engine, fresh_for=lambda r, code: "1m")
    async def country(code: str) -> str:
        calls.append(code)
        return code

    async def scenario() -> None:
        await country("FR")
        clock.advance(59)
        await country("FR")
        clock.advance(1)
        await country("FR")

    asyncio.run(scenario())
    assert calls == ["FR", "FR"]


def test_jitter_spreads_expiries_never_past_the_ttl(engine: Failover, clock: FakeClock) -> None:
    country = failover.failover("jitter", engine=engine, ttl="100s", ttl_jitter=0.2)(
        lambda code: code
    )
    for i in range(50):
        country(f"C{i}")
    ends = set()
    for i in range(50):
        found = country.peek(f"C{i}")
        assert found is not None
        assert found.expire_on is not None
        ends.add(found.expire_on - clock())
    assert all(timedelta(seconds=80) <= end <= timedelta(seconds=100) for end in ends)
    assert len(ends) > 1  # spread
    live = country.referential("C0")
    stored = country.peek("C0")
    assert stored is not None
    assert live.expire_on == stored.expire_on  # the caller is shown the stored expiry


def test_scatter_gather_asks_per_slice(engine: Failover, clock: FakeClock) -> None:
    def ttl(item: dict[str, Any], code: str) -> int:
        return int(item["ttl"])

    @failover.failover(
        "slices", engine=engine, splitter=ListSplitter("code"), ttl=ttl, fresh_for=ttl
    )
    def countries(codes: str) -> list[dict[str, Any]]:
        return [{"code": c, "ttl": 60 if c == "FR" else 600} for c in codes.split(",")]

    countries("FR,DE")
    fr, de = countries.peek("FR"), countries.peek("DE")
    assert fr is not None
    assert de is not None
    assert (fr.expire_on, de.expire_on) == (
        clock() + timedelta(seconds=60),
        clock() + timedelta(seconds=600),
    )
    clock.advance(100)
    assert countries.peek("FR") is None  # FR's own ttl is over, DE's is not
    assert countries.referential("DE").up_to_date


def test_a_callable_answering_no_duration_costs_the_store_not_the_call(
    engine: Failover, caplog: pytest.LogCaptureFixture
) -> None:
    country = failover.failover("bad-ttl", engine=engine, ttl=lambda r, code: "soon")(
        lambda code: code
    )
    assert country("FR") == "FR"  # the live answer returns
    assert country.peek("FR") is None  # not stored: its expiry could not be had
    assert "storing the live result failed" in caplog.text


@pytest.mark.parametrize(
    ("settings", "named"),
    [
        ({"ttl": lambda r: 1, "expiry": failover.FixedTtl(timedelta(hours=1))}, "ttl"),
        ({"ttl_jitter": 0.1, "expiry": failover.FixedTtl(timedelta(hours=1))}, "ttl_jitter"),
        ({"fresh_for": lambda r: 1, "refresh_ahead": 0.5}, "refresh_ahead"),
        ({"ttl_jitter": 2}, "ttl_jitter"),
    ],
)
def test_settings_that_cannot_work_fail_at_decoration(
    engine: Failover, settings: dict[str, Any], named: str
) -> None:
    with pytest.raises(ConfigurationError) as caught:
        failover.failover("refused", engine=engine, **settings)(lambda code: code)
    assert "'refused'" in str(caught.value)
    assert named in str(caught.value)


def test_a_duration_callable_with_refresh_ahead_as_a_duration(
    engine: Failover, clock: FakeClock
) -> None:
    country = failover.failover(
        "ahead", engine=engine, fresh_for=lambda r, code: "10m", refresh_ahead="8m"
    )(lambda code: code)
    assert country.definition.refresh_ahead == timedelta(minutes=8)
    country("FR")
    assert country.referential("FR").up_to_date
