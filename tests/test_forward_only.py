"""Entries only move forward (issue 29): a stored entry is never replaced by the result of a
call that started before the call which produced it (DESIGN.md, "The path of one call").

Calls are ordered with a fake clock (an entry's ``as_of`` is when its call started) and events,
never by sleeping: the older call is held inside its upstream until the newer one has stored.
Each refused write is counted ``failover_writes_total{result="superseded"}``, read back from a
real registry's text output.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

import failover
from failover import Failover, ReferentialPayload
from failover.metrics import PrometheusMetrics
from failover.stores import AsyncWriteStore, CachetoolsStore, FailoverStore, InMemoryStore
from failover.stores.backends.sql import SqlStore

from . import postgres, redis_ha, redis_server
from .conftest import FakeClock
from .execution_support import auntil
from .stores import redis_store

WAIT = 10.0  # a bound on waits that only a broken test reaches


def writes(registry: CollectorRegistry, name: str) -> dict[str, float]:
    """``failover_writes_total`` of ``name`` by result, from the registry's text output."""
    text = generate_latest(registry).decode()
    return {
        s.labels["result"]: s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name == "failover_writes_total" and s.labels["name"] == name and s.value
    }


def entry(clock: FakeClock, key: str, value: object, seconds: float = 0) -> Any:
    as_of = clock() + timedelta(seconds=seconds)
    return ReferentialPayload("n", key, value, as_of, as_of + timedelta(hours=1), True)


# -- one shared store, two engines (two processes) ------------------------------------------------

Shared = Callable[[], FailoverStore]


@pytest.fixture(params=["sqlite", "postgresql", "redis", "redis(cluster)"])
def shared(request: pytest.FixtureRequest, clock: FakeClock, tmp_path: Path) -> Shared:
    """Makes stores on one database: each engine gets its own store (connections, clients)."""
    kind = request.param
    if kind == "sqlite":
        return lambda: SqlStore(f"sqlite:///{tmp_path / 'shared.db'}")
    if kind == "postgresql":
        prefix = postgres.unique_prefix()
        return lambda: postgres.pg_store(table_prefix=prefix)
    url = redis_server.server().url if kind == "redis" else redis_ha.cluster().url
    prefix = redis_server.unique_prefix()
    return lambda: redis_store(clock, url=url, prefix=prefix)


@pytest.fixture
def engines(
    shared: Shared, clock: FakeClock, request: pytest.FixtureRequest
) -> Iterator[tuple[Failover, Failover, CollectorRegistry, CollectorRegistry]]:
    queued = getattr(request, "param", False)
    registries = CollectorRegistry(), CollectorRegistry()
    # No store deadline: a loaded host's first write to a cluster (its slot map, the script
    # loaded) may take longer than the default, and the deadline is not what is tested here.
    made = [
        Failover(shared(), clock=clock, metrics=registry, async_writes=queued, store_timeout=None)
        for registry in registries
    ]
    yield made[0], made[1], registries[0], registries[1]
    for engine in made:
        engine.close()


@pytest.mark.parametrize("engines", [False, True], ids=["in_place", "queued"], indirect=True)
def test_an_older_call_ending_last_leaves_the_newer_entry(
    engines: tuple[Failover, Failover, CollectorRegistry, CollectorRegistry], clock: FakeClock
) -> None:
    a, b, registry_a, registry_b = engines
    asked, answer = threading.Event(), threading.Event()

    @failover.failover("quote", engine=a)
    def quote_a(key: str) -> dict[str, str]:
        asked.set()
        assert answer.wait(WAIT)
        return {"from": "a, asked first"}

    @failover.failover("quote", engine=b)
    def quote_b(key: str) -> dict[str, str]:
        return {"from": "b, asked later"}

    slow = threading.Thread(target=quote_a, args=("EUR",))
    slow.start()  # a's call starts (its as_of: now) and waits inside its upstream
    assert asked.wait(WAIT)
    clock.advance(5)
    assert quote_b("EUR") == {"from": "b, asked later"}
    assert b.flush(WAIT)
    answer.set()  # a's answer arrives last
    slow.join(WAIT)
    assert not slow.is_alive()
    assert a.flush(WAIT)
    for peek in (quote_a.peek, quote_b.peek):
        found = peek("EUR")
        assert found is not None
        assert found.payload == {"from": "b, asked later"}
        assert found.as_of == clock()
    assert writes(registry_a, "quote").get("superseded") == 1
    assert "written" not in writes(registry_a, "quote")
    assert writes(registry_b, "quote").get("written") == 1


async def test_an_older_async_call_ending_last_leaves_the_newer_entry(
    engines: tuple[Failover, Failover, CollectorRegistry, CollectorRegistry], clock: FakeClock
) -> None:
    a, b, registry_a, _ = engines
    asked, answer = asyncio.Event(), asyncio.Event()

    @failover.failover("quote", engine=a)
    async def quote_a(key: str) -> dict[str, str]:
        asked.set()
        await answer.wait()
        return {"from": "a, asked first"}

    @failover.failover("quote", engine=b)
    async def quote_b(key: str) -> dict[str, str]:
        return {"from": "b, asked later"}

    slow = asyncio.create_task(quote_a("EUR"))
    await asyncio.wait_for(asked.wait(), WAIT)
    clock.advance(5)
    await quote_b("EUR")
    assert await asyncio.to_thread(b.flush, WAIT)
    answer.set()
    await asyncio.wait_for(slow, WAIT)
    assert await asyncio.to_thread(a.flush, WAIT)
    found = await asyncio.to_thread(quote_b.peek, "EUR")
    assert found is not None
    assert found.payload == {"from": "b, asked later"}
    assert writes(registry_a, "quote").get("superseded") == 1


def test_a_batch_keeps_each_newer_entry(shared: Shared, clock: FakeClock) -> None:
    first, second = shared(), shared()
    try:
        assert not first.store_many([entry(clock, "a", "new", 10), entry(clock, "b", "new", 10)])
        kept = second.store_many(
            [entry(clock, "a", "old"), entry(clock, "b", "newer", 20), entry(clock, "c", "old")]
        )
        assert kept == 1
        assert second.store(entry(clock, "b", "same age", 20)) == 0  # a tie replaces
        found = second.find_many("n", ["a", "b", "c"])
        assert {k: p.payload for k, p in found.items()} == {
            "a": "new",
            "b": "same age",
            "c": "old",
        }
    finally:
        first.close()
        second.close()


# -- one process --------------------------------------------------------------------------------


def test_a_late_result_older_than_the_stored_entry_is_refused(clock: FakeClock) -> None:
    store = InMemoryStore()
    registry = CollectorRegistry()
    timed = Failover(store, clock=clock, metrics=registry)
    other = Failover(store, clock=clock, metrics=False)  # another caller of the same entries
    asked, answer = threading.Event(), threading.Event()

    @failover.failover("catalogue", engine=timed, timeout=0.05, policy="never_throw")
    def catalogue(category: str) -> list[str]:
        asked.set()
        assert answer.wait(WAIT)
        return ["asked first"]

    @failover.failover("catalogue", engine=other)
    def catalogue_now(category: str) -> list[str]:
        return ["asked later"]

    try:
        late = catalogue.referential("office")  # past its soft timeout: the call goes on
        assert late.up_to_date is False
        assert asked.is_set()
        clock.advance(5)
        assert catalogue_now("office") == ["asked later"]
        answer.set()
        assert timed.refreshes.wait(WAIT)  # the late result came, and was offered
        found = catalogue.peek("office")
        assert found is not None
        assert (found.payload, found.as_of) == (["asked later"], clock())
        assert writes(registry, "catalogue") == {"superseded": 1}
    finally:
        answer.set()
        timed.close()
        other.close()


async def test_an_async_late_result_older_than_the_stored_entry_is_refused(
    clock: FakeClock,
) -> None:
    store = InMemoryStore()
    registry = CollectorRegistry()
    timed = Failover(store, clock=clock, metrics=registry)
    other = Failover(store, clock=clock, metrics=False)
    answer = asyncio.Event()

    @failover.failover("catalogue", engine=timed, timeout=0.05, policy="never_throw")
    async def catalogue(category: str) -> list[str]:
        await answer.wait()
        return ["asked first"]

    @failover.failover("catalogue", engine=other)
    async def catalogue_now(category: str) -> list[str]:
        return ["asked later"]

    try:
        late = await catalogue.referential("office")
        assert late.up_to_date is False
        clock.advance(5)
        assert await catalogue_now("office") == ["asked later"]
        answer.set()
        await auntil(lambda: timed.refreshes.running == 0, "the late call")
        found = catalogue.peek("office")
        assert found is not None
        assert found.payload == ["asked later"]
        assert writes(registry, "catalogue") == {"superseded": 1}
    finally:
        answer.set()
        timed.close()
        other.close()


def test_a_refresh_ahead_older_than_the_stored_entry_is_refused(clock: FakeClock) -> None:
    store = InMemoryStore()
    registry = CollectorRegistry()
    ahead = Failover(store, clock=clock, metrics=registry)
    other = Failover(store, clock=clock, metrics=False)  # another caller, no fresh window
    asked, answer = threading.Event(), threading.Event()
    version = ["first"]

    @failover.failover("rates", engine=ahead, fresh_for="10m", refresh_ahead=0.8)
    def rates(base: str) -> str:
        if version[0] == "refresh":
            asked.set()
            assert answer.wait(WAIT)
        return version[0]

    @failover.failover("rates", engine=other)
    def rates_now(base: str) -> str:
        return "asked later"

    try:
        assert rates("EUR") == "first"
        clock.advance(minutes=8)
        version[0] = "refresh"
        assert rates("EUR") == "first"  # fresh; a refresh starts (as of now) and waits
        assert asked.wait(WAIT)
        clock.advance(minutes=1)
        assert rates_now("EUR") == "asked later"
        answer.set()
        assert ahead.refreshes.wait(WAIT)
        found = rates.peek("EUR")
        assert found is not None
        assert (found.payload, found.as_of) == ("asked later", clock())
        assert writes(registry, "rates") == {"written": 1, "superseded": 1}
    finally:
        answer.set()
        ahead.close()
        other.close()


class Gate(InMemoryStore):
    """An in-memory store whose ``store_many`` waits for ``gate``: the queue's worker parks
    inside a batch while later writes queue up behind it."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.entered = threading.Event()

    def store_many(self, payloads: Any) -> int:
        self.entered.set()
        assert self.gate.wait(WAIT)
        return super().store_many(payloads)


def test_queued_writes_of_one_key_keep_the_newest(clock: FakeClock) -> None:
    registry = CollectorRegistry()
    inner = Gate()
    store = AsyncWriteStore(inner, metrics=PrometheusMetrics(registry))
    try:
        store.store(entry(clock, "parked", "x"))
        assert inner.entered.wait(WAIT)  # the worker waits in that batch: the rest queue
        store.store(entry(clock, "k", "newer", 10))
        store.store(entry(clock, "k", "older"))  # submitted last, asked first
        assert store.find("n", "k").payload == "newer"  # type: ignore[union-attr]
        store.store(entry(clock, "k", "same age", 10))  # a tie: the later one takes its place
        inner.gate.set()
        assert store.flush(WAIT)
        found = inner.find("n", "k")
        assert found is not None
        assert found.payload == "same age"
        assert writes(registry, "n") == {"queued": 4, "written": 2, "superseded": 2}
    finally:
        inner.gate.set()
        store.close()


@pytest.mark.parametrize("kind", ["memory", "cachetools", "async(memory)"])
def test_in_process_stores_compare(kind: str, clock: FakeClock) -> None:
    makers: dict[str, Callable[[], FailoverStore]] = {
        "memory": InMemoryStore,
        "cachetools": lambda: CachetoolsStore(clock=clock),
        "async(memory)": lambda: AsyncWriteStore(InMemoryStore()),
    }
    store = makers[kind]()
    try:
        store.store(entry(clock, "k", "newer", 10))
        store.store(entry(clock, "k", "older"))
        store.store_many([entry(clock, "k", "older too", 5), entry(clock, "j", "j")])
        # Queued writes compare with the queue, then the inner store as they are written (the
        # worker may have written "newer" before "older" was queued).
        flush = getattr(store, "flush", None)
        assert flush is None or flush(WAIT)
        found = store.find("n", "k")
        assert found is not None
        assert found.payload == "newer"
    finally:
        store.close()


def test_a_queued_batch_of_several_names_counts_each_names_superseded(clock: FakeClock) -> None:
    registry = CollectorRegistry()
    inner = Gate()
    store = AsyncWriteStore(inner, metrics=PrometheusMetrics(registry))
    newer = entry(clock, "k", "stored by a later call", 10)
    try:
        inner.store(dataclasses.replace(newer, name="b"))  # e.g. by another process
        store.store(entry(clock, "parked", "x"))
        assert inner.entered.wait(WAIT)
        store.store_many([dataclasses.replace(entry(clock, "k", v), name=v) for v in "ab"])
        inner.gate.set()  # the two names go in one batch: the store says 1, read back which
        assert store.flush(WAIT)
        assert writes(registry, "a") == {"queued": 1, "written": 1}
        assert writes(registry, "b") == {"queued": 1, "superseded": 1}
        found = inner.find("b", "k")
        assert found is not None
        assert found.payload == "stored by a later call"
    finally:
        inner.gate.set()
        store.close()


async def test_an_async_refresh_ahead_older_than_the_stored_entry_is_refused(
    clock: FakeClock,
) -> None:
    store = InMemoryStore()
    registry = CollectorRegistry()
    ahead = Failover(store, clock=clock, metrics=registry)
    other = Failover(store, clock=clock, metrics=False)
    asked, answer = asyncio.Event(), asyncio.Event()
    version = ["first"]

    @failover.failover("rates", engine=ahead, fresh_for="10m", refresh_ahead=0.8)
    async def rates(base: str) -> str:
        if version[0] == "refresh":
            asked.set()
            await answer.wait()
        return version[0]

    @failover.failover("rates", engine=other)
    async def rates_now(base: str) -> str:
        return "asked later"

    try:
        assert await rates("EUR") == "first"
        clock.advance(minutes=8)
        version[0] = "refresh"
        assert await rates("EUR") == "first"  # fresh; a refresh task starts (as of now)
        await asyncio.wait_for(asked.wait(), WAIT)
        clock.advance(minutes=1)
        assert await rates_now("EUR") == "asked later"
        answer.set()
        await auntil(lambda: ahead.refreshes.running == 0, "the refresh")
        found = rates.peek("EUR")
        assert found is not None
        assert (found.payload, found.as_of) == ("asked later", clock())
        assert writes(registry, "rates") == {"written": 1, "superseded": 1}
    finally:
        answer.set()
        ahead.close()
        other.close()


# -- the compare script after the server forgot it ------------------------------------------------


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_redis_writes_still_compare_after_the_server_forgets_the_script(
    kind: str, clock: FakeClock
) -> None:
    """A restarted server (or ``SCRIPT FLUSH``) no longer holds the compare-and-set script the
    store calls by its digest: the store loads it again, and entries still only move forward."""
    import redis as redis_py

    url = redis_server.server().url
    store: Any = redis_store(clock, url=url, prefix=redis_server.unique_prefix())
    admin = redis_py.Redis.from_url(url)
    batches = [
        [entry(clock, "k", "newer", 10)],  # the script is loaded
        [entry(clock, "k", "older"), entry(clock, "j", "j")],
        [entry(clock, "j", "j2", 1)],
    ]

    async def awrite() -> None:
        try:
            for batch in batches:
                await store.astore_many(batch)
                admin.script_flush()
        finally:
            await store.aclose()

    try:
        if kind == "sync":
            for batch in batches:
                store.store_many(batch)
                admin.script_flush()
        else:
            asyncio.run(awrite())
        found = store.find_many("n", ["k", "j"])
        assert {k: p.payload for k, p in found.items()} == {"k": "newer", "j": "j2"}
    finally:
        admin.close()
        store.close()
