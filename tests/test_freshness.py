"""The cache-first window (``fresh_for=``) and refresh ahead (``refresh_ahead=``): an entry younger
than ``fresh_for`` answers without calling the upstream, up to date; older ones fail over as
before up to ``ttl``; past ``refresh_ahead`` a fresh answer refreshes the entry in the
background, once per key. Fake clock throughout; background work is joined, never slept on."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pybreaker
import pytest
from prometheus_client import CollectorRegistry

import failover
from failover import Failover, ListSplitter
from failover.errors import ConfigurationError

from .conftest import FakeClock
from .test_metrics import value

WAIT = 10.0  # a bound on joins, never reached when things work


class Rates:
    """An upstream of nested dicts that counts its calls and fails on demand."""

    def __init__(self) -> None:
        self.calls = 0
        self.failing = False
        self.version = 0

    def __call__(self, currency: str) -> dict[str, Any]:
        self.calls += 1
        if self.failing:
            raise ConnectionError("rates down")
        self.version += 1
        return {"currency": currency, "rates": {"EUR": 1.0, "USD": 1.1}, "v": self.version}


@pytest.fixture
def rates() -> Rates:
    return Rates()


def test_an_entry_within_fresh_for_answers_without_the_upstream(
    clock: FakeClock, rates: Rates
) -> None:
    engine = Failover(clock=clock, metrics=False)
    get = failover.failover("rates", ttl="1h", fresh_for="5m", engine=engine)(rates)

    first = get.referential("GBP")
    assert (first.up_to_date, rates.calls) == (True, 1)
    stored_at = clock.now
    clock.advance(minutes=4, seconds=59)
    again = get.referential("GBP")
    assert rates.calls == 1  # served from the store
    assert again.up_to_date is True
    assert again.as_of == stored_at
    assert again.payload == first.payload
    assert get("GBP")["v"] == 1

    clock.advance(seconds=1)  # 5 minutes old: no longer fresh, the upstream is called
    assert get("GBP")["v"] == 2
    assert rates.calls == 2


def test_past_fresh_for_a_failing_upstream_fails_over_until_ttl(
    clock: FakeClock, rates: Rates
) -> None:
    engine = Failover(clock=clock, metrics=False)
    get = failover.failover("rates", ttl="1h", fresh_for="5m", engine=engine)(rates)
    get("GBP")
    rates.failing = True
    clock.advance(minutes=3)
    assert get.referential("GBP").up_to_date is True  # fresh: the outage is not even seen
    assert rates.calls == 1
    clock.advance(minutes=10)
    stale = get.referential("GBP")
    assert (stale.up_to_date, rates.calls) == (False, 2)  # asked, failed, served stale
    clock.advance(hours=1)
    with pytest.raises(ConnectionError):
        get("GBP")  # expired: nothing usable


def test_fresh_answers_are_counted_and_keep_health_up(clock: FakeClock, rates: Rates) -> None:
    registry = CollectorRegistry()
    engine = Failover(clock=clock, metrics=registry)
    get = failover.failover("rates", fresh_for="5m", engine=engine)(rates)
    for _ in range(4):
        get("GBP")
    assert value(registry, "failover_calls_total", name="rates", outcome="live") == 1
    assert value(registry, "failover_calls_total", name="rates", outcome="fresh") == 3
    health = engine.health().failovers["rates"]
    assert health.status == "up"
    assert health.counts == {"live": 1, "recovered": 0, "not_recovered": 0, "fresh": 3}


def test_a_fresh_answer_passes_an_open_breaker_and_takes_no_permit(
    clock: FakeClock, rates: Rates
) -> None:
    engine = Failover(clock=clock, metrics=False)
    breaker = pybreaker.CircuitBreaker(fail_max=1, reset_timeout=3600)
    get = failover.failover(
        "rates", fresh_for="5m", breaker=breaker, max_concurrency=1, engine=engine
    )(rates)
    get("GBP")
    breaker.open()
    pool = engine.bulkhead(get.definition)
    assert get.referential("GBP").up_to_date is True  # the store answers; no guard is asked
    assert pool.free == 1
    clock.advance(minutes=6)
    assert get.referential("GBP").up_to_date is False  # refused by the breaker: stale
    assert rates.calls == 1


def test_an_engine_store_interval_never_drops_the_stores_that_renew_an_entry(
    clock: FakeClock, rates: Rates
) -> None:
    engine = Failover(clock=clock, metrics=False, store_interval="1h")
    get = failover.failover("rates", fresh_for="5m", engine=engine)(rates)
    get("GBP")
    clock.advance(minutes=6)
    assert get("GBP")["v"] == 2  # past fresh_for: the upstream, and the answer is stored
    clock.advance(minutes=1)
    assert get("GBP")["v"] == 2  # fresh again: not asked (an hour's coalescing would ask)
    assert rates.calls == 2


def test_a_failing_store_read_calls_the_upstream(clock: FakeClock, rates: Rates) -> None:
    class Unreadable(failover.InMemoryStore):
        def find(self, name: str, key: str) -> Any:
            raise OSError("disk gone")

    engine = Failover(Unreadable(), clock=clock, metrics=False, async_writes=False)
    get = failover.failover("rates", fresh_for="5m", engine=engine)(rates)
    get("GBP")
    assert get("GBP")["v"] == 2  # the fresh read failed: live, as without fresh_for
    assert rates.calls == 2


def test_fresh_for_on_a_sqlite_store_sync_and_async(clock: FakeClock, tmp_path: Path) -> None:
    engine = Failover(f"sqlite:///{tmp_path / 'f.db'}", clock=clock, metrics=False)
    calls: list[str] = []

    @failover.failover("arates", fresh_for="1m", engine=engine)
    async def arates(currency: str) -> dict[str, Any]:
        calls.append(currency)
        return {"currency": currency, "rates": {"EUR": 1.0}}

    async def scenario() -> None:
        assert (await arates.referential("GBP")).up_to_date is True
        await asyncio.to_thread(engine.flush, WAIT)
        clock.advance(seconds=30)
        fresh = await arates.referential("GBP")
        assert (fresh.up_to_date, calls) == (True, ["GBP"])
        clock.advance(seconds=30)
        await arates("GBP")
        assert calls == ["GBP", "GBP"]

    asyncio.run(scenario())
    engine.close()


def test_refresh_ahead_refreshes_once_per_key_in_the_background(clock: FakeClock) -> None:
    engine = Failover(clock=clock, metrics=False)
    release = threading.Event()
    calls: list[str] = []

    def slow(currency: str) -> dict[str, Any]:
        calls.append(currency)
        if len(calls) > 1:  # the refresh: held until released
            assert release.wait(WAIT)
        return {"currency": currency, "n": len(calls)}

    get = failover.failover("rates", fresh_for="10m", refresh_ahead=0.8, engine=engine)(slow)
    get("GBP")
    clock.advance(minutes=7)  # 70% of fresh_for: not yet
    assert get("GBP")["n"] == 1
    assert engine.refreshes.wait(WAIT)
    assert calls == ["GBP"]
    clock.advance(minutes=1)  # 80%: answered from the store, refreshed behind
    answers = [get("GBP")["n"] for _ in range(5)]
    assert answers == [1] * 5  # every caller answered at once, from the store
    release.set()
    assert engine.refreshes.wait(WAIT)
    assert calls == ["GBP", "GBP"]  # five calls past the mark, one refresh
    refreshed = get.referential("GBP")
    assert (refreshed.payload["n"], refreshed.as_of, refreshed.up_to_date) == (2, clock.now, True)
    engine.close()


def test_refresh_ahead_as_a_duration_and_async(clock: FakeClock) -> None:
    engine = Failover(clock=clock, metrics=False)
    calls: list[str] = []

    @failover.failover("arates", fresh_for="10m", refresh_ahead="9m", engine=engine)
    async def arates(currency: str) -> dict[str, Any]:
        calls.append(currency)
        return {"currency": currency, "n": len(calls)}

    async def scenario() -> None:
        await arates("GBP")
        clock.advance(minutes=9)
        assert (await arates("GBP"))["n"] == 1  # answered from the store
        for _ in range(1_000):  # the refresh task: let the loop run it (a few turns)
            if not engine.refreshes.running:
                break
            await asyncio.sleep(0)
        assert not engine.refreshes.running
        assert calls == ["GBP", "GBP"]
        assert (await arates.referential("GBP")).as_of == clock.now

    asyncio.run(scenario())
    engine.close()


def test_a_failed_refresh_changes_nothing(clock: FakeClock, rates: Rates) -> None:
    engine = Failover(clock=clock, metrics=False)
    get = failover.failover("rates", fresh_for="10m", refresh_ahead=0.5, engine=engine)(rates)
    get("GBP")
    rates.failing = True
    clock.advance(minutes=6)
    assert get.referential("GBP").up_to_date is True
    assert engine.refreshes.wait(WAIT)
    assert rates.calls == 2  # the refresh was tried, and failed quietly
    again = get.referential("GBP")
    assert (again.up_to_date, again.payload["v"]) == (True, 1)  # still fresh, still served


class Countries:
    """A batch upstream: the countries of the ids asked, in order; counts and records calls."""

    def __init__(self) -> None:
        self.calls: list[Any] = []
        self.failing = False

    def __call__(self, ids: Any) -> list[dict[str, Any]]:
        self.calls.append(ids)
        if self.failing:
            raise ConnectionError("countries down")
        wanted = ids.split(",") if isinstance(ids, str) else ids
        return [{"id": i, "name": f"c{i}", "n": len(self.calls)} for i in wanted]


def test_scatter_asks_the_upstream_only_for_the_slices_not_fresh(clock: FakeClock) -> None:
    engine = Failover(clock=clock, metrics=False)
    upstream = Countries()
    countries = failover.failover(
        "countries", splitter=ListSplitter("id"), fresh_for="5m", engine=engine
    )(upstream)

    countries([1, 2, 3, 4])
    clock.advance(minutes=1)
    assert [c["id"] for c in countries([1, 3])] == [1, 3]  # every slice fresh: no call
    assert upstream.calls == [[1, 2, 3, 4]]
    clock.advance(minutes=1)
    both = countries.referential([2, 7, 4, 8])  # half fresh, half never stored
    assert upstream.calls[-1] == [7, 8]  # one call, for the other half only
    assert [(c["id"], c["n"]) for c in both.payload] == [(2, 1), (7, 2), (4, 1), (8, 2)]
    assert both.up_to_date is True
    clock.advance(minutes=1)
    countries([7, 8])  # the new slices were stored: fresh now
    assert len(upstream.calls) == 2
    clock.advance(minutes=3)  # 1..4 are six minutes old, 7 and 8 four
    countries([1, 7])
    assert upstream.calls[-1] == [1]


def test_scatter_partial_call_failing_recovers_the_whole_call(clock: FakeClock) -> None:
    engine = Failover(clock=clock, metrics=False)
    upstream = Countries()
    countries = failover.failover(
        "countries", splitter=ListSplitter("id"), fresh_for="5m", engine=engine
    )(upstream)
    countries([1, 2])
    clock.advance(minutes=10)
    countries([2])  # 2 stored again: fresh; 1 is ten minutes old
    upstream.failing = True
    got = countries.referential([1, 2])
    assert upstream.calls[-1] == [1]  # asked for the stale one only, and it failed
    assert [c["id"] for c in got.payload] == [1, 2]  # both recovered from the store
    assert got.up_to_date is False


def test_scatter_keys_keep_their_kind_and_own_keys_from_args_ask_for_all(
    clock: FakeClock,
) -> None:
    engine = Failover(clock=clock, metrics=False)
    text, own = Countries(), Countries()
    by_text = failover.failover(
        "by_text", splitter=ListSplitter("id"), fresh_for="5m", engine=engine
    )(text)
    by_own = failover.failover(
        "by_own",
        splitter=ListSplitter("id", keys_from_args=lambda ids: ids),
        fresh_for="5m",
        engine=engine,
    )(own)
    by_text("FR,DE")
    by_text("DE,IT")
    assert text.calls == ["FR,DE", "IT"]  # a comma-separated string stays one
    by_own([1, 2])
    by_own([2, 3])
    assert own.calls == [[1, 2], [2, 3]]  # keys_from_args of its own: cannot be narrowed


def test_scatter_partial_in_an_async_failover_on_sqlite(clock: FakeClock, tmp_path: Path) -> None:
    engine = Failover(f"sqlite:///{tmp_path / 'f.db'}", clock=clock, metrics=False)
    upstream = Countries()

    @failover.failover("acountries", splitter=ListSplitter("id"), fresh_for="5m", engine=engine)
    async def acountries(ids: list[int]) -> list[dict[str, Any]]:
        return upstream(ids)

    async def scenario() -> None:
        await acountries([1, 2])
        await asyncio.to_thread(engine.flush, WAIT)
        got = await acountries([2, 3])
        assert [c["id"] for c in got] == [2, 3]
        assert upstream.calls == [[1, 2], [3]]

    asyncio.run(scenario())
    engine.close()


@pytest.mark.parametrize(
    ("settings", "words"),
    [
        ({"fresh_for": "2h", "ttl": "1h"}, "fresh_for=2:00:00 is longer than ttl=1:00:00"),
        ({"refresh_ahead": 0.8}, "refresh_ahead= needs fresh_for="),
        ({"fresh_for": "5m", "refresh_ahead": "5m"}, "is not shorter than fresh_for"),
        ({"fresh_for": "5m", "refresh_ahead": 1.5}, "a fraction of fresh_for between 0 and 1"),
        ({"fresh_for": "5m", "refresh_ahead": True}, "a fraction of fresh_for between 0 and 1"),
        ({"fresh_for": -1}, "fresh_for"),
        ({"fresh_for": "5m", "store_interval": "1m"}, "store_interval= with fresh_for="),
    ],
)
def test_bad_freshness_settings_are_refused_naming_them(
    settings: dict[str, Any], words: str
) -> None:
    with pytest.raises(ConfigurationError) as caught:
        failover.failover("rates", **settings)(Rates())
    assert "failover 'rates'" in str(caught.value)
    assert words in str(caught.value)


def test_a_memory_store_without_copies_shares_its_results(clock: FakeClock, rates: Rates) -> None:
    copied = Failover("memory://", clock=clock, metrics=False)
    shared = Failover("memory://?copy=false", clock=clock, metrics=False)
    a = failover.failover("a", fresh_for="5m", engine=copied)(rates)
    b = failover.failover("b", fresh_for="5m", engine=shared)(rates)
    first_a, first_b = a("GBP"), b("GBP")
    assert a("GBP") is not first_a  # each caller its own copy: changing one changes nothing
    assert b("GBP") is first_b  # the stored object itself, as a cachetools hit
    first_b["v"] = "changed by a caller"
    assert b("GBP")["v"] == "changed by a caller"  # what copy=false means
    assert repr(shared.raw_store) == "InMemoryStore(max_entries=10000, copy=False)"
    with pytest.raises(ConfigurationError, match="'copy' must be true or false"):
        Failover("memory://?copy=no")
