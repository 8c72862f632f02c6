"""Control over entries through the decorator and the engine: ``.expire()`` (the fresh window
ends, the entry stays for failing over), ``.invalidate_all()`` and ``tags=`` with
``engine.invalidate_tag()``, sync and async, on real stores (memory, SQLite, PostgreSQL, Redis
and its cluster, tiered, per tenant) and through scatter/gather. Fake clock throughout; queued
writes are flushed, never slept on."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import failover
from failover import Failover, ListSplitter
from failover.errors import ConfigurationError, StoreError
from failover.stores import InMemoryStore, MultiTenantStore, SqlStore, TieredStore
from failover.stores.base import delete_tagged, flush, native_async

from .conftest import FakeClock
from .stores import FACTORIES
from .test_store_contract import entry

WAIT = 10.0  # a bound on flushes, never reached when things work

# The stores a user runs an engine on (each chain the engine builds over them: deadline, async
# writes, copying), the Redis cluster the suite runs among them.
STORES = [
    "memory",
    "cachetools",
    "sql(sqlite)",
    "sql(postgresql)",
    "redis",
    "redis(cluster)",
    "tiered(cachetools, redis)",
    "tiered(memory, sql(sqlite))",
    "tenant(tables(sqlite))",
    "tenant(redis)",
]


@pytest.fixture(params=STORES)
def engine(request: pytest.FixtureRequest, clock: FakeClock, tmp_path: Path) -> Iterator[Failover]:
    store = FACTORIES[request.param](clock, tmp_path)
    # What is tested is the entries, not the deadline: a loaded host's cluster write may take
    # longer than the default 0.5 s, and a write given up at it is only retried later.
    engine = Failover(store=store, clock=clock, metrics=False, store_timeout=10)
    yield engine
    engine.close()


class Customers:
    """An upstream that counts its calls and fails on demand."""

    def __init__(self) -> None:
        self.calls: list[object] = []
        self.failing = False

    def __call__(self, customer: int) -> dict[str, Any]:
        self.calls.append(customer)
        if self.failing:
            raise ConnectionError("down")
        return {"customer": customer, "n": len(self.calls)}


def customer_tags(customer: int) -> list[str]:
    return [f"customer:{customer}", "customers"]


def settle(engine: Failover) -> None:
    assert flush(engine.store, WAIT)


async def loop_ends(engine: Failover) -> None:
    """Close the store's async clients of this event loop (the engine stays open)."""
    store: Any = engine.store
    if native_async(store):
        await store.aclose()


# -- expire ------------------------------------------------------------------------------------


def test_expire_ends_the_fresh_window_and_keeps_the_entry_for_failing_over(
    engine: Failover, clock: FakeClock
) -> None:
    upstream = Customers()
    get = failover.failover("customers", fresh_for="5m", engine=engine)(upstream)
    get(1)
    settle(engine)
    get(1)
    assert upstream.calls == [1]  # fresh
    assert get.expire(1) is True
    assert get.expire(2) is False  # nothing stored
    settle(engine)
    second = get.referential(1)  # no fresh answer: the upstream is asked
    assert (upstream.calls, second.up_to_date, second.payload["n"]) == ([1, 1], True, 2)
    settle(engine)
    clock.advance(60)
    get(1)
    assert len(upstream.calls) == 2  # the new entry is fresh again
    get.expire(1)
    settle(engine)
    upstream.failing = True
    clock.advance(60)
    stale = get.referential(1)
    assert len(upstream.calls) == 3  # asked, failed, and recovered from the expired entry
    assert (stale.up_to_date, stale.payload["n"], stale.as_of) == (False, 2, second.as_of)


def test_expire_of_an_async_failover(engine: Failover, clock: FakeClock) -> None:
    calls: list[int] = []
    failing = False

    @failover.failover("acustomers", fresh_for="5m", engine=engine)
    async def get(customer: int) -> dict[str, Any]:
        calls.append(customer)
        if failing:
            raise ConnectionError("down")
        return {"customer": customer, "n": len(calls)}

    async def scenario() -> None:
        nonlocal failing
        first = await get.referential(1)
        settle(engine)
        await get(1)
        assert calls == [1]
        assert get.expire(1) is True
        settle(engine)
        failing = True
        stale = await get.referential(1)
        assert calls == [1, 1]
        assert (stale.up_to_date, stale.payload["n"], stale.as_of) == (False, 1, first.as_of)
        await loop_ends(engine)

    asyncio.run(scenario())


def test_expire_starts_no_refresh_ahead(clock: FakeClock) -> None:
    engine = Failover(clock=clock, metrics=False)
    upstream = Customers()
    get = failover.failover("c", fresh_for="5m", refresh_ahead=0.5, engine=engine)(upstream)
    get(1)
    get.expire(1)
    got = get.referential(1)  # answered by the upstream on the caller's thread
    assert (upstream.calls, got.payload["n"]) == ([1, 1], 2)
    engine.close()


def test_expire_lets_the_next_success_be_stored_within_the_store_interval(
    clock: FakeClock,
) -> None:
    engine = Failover(clock=clock, metrics=False)
    upstream = Customers()
    get = failover.failover("c", store_interval="1h", engine=engine)(upstream)
    get(1)
    get.expire(1)
    clock.advance(1)
    get(1)  # stored although within the interval: the expired entry is replaced
    found = get.peek(1)
    assert found is not None
    assert (found.payload["n"], found.as_of, found.fresh_ended) == (2, clock(), False)
    engine.close()


# -- invalidate_all ------------------------------------------------------------------------------


def test_invalidate_all_deletes_every_entry_of_the_failover_only(engine: Failover) -> None:
    upstream = Customers()
    get = failover.failover("customers", engine=engine)(upstream)
    other = failover.failover("others", engine=engine)(Customers())
    for c in range(4):
        get(c)
    other(1)
    settle(engine)
    assert get.invalidate_all() == 4
    settle(engine)
    assert all(get.peek(c) is None for c in range(4))
    assert other.peek(1) is not None
    upstream.failing = True
    with pytest.raises(ConnectionError):
        get(1)
    assert get.invalidate_all() == 0


def test_invalidate_all_of_an_async_failover(engine: Failover) -> None:
    @failover.failover("acustomers", engine=engine)
    async def get(customer: int) -> int:
        return customer

    async def scenario() -> None:
        for c in range(3):
            await get(c)
        await loop_ends(engine)

    asyncio.run(scenario())
    settle(engine)
    assert get.invalidate_all() == 3
    assert get.peek(1) is None


def test_invalidate_all_reaches_writes_still_queued(clock: FakeClock, tmp_path: Path) -> None:
    """A write queued before the call and landing after it must not bring an entry back."""
    engine = Failover(store=f"sqlite:///{tmp_path / 'q.db'}", clock=clock, metrics=False)
    get = failover.failover("c", engine=engine)(Customers())
    for c in range(50):
        get(c)
    get.invalidate_all()  # the writes may still be queued
    settle(engine)
    assert all(get.peek(c) is None for c in range(50))
    engine.close()


# -- tags ----------------------------------------------------------------------------------------


def test_invalidate_tag_deletes_the_tagged_entries_of_every_failover(engine: Failover) -> None:
    profile = failover.failover("profiles", tags=customer_tags, engine=engine)(Customers())
    orders = failover.failover(
        "orders", tags=lambda customer: [f"customer:{customer}"], engine=engine
    )(Customers())
    plain = failover.failover("plain", engine=engine)(Customers())
    for c in (42, 7):
        profile(c)
        orders(c)
        plain(c)
    settle(engine)
    assert engine.invalidate_tag("customer:42") == 2
    settle(engine)
    assert profile.peek(42) is None
    assert orders.peek(42) is None
    assert profile.peek(7) is not None
    assert orders.peek(7) is not None
    assert plain.peek(42) is not None
    assert engine.invalidate_tag("customers") == 1  # profile(7); profile(42) went already
    settle(engine)
    assert profile.peek(7) is None
    assert orders.peek(7) is not None
    assert engine.invalidate_tag("customer:42") == 0


def test_tags_of_an_async_failover(engine: Failover) -> None:
    @failover.failover("aprofiles", tags=customer_tags, engine=engine)
    async def get(customer: int) -> int:
        return customer

    async def scenario() -> None:
        await get(42)
        await get(7)
        await loop_ends(engine)

    asyncio.run(scenario())
    settle(engine)
    assert engine.invalidate_tag("customer:42") == 1
    settle(engine)
    assert get.peek(42) is None
    assert get.peek(7) is not None


def test_a_bad_tag_is_refused(clock: FakeClock) -> None:
    engine = Failover(clock=clock, metrics=False)
    for bad in ("", "x" * 201, "line\nbreak", 42):
        with pytest.raises(ValueError, match="tag"):
            engine.invalidate_tag(bad)  # type: ignore[arg-type]
    engine.close()


def test_tags_that_are_not_tags_fail_the_store_not_the_call(clock: FakeClock) -> None:
    engine = Failover(clock=clock, metrics=False)
    get = failover.failover("c", tags=lambda customer: "customer:1", engine=engine)(Customers())
    assert get(1)["customer"] == 1  # live, unstored (a string is not a list of tags)
    assert get.peek(1) is None
    with pytest.raises(ConfigurationError, match="tags= must be callable"):
        failover.failover("d", tags=["a"], engine=engine)(Customers())  # type: ignore[arg-type]
    engine.close()


class OwnStore:
    """A store of a user's own: the protocol's methods and nothing declared."""

    def __init__(self) -> None:
        self.inner = InMemoryStore()

    def store(self, payload: Any) -> int:
        return self.inner.store(payload)

    def store_many(self, payloads: Any) -> int:
        return self.inner.store_many(payloads)

    def find(self, name: str, key: str) -> Any:
        return self.inner.find(name, key)

    def find_many(self, name: str, keys: Any) -> Any:
        return self.inner.find_many(name, keys)

    def find_all(self, name: str) -> Any:
        return self.inner.find_all(name)

    def delete(self, name: str, key: str) -> None:
        self.inner.delete(name, key)

    def clean_by_expiry(self, now: Any) -> int:
        return self.inner.clean_by_expiry(now)

    def close(self) -> None:
        self.inner.close()


def test_a_store_of_your_own_expires_and_clears_by_fallback_and_refuses_tags(
    clock: FakeClock,
) -> None:
    engine = Failover(store=OwnStore(), clock=clock, metrics=False)
    upstream = Customers()
    get = failover.failover("c", fresh_for="5m", engine=engine)(upstream)
    get(1)
    get(2)
    assert get.expire(1)
    get(1)
    assert upstream.calls == [1, 2, 1]
    # The count is of the entries the store removed: writes still queued are cancelled, not
    # counted, so the writes land first.
    assert engine.flush(10)
    assert get.invalidate_all() == 2
    assert get.peek(1) is None
    with pytest.raises(ConfigurationError, match="keeps no tags"):
        engine.invalidate_tag("t")
    engine.close()


# -- per tenant ----------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_a_tag_and_clear_all_reach_the_current_tenant_only(
    kind: str, clock: FakeClock, tmp_path: Path
) -> None:
    store = (
        MultiTenantStore(lambda tenant: InMemoryStore())
        if kind == "memory"
        else f"sqlite:///{tmp_path}/t-{{tenant}}.db"
    )
    engine = Failover(store=store, clock=clock, metrics=False)
    get = failover.failover("c", tags=customer_tags, engine=engine)(Customers())
    for tenant in ("acme", "globex"):
        with failover.tenant(tenant):
            get(42)
            get(7)
    settle(engine)
    with failover.tenant("acme"):
        assert engine.invalidate_tag("customer:42") == 1
        settle(engine)
        assert get.peek(42) is None
        assert get.peek(7) is not None
    with failover.tenant("globex"):
        assert get.peek(42) is not None  # another tenant's entries are never reached
        assert get.invalidate_all() == 2
        settle(engine)
        assert get.peek(7) is None
    with failover.tenant("acme"):
        assert get.peek(7) is not None
    engine.close()


# -- scatter/gather --------------------------------------------------------------------------------


class Countries:
    def __init__(self) -> None:
        self.calls: list[Any] = []
        self.failing = False

    def __call__(self, ids: list[int]) -> list[dict[str, Any]]:
        self.calls.append(list(ids))
        if self.failing:
            raise ConnectionError("down")
        return [{"id": i, "n": len(self.calls)} for i in ids]


def test_a_tag_and_expire_reach_every_slice(engine: Failover, clock: FakeClock) -> None:
    upstream = Countries()
    countries = failover.failover(
        "countries",
        splitter=ListSplitter("id"),
        fresh_for="5m",
        tags=lambda ids: [f"region:{min(ids)}"],
        engine=engine,
    )(upstream)
    countries([1, 2, 3])
    countries([10, 11])
    settle(engine)
    countries([1, 3])
    assert len(upstream.calls) == 2  # fresh slices
    assert countries.expire([1, 2]) is True
    settle(engine)
    countries([3])
    assert len(upstream.calls) == 2  # 3 was not expired
    upstream.failing = True
    got = countries.referential([1, 2, 3])  # 1 and 2 no longer fresh: asked, failed, stale
    assert len(upstream.calls) == 3
    assert ([c["id"] for c in got.payload], got.up_to_date) == ([1, 2, 3], False)
    upstream.failing = False
    assert engine.invalidate_tag("region:1") == 3  # every slice carries the call's tags
    settle(engine)
    assert countries.peek([1, 2, 3]) is None
    assert countries.peek([10, 11]) is not None
    assert countries.invalidate_all() == 2


def test_a_near_copy_refreshed_from_the_far_store_keeps_its_tags(
    clock: FakeClock, tmp_path: Path
) -> None:
    """A far store reads no tags back: the near copy a read refreshes from it keeps the tags
    it had, so that invalidate_tag still removes it from this process's near store."""
    far = SqlStore(f"sqlite:///{tmp_path / 'far.db'}")
    store = TieredStore(InMemoryStore(), far)
    first = dataclasses.replace(entry(clock, "k"), tags=("t",))
    store.store(first)
    assert flush(store, WAIT)
    clock.advance(1)
    far.store(dataclasses.replace(entry(clock, "k"), tags=("t",)))  # another process's write
    assert store.find("n", "k").as_of == clock()  # read from far, kept in near
    assert store.near.find("n", "k").tags == ("t",)
    assert delete_tagged(store, "t") == 1
    assert flush(store, WAIT)
    assert store.find("n", "k") is None
    store.close()


def test_sql_tag_rows_of_entries_gone_are_cleaned(clock: FakeClock, tmp_path: Path) -> None:
    """A tag row stays when its entry goes (the key's next write brings the same row back);
    a cleanup removes the rows whose entry is gone, and only those."""
    store = SqlStore(f"sqlite:///{tmp_path / 'tags.db'}")
    store.store_many(
        [
            dataclasses.replace(entry(clock, k, ttl=ttl), tags=("t", "u"))
            for k, ttl in [("a", 10), ("b", 100)]
        ]
    )
    store.delete("n", "b")
    with store.engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT count(*) FROM failover_tags").scalar() == 4
    assert store.clean_by_expiry(clock.advance(50)) == 1  # "a" expired; its rows and b's go
    with store.engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT count(*) FROM failover_tags").scalar() == 0
    store.close()


def test_sql_tags_need_their_table(clock: FakeClock, tmp_path: Path) -> None:
    """With create_table=False and no tags table, a tagged write fails (the entry is not
    stored untagged), an untagged one is as before, and invalidate_tag says why."""
    url = f"sqlite:///{tmp_path / 'own.db'}"
    SqlStore(url).close()  # makes both tables
    store = SqlStore(url, create_table=False)
    with store.engine.begin() as conn:
        conn.exec_driver_sql("DROP TABLE failover_tags")
    store.store(entry(clock, "plain"))
    with pytest.raises(StoreError, match="cannot store tags"):
        store.store(dataclasses.replace(entry(clock, "tagged"), tags=("t",)))
    assert store.find("n", "tagged") is None
    with pytest.raises(StoreError, match="tag"):
        store.delete_tagged("t")
    assert store.find("n", "plain") is not None
    store.close()
