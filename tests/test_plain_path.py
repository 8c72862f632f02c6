"""The plain success path (`failover.plain`): a plain failover on an in-process store is stored
from its shell's own frame, with no `Call` and no envelope, and one on a store behind async
writes hands the queue its envelope from there. Every guarantee of the general path holds on
it: the key, the expiry, isolation, forward-only writes, the LRU cap, the facts on the event
stream, store trouble that never breaks a call, and recovery.

Each test runs sync and async: the two shells each inline the path.
"""

from __future__ import annotations

import asyncio
import copy
import functools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pybreaker
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

import failover
import failover.conditional
import failover.plain
import failover.served
import failover.shells
import failover.switches
from failover import Failover
from failover.stores import CachetoolsStore, InMemoryStore
from failover.stores.backends.sql import SqlStore
from failover.stores.base import walk

from .conftest import FakeClock
from .test_forward_only import writes
from .test_lifecycle_edges import _in_child

KINDS = ["sync", "async"]


@pytest.fixture(autouse=True)
def switches_off(monkeypatch: pytest.MonkeyPatch) -> None:
    """The switches as in a process that never opened a block (an earlier test's block turned
    them on for good in this process), put back as they were after the test: the tests turn
    them on where they mean to (`failover.switches`)."""
    monkeypatch.setattr(failover.switches.STATE, "on", False)
    monkeypatch.setattr(failover.switches.STATE, "armed", 0)


def decorate(kind: str, engine: Failover, upstream: Callable[..., Any], **options: Any) -> Any:
    """``upstream`` decorated as ``kind``; the result is called as a sync function either way."""
    if kind == "sync":
        return failover.failover("plain.country", engine=engine, **options)(upstream)

    @functools.wraps(upstream)  # the same signature: the same keys
    async def aupstream(*args: Any, **kwargs: Any) -> Any:
        return upstream(*args, **kwargs)

    decorated = failover.failover("plain.country", engine=engine, **options)(aupstream)

    def call(*args: Any, **kwargs: Any) -> Any:
        return asyncio.run(decorated(*args, **kwargs))

    call._failover_state = decorated._failover_state  # type: ignore[attr-defined]
    call.peek = decorated.peek  # type: ignore[attr-defined]
    return call


class Countries:
    """An upstream of small dicts holding a list, that can fail."""

    def __init__(self) -> None:
        self.error: Exception | None = None
        self.calls = 0

    def __call__(self, code: str, lang: str = "en") -> dict[str, Any]:
        self.calls += 1
        if self.error is not None:
            raise self.error
        return {"code": code, "lang": lang, "currencies": ["EUR"], "n": self.calls}


def plain_of(fn: Any) -> Any:
    return fn._failover_state.runtime().plain


@pytest.mark.parametrize("kind", KINDS)
def test_a_plain_failover_takes_the_plain_path(kind: str, engine: Failover) -> None:
    assert plain_of(decorate(kind, engine, Countries())) is not None


@pytest.mark.parametrize(
    "options",
    [
        {"label": True},
        {"tags": lambda code, lang="en": ["countries"]},
        {"store_if": lambda r: True},
        {"key": lambda code, lang="en": code},
        {"store_interval": "1m"},
        {"ttl": lambda result: timedelta(minutes=1)},
        {"timeout": 5},
        {"single_flight": True},
    ],
    ids=lambda o: next(iter(o)),
)
def test_a_failover_with_more_to_do_goes_the_general_way(
    options: dict[str, Any], engine: Failover
) -> None:
    fn = decorate("sync", engine, Countries(), **options)
    fn("FR")
    assert plain_of(fn) is None


def test_a_store_with_io_written_on_the_callers_thread_goes_the_general_way(
    clock: FakeClock, tmp_path: Any
) -> None:
    engine = Failover(
        f"sqlite:///{tmp_path / 'f.db'}", clock=clock, metrics=False, async_writes=False
    )
    try:
        assert plain_of(decorate("sync", engine, Countries())) is None
    finally:
        engine.close()


@pytest.mark.parametrize("kind", KINDS)
def test_a_store_with_io_is_handed_the_general_paths_entry_from_the_plain_path(
    kind: str, clock: FakeClock, tmp_path: Any
) -> None:
    """Async writes (the default for a store that does I/O): the plain path queues the entry
    the general path would (key, as_of, expiry, a copy of the result), which the worker writes
    to the SQLite file, and the general recovery reads back."""
    engine = Failover(f"sqlite:///{tmp_path / 'f.db'}", clock=clock, metrics=False)
    upstream = Countries()
    fn = decorate(kind, engine, upstream, ttl="10m")
    try:
        assert plain_of(fn) is not None
        fn("FR")
        clock.advance(1)
        result = fn("FR", lang="en")  # the same key, stored again one second later
        result["currencies"].append("mutated after the call")  # not what was queued
        assert engine.flush(10)
        sql = next(s for s in walk(engine.store) if isinstance(s, SqlStore))
        (found,) = sql.find_all("plain.country")
        assert found.as_of == clock.now
        assert found.expire_on == clock.now + timedelta(minutes=10)
        assert found.payload == {"code": "FR", "lang": "en", "currencies": ["EUR"], "n": 2}
        upstream.error = ConnectionError("down")
        clock.advance(30)
        with failover.served.collect() as report:
            stale = fn("FR")
        assert stale == {"code": "FR", "lang": "en", "currencies": ["EUR"], "n": 2}
        assert report.names == ("plain.country",)
        assert report.age == 30
    finally:
        engine.close()


@pytest.mark.parametrize("way", ["plain", "general"])
def test_a_queued_success_is_counted_as_the_general_path_counts_it(
    way: str, clock: FakeClock, tmp_path: Any
) -> None:
    """On a store behind async writes, the plain path and the general one report the same:
    writes queued, written, superseded (a hot key's write replaced while it waits), stored
    and live calls, read back from a real registry."""
    registry = CollectorRegistry()
    engine = Failover(f"sqlite:///{tmp_path / 'f.db'}", clock=clock, metrics=registry)
    try:
        options = {} if way == "plain" else {"store_if": lambda r: True}
        upstream = Countries()
        fn = decorate("sync", engine, upstream, **options)
        assert (plain_of(fn) is not None) == (way == "plain")
        for code in ("FR", "DE", "FR"):
            fn(code)
            clock.advance(1)
        assert engine.flush(10)
        counts = writes(registry, "plain.country")
        assert counts["queued"] == 3
        assert counts["written"] + counts.get("superseded", 0) == 3
        found = samples(registry, "plain.country")
        assert found["failover_calls_total|live"] == 3
        assert found["failover_write_seconds_count|"] == 3  # the hand-offs to the queue
        assert engine.health().failovers["plain.country"].counts["live"] == 3
    finally:
        engine.close()


@pytest.mark.parametrize("kind", KINDS)
def test_the_stored_entry_is_the_general_paths(
    kind: str, engine: Failover, clock: FakeClock
) -> None:
    """Same key (positional, keyword, default), same as_of and expiry: `peek` (the general
    read) finds it."""
    fn = decorate(kind, engine, Countries(), ttl="10m")
    fn("FR")
    found = fn.peek("FR")
    assert found is not None
    assert found.payload["code"] == "FR"
    assert found.as_of == clock.now
    assert found.expire_on == clock.now + timedelta(minutes=10)
    assert found.label is None
    assert found.tags is None
    clock.advance(1)
    fn(code="FR", lang="en")  # the same key by keyword: replaces the entry
    assert fn.peek("FR").as_of == clock.now


@pytest.mark.parametrize("kind", KINDS)
def test_a_method_is_keyed_without_its_instance(kind: str, engine: Failover) -> None:
    countries = Countries()

    class Client:
        @failover.failover("plain.method", engine=engine)
        def get(self, code: str) -> dict[str, Any]:
            return countries(code)

        @failover.failover("plain.amethod", engine=engine)
        async def aget(self, code: str) -> dict[str, Any]:
            return countries(code)

    def get(client: Client, code: str) -> Any:
        return client.get(code) if kind == "sync" else asyncio.run(client.aget(code))

    assert get(Client(), "FR")["n"] == 1
    countries.error = ConnectionError("down")
    assert get(Client(), "FR")["n"] == 1  # another instance, the same entry


@pytest.mark.parametrize("kind", KINDS)
def test_what_the_caller_changes_is_not_stored(kind: str, engine: Failover) -> None:
    countries = Countries()
    fn = decorate(kind, engine, countries)
    live = fn("FR")
    live["name"] = "changed"
    live["currencies"].append("XXX")
    countries.error = ConnectionError("down")
    stale = fn("FR")
    assert stale == {"code": "FR", "lang": "en", "currencies": ["EUR"], "n": 1}
    stale["currencies"].append("YYY")  # nor what a recovered caller changes
    assert fn("FR")["currencies"] == ["EUR"]


@pytest.mark.parametrize("kind", KINDS)
def test_a_store_that_shares_results_is_not_copied(kind: str, clock: FakeClock) -> None:
    engine = Failover(InMemoryStore(copy=False), clock=clock, metrics=False)
    try:
        countries = Countries()
        fn = decorate(kind, engine, countries)
        assert plain_of(fn) is not None
        assert not plain_of(fn).copies
        fn("FR")["currencies"].append("XXX")
        countries.error = ConnectionError("down")
        assert fn("FR")["currencies"] == ["EUR", "XXX"]  # shared, as that store says
    finally:
        engine.close()


@pytest.mark.parametrize("kind", KINDS)
def test_an_older_call_ending_last_leaves_the_newer_entry(kind: str, clock: FakeClock) -> None:
    """The first call's upstream makes a second call of the same key, which starts later and
    ends first: the first call's older result is refused, and counted so."""
    registry = CollectorRegistry()
    engine = Failover(clock=clock, metrics=registry)
    try:
        inner: list[Any] = []
        started: list[bool] = []
        countries = Countries()

        if kind == "sync":

            @failover.failover("plain.country", engine=engine)
            def country(code: str) -> dict[str, Any]:
                result = countries(code)
                if not started:  # the call below, made 1 s later, starts after this one
                    started.append(True)
                    clock.advance(1)
                    inner.append(country(code))
                return result

            fn: Any = country
        else:

            @failover.failover("plain.country", engine=engine)
            async def acountry(code: str) -> dict[str, Any]:
                result = countries(code)
                if not started:
                    started.append(True)
                    clock.advance(1)
                    inner.append(await acountry(code))
                return result

            fn = lambda code: asyncio.run(acountry(code))  # noqa: E731
            fn.peek = acountry.peek
        assert plain_of(acountry if kind == "async" else country) is not None
        outer = fn("FR")
        assert outer["n"] == 1
        assert inner[0]["n"] == 2
        assert fn.peek("FR").payload["n"] == 2  # the newer entry stayed
        assert writes(registry, "plain.country") == {"written": 1.0, "superseded": 1.0}
    finally:
        engine.close()


@pytest.mark.parametrize("kind", KINDS)
def test_the_least_recently_used_entry_leaves_past_the_cap(kind: str, clock: FakeClock) -> None:
    engine = Failover(InMemoryStore(max_entries=2), clock=clock, metrics=False)
    try:
        countries = Countries()
        fn = decorate(kind, engine, countries)
        fn("FR"), fn("DE")
        countries.error = ConnectionError("down")
        fn("FR")  # a recovery is a use: DE is now the least recently used
        countries.error = None
        fn("IT")
        countries.error = ConnectionError("down")
        assert fn("FR")["code"] == "FR"
        assert fn("IT")["code"] == "IT"
        with pytest.raises(ConnectionError):
            fn("DE")
    finally:
        engine.close()


@pytest.mark.parametrize("kind", KINDS)
def test_calls_and_writes_are_counted(kind: str, clock: FakeClock) -> None:
    registry = CollectorRegistry()
    engine = Failover(clock=clock, metrics=registry)
    try:
        countries = Countries()
        fn = decorate(kind, engine, countries)
        fn("FR"), fn("DE")
        countries.error = ConnectionError("down")
        fn("FR")
        assert writes(registry, "plain.country") == {"written": 2.0}
        counts = engine.health().failovers["plain.country"].counts
        assert (counts["live"], counts["recovered"]) == (2, 1)
    finally:
        engine.close()


@pytest.mark.parametrize("kind", KINDS)
def test_calls_are_counted_per_second_as_the_general_path_counts_them(
    kind: str, clock: FakeClock
) -> None:
    """The plain path counts a call in its own frame while the call's second is the health
    window's current one, and through the recorder when it is not: the window's counts and the
    upstream histogram read the same as a general failover's, called alike."""
    registry = CollectorRegistry()
    engine = Failover(clock=clock, metrics=registry)
    try:
        plain = decorate(kind, engine, Countries())
        general = failover.failover("general.country", engine=engine, store_if=lambda value: True)(
            Countries()
        )
        assert plain_of(plain) is not None
        assert plain_of(general) is None
        for step in (0.0, 0.4, 0.7, 1.0, 30.0, 90.0):  # within a second, across, past the window
            clock.advance(step)
            for code in ("FR", "DE", "FR"):
                plain(code), general(code)
            report = engine.health().failovers
            assert report["plain.country"].counts == report["general.country"].counts
        assert report["plain.country"].counts["live"] == 3  # the last second's, in the window

        def upstream(name: str) -> dict[str, float]:
            found = samples(registry, name).items()
            return {k: v for k, v in found if k.startswith("failover_upstream_seconds_count")}

        assert upstream("plain.country") == upstream("general.country") != {}
    finally:
        engine.close()


def write_seconds(registry: CollectorRegistry, name: str) -> dict[str, float]:
    """``failover_write_seconds`` of ``name``: its count, its sum and its first bucket."""
    text = generate_latest(registry).decode()
    found = {
        s.name.rsplit("_", 1)[-1] + s.labels.get("le", ""): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name.startswith("failover_write_seconds") and s.labels["name"] == name
    }
    return {"count": found["count"], "sum": found["sum"], "first": found["bucket0.005"]}


@pytest.mark.parametrize("kind", KINDS)
def test_each_write_is_timed_in_the_histogram(kind: str, clock: FakeClock) -> None:
    """A process-memory write lands in the first bucket, counted on the plain path in its
    own frame: the histogram and ``failover_writes_total`` read it as any other write."""
    registry = CollectorRegistry()
    engine = Failover(clock=clock, metrics=registry)
    try:
        fn = decorate(kind, engine, Countries())
        fn("FR"), fn("DE"), fn("FR")
        seconds = write_seconds(registry, "plain.country")
        assert (seconds["count"], seconds["first"]) == (3.0, 3.0)
        assert 0 < seconds["sum"] < 3 * 0.005
        assert writes(registry, "plain.country") == {"written": 3.0}
    finally:
        engine.close()


class Uncopyable:
    """A result that cannot be copied: storing it is store trouble."""

    def __deepcopy__(self, memo: Any) -> Any:
        raise TypeError("no copies")


@pytest.mark.parametrize("kind", KINDS)
def test_store_trouble_never_breaks_the_call(
    kind: str, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    registry = CollectorRegistry()
    engine = Failover(clock=clock, metrics=registry)
    try:
        result = Uncopyable()
        fn = decorate(kind, engine, lambda code: result)
        assert fn("FR") is result
        assert writes(registry, "plain.country") == {"failed": 1.0}
        assert "no copies" in caplog.text
        assert engine.health().failovers["plain.country"].counts["live"] == 1
    finally:
        engine.close()


@pytest.mark.parametrize("kind", KINDS)
def test_a_failing_clock_goes_the_general_way(kind: str) -> None:
    def broken() -> Any:
        raise RuntimeError("clock")

    engine = Failover(clock=broken, metrics=False)
    try:
        countries = Countries()
        fn = decorate(kind, engine, countries)
        assert fn("FR")["code"] == "FR"  # the call is answered; nothing could be stored
        assert countries.calls == 1
    finally:
        engine.close()


@pytest.mark.parametrize("kind", KINDS)
def test_a_failure_is_recovered_as_of_the_stored_call(kind: str, clock: FakeClock) -> None:
    countries = Countries()
    engine = Failover(clock=clock, metrics=False)
    fn = decorate(kind, engine, countries, exceptions=(ConnectionError,))
    try:
        stored_at = clock.now
        fn("FR")
        clock.advance(30)
        countries.error = ConnectionError("down")
        assert fn("FR")["n"] == 1
        found = fn.peek("FR")
        assert found.as_of == stored_at
        countries.error = KeyError("not recovered")  # not a failover exception: raised
        with pytest.raises(KeyError):
            fn("FR")
    finally:
        engine.close()


def samples(registry: CollectorRegistry, name: str) -> dict[str, float]:
    """Every sample of failover ``name`` from the registry's text output, by sample name (and
    outcome or bucket)."""
    text = generate_latest(registry).decode()
    return {
        s.name + "|" + s.labels.get("outcome", s.labels.get("le", "")): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.labels.get("name") == name and not s.name.endswith("_created")
    }


@pytest.mark.parametrize("way", ["plain", "general"])
@pytest.mark.parametrize("kind", KINDS)
def test_a_recovery_from_the_table_reports_what_the_general_one_does(
    kind: str, way: str, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    """The plain path answers a failure from the store's table itself (no `Call`): the same
    stale value, counts, unit-of-work report and debug trace as a failover that recovers the
    general way (``store_if`` sends it there)."""
    registry = CollectorRegistry()
    engine = Failover(clock=clock, metrics=registry)
    try:
        countries = Countries()
        options = {} if way == "plain" else {"store_if": lambda r: True}
        fn = decorate(kind, engine, countries, **options)
        assert (plain_of(fn) is not None) == (way == "plain")
        fn("FR")
        clock.advance(30)
        countries.error = ConnectionError("down")
        with caplog.at_level(logging.DEBUG, "failover.health"), failover.served.collect() as report:
            stale = fn("FR")
        assert (stale["code"], stale["n"]) == ("FR", 1)
        stale["currencies"].append("XXX")  # a copy: the stored entry is not changed
        assert fn("FR")["currencies"] == ["EUR"]
        assert report.names == ("plain.country",)
        assert report.age == 30
        assert "the upstream failed" in caplog.text
        counts = engine.health().failovers["plain.country"].counts
        assert (counts["live"], counts["recovered"]) == (1, 2)
        found = samples(registry, "plain.country")
        assert found["failover_recoveries_total|recovered"] == 2
        assert found["failover_recovery_seconds_count|"] == 2
        assert found["failover_stale_age_seconds_sum|"] == 60
        assert fn.peek("FR").as_of == clock.now - timedelta(seconds=30)
    finally:
        engine.close()


@pytest.mark.parametrize(
    "options",
    [
        {"on_recovered": lambda ctx, value: value},
        {"exceptions": lambda exc: True},
        {"exclude": (KeyError,)},
        {"breaker": True},
    ],
    ids=lambda o: next(iter(o)),
)
def test_a_failover_with_more_to_recover_recovers_the_general_way(
    options: dict[str, Any], engine: Failover
) -> None:
    countries = Countries()
    fn = decorate("sync", engine, countries, **options)
    fn("FR")
    assert plain_of(fn).recovers == ()
    countries.error = ConnectionError("down")
    assert fn("FR")["n"] == 1


def test_an_entry_that_cannot_be_copied_back_is_the_general_recoverys_to_report(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    """A read or a copy that fails on the plain path reports nothing: the general recovery
    reads again and tells the trouble (a miss for the caller)."""
    engine = Failover(clock=clock, metrics=False)
    try:
        countries = Countries()
        fn = decorate("sync", engine, countries)
        fn("FR")
        store: Any = engine.store
        while not isinstance(store, InMemoryStore):
            store = store.inner
        (ident,) = list(store._entries)
        store._entries[ident] = (Uncopyable(), *store._entries[ident][1:])
        countries.error = ConnectionError("down")
        with pytest.raises(ConnectionError):
            fn("FR")
        assert "no copies" in caplog.text
        counts = engine.health().failovers["plain.country"].counts
        assert counts["recovered"] == 0
    finally:
        engine.close()


@pytest.mark.parametrize("kind", KINDS)
def test_a_tenant_call_on_an_engine_that_does_not_route_is_refused(
    kind: str, engine: Failover
) -> None:
    fn = decorate(kind, engine, Countries())
    with failover.tenant("acme"), pytest.raises(failover.ConfigurationError, match="tenant"):
        fn("FR")


@pytest.mark.parametrize("kind", KINDS)
def test_a_guard_gives_its_permit_back_on_the_plain_path(kind: str, engine: Failover) -> None:
    countries = Countries()
    fn = decorate(kind, engine, countries, max_concurrency=1)
    assert plain_of(fn) is not None
    for _ in range(3):
        fn("FR")  # one permit: each call must give it back
    countries.error = ConnectionError("down")
    for _ in range(3):
        assert fn("FR")["n"] == 3  # and so must a failed call
    countries.error = None
    assert fn("DE")["n"] == 7


def test_copies_are_deep_for_nested_values(engine: Failover) -> None:
    nested = {"a": {"b": [{"c": 1}]}, "t": ({"d": [1]},)}
    fn = decorate("sync", engine, lambda code: copy.deepcopy(nested))
    fn("FR")["a"]["b"][0]["c"] = 99
    assert fn.peek("FR").payload == nested


# -- entry times: the plain path keeps them as floats, every read gives aware datetimes --------


@pytest.mark.parametrize("kind", KINDS)
def test_on_the_default_clock_times_read_back_as_aware_datetimes(kind: str) -> None:
    engine = Failover(metrics=False)  # the default clock: read as time.time()
    try:
        countries = Countries()
        fn = decorate(kind, engine, countries, ttl="1h")
        before = datetime.now(UTC)
        fn("FR")
        after = datetime.now(UTC)
        found = fn.peek("FR")
        assert found.as_of.tzinfo is not None
        assert before <= found.as_of <= after
        assert found.expire_on == found.as_of + timedelta(hours=1)
        countries.error = ConnectionError("down")
        assert fn("FR")["n"] == 1
        assert engine.health().failovers["plain.country"].counts["live"] == 1
    finally:
        engine.close()


@pytest.mark.parametrize("kind", KINDS)
def test_the_default_clock_is_read_once_per_anchor_not_per_call(kind: str) -> None:
    """Within `ANCHOR` seconds of a reading of the wall clock, a call's time is its
    `perf_counter` reading plus the offset measured then; past it, the wall clock is read again
    (so a step of the wall clock shows within `ANCHOR`)."""
    engine = Failover(metrics=False)
    try:
        anchor = failover.plain.ANCHOR
        fn = decorate(kind, engine, Countries(), ttl="1h")
        began = time.perf_counter()
        fn("FR")
        ended = time.perf_counter()
        plain = plain_of(fn)
        assert not fn._failover_state.runtime().before  # the plain path is taken
        assert began + anchor <= plain.until <= ended + anchor  # anchored by that call's reading
        plain.until = float("inf")  # within `ANCHOR` of it, however slow this machine is
        plain.offset += 3600.0  # as if the wall clock had been stepped an hour on since
        before = datetime.now(UTC)
        fn("FR")
        assert fn.peek("FR").as_of >= before + timedelta(minutes=59)  # the offset, no reading
        plain.until = time.perf_counter()  # as if `ANCHOR` had passed
        before = datetime.now(UTC)
        began = time.perf_counter()
        fn("DE")  # another key: FR's entry, an hour ahead, is newer than any call now
        ended = time.perf_counter()
        after = datetime.now(UTC)
        assert before <= fn.peek("DE").as_of <= after  # read again, anchored again
        assert began + anchor <= plain.until <= ended + anchor
    finally:
        engine.close()


@pytest.mark.parametrize("kind", KINDS)
def test_only_a_switch_that_steers_the_call_leaves_the_plain_path(
    kind: str, engine: Failover, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A switch block opened anywhere turns the switches on for the whole process; a plain
    failover's calls still take the plain path (no `Call` made for a success), in a
    `refreshing` block too, which changes nothing for them. A `disabled` block and conditional
    refresh steer the call: the general way, which does what they ask."""
    made: list[Any] = []
    real = failover.shells.call_of

    def counted(*args: Any, **kwargs: Any) -> Any:
        made.append(args[0])
        return real(*args, **kwargs)

    monkeypatch.setattr(failover.shells, "call_of", counted)
    seen: list[Any] = []
    ask = failover.conditional.stale_entry  # not named in the upstream: armed below, not by it

    def upstream(code: str) -> dict[str, Any]:
        if failover.switches.STATE.armed:
            seen.append(ask())
        return {"code": code, "n": len(seen)}

    fn = decorate(kind, engine, upstream)
    with failover.refreshing():
        fn("FR")
    assert failover.switches.STATE.on
    fn("FR")
    assert made == []  # the plain path, both calls
    with failover.disabled():
        assert fn("DE") == {"code": "DE", "n": 0}
    assert len(made) == 1
    failover.switches.arm_conditional()
    assert fn("FR") == {"code": "FR", "n": 1}
    assert len(made) == 2
    assert seen[0].payload == {"code": "FR", "n": 0}  # the upstream was told its stale entry
    assert fn.peek("DE") is None  # the pass-through stored nothing


def test_a_plain_entry_and_a_stored_envelope_compare_by_their_time(clock: FakeClock) -> None:
    """The plain path's float times and an envelope's datetimes, in one table: the newer one
    stays, whichever way they meet."""
    store = InMemoryStore()
    engine = Failover(store, clock=clock, metrics=False)
    try:
        fn = decorate("sync", engine, Countries())
        fn("FR")  # a float entry at t0
        found = fn.peek("FR")
        older = replace(found, payload={"old": True}, as_of=clock.now - timedelta(seconds=1))
        assert store.store(older) == 1  # refused: the plain entry is newer
        newer = replace(found, payload={"new": True}, as_of=clock.now + timedelta(seconds=5))
        assert store.store(newer) == 0
        fn("FR")  # a plain write at t0, older than the stored envelope: refused
        assert fn.peek("FR").payload == {"new": True}
        clock.advance(10)
        fn("FR")  # newer again: replaces it
        assert fn.peek("FR").payload["code"] == "FR"
    finally:
        engine.close()


def test_plain_entries_expire_and_are_cleaned(clock: FakeClock) -> None:
    store = InMemoryStore()
    engine = Failover(store, clock=clock, metrics=False)
    try:
        countries = Countries()
        fn = decorate("sync", engine, countries, ttl="1m")
        fn("FR")
        clock.advance(30)
        assert store.clean_by_expiry(clock.now) == 0
        clock.advance(31)
        countries.error = ConnectionError("down")
        with pytest.raises(ConnectionError):
            fn("FR")  # expired: never served
        countries.error = None
        fn("DE")
        clock.advance(61)
        assert store.clean_by_expiry(clock.now) == 1
        assert len(store) == 0
    finally:
        engine.close()


# -- every way out of the guards on the plain path -----------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_an_open_breaker_refuses_and_the_refusal_is_recovered(kind: str, engine: Failover) -> None:
    countries = Countries()
    breaker = pybreaker.CircuitBreaker(fail_max=1, reset_timeout=60)
    fn = decorate(kind, engine, countries, breaker=breaker)
    assert plain_of(fn) is not None
    fn("FR")
    countries.error = ConnectionError("down")
    assert fn("FR")["n"] == 1  # the failure opens the breaker
    assert fn("FR")["n"] == 1  # refused: the upstream is not called
    assert countries.calls == 2
    health = engine.health().failovers["plain.country"]
    assert health.refused == {"breaker": 1}
    assert (health.counts["live"], health.counts["recovered"]) == (1, 2)


async def test_a_cancelled_call_gives_its_permit_back(engine: Failover) -> None:
    entered, release = asyncio.Event(), asyncio.Event()

    @failover.failover("plain.slow", engine=engine, max_concurrency=1)
    async def slow(code: str) -> dict[str, str]:
        entered.set()
        await release.wait()
        return {"code": code}

    assert slow._failover_state.runtime().plain is not None
    task = asyncio.create_task(slow("FR"))
    await entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    release.set()
    assert await slow("DE") == {"code": "DE"}  # the one permit came back


@pytest.mark.parametrize("kind", ["memory", "cachetools"])
def test_a_child_forked_while_a_thread_writes_to_the_store_still_stores(
    kind: str, clock: FakeClock
) -> None:
    """A thread holds the in-process store's lock at the fork (a write under way): that
    thread does not exist in the child, which starts with the store's lock free."""
    store = InMemoryStore() if kind == "memory" else CachetoolsStore(clock=clock)
    engine = Failover(store, clock=clock, metrics=False)
    fn = failover.failover("plain.forked", engine=engine)(lambda code: {"code": code})
    fn("FR")
    held, done = threading.Event(), threading.Event()

    def write_under_way() -> None:
        with store._lock:
            held.set()
            done.wait(10)

    writer = threading.Thread(target=write_under_way)
    writer.start()
    try:
        assert held.wait(10)
        assert _in_child(lambda: [fn("DE"), fn.peek("DE").payload]) == [
            "ok",
            [{"code": "DE"}, {"code": "DE"}],
        ]
    finally:
        done.set()
        writer.join(10)
    assert fn.peek("DE") is None  # the child's write stays in the child
    engine.close()
