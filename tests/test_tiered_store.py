"""`TieredStore`: a process-local store in front of a shared one (a real Redis server, from
tests/redis_server.py): writes to both, the freshest entry wins, and the near store answers
while the far one is down."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

import failover
from failover.errors import ConfigurationError, StoreError
from failover.metrics import PrometheusMetrics
from failover.stores import (
    AsyncWriteStore,
    CachetoolsStore,
    CopyingStore,
    InMemoryStore,
    MultiTenantStore,
    TieredStore,
    make_store,
)
from failover.stores.backends.redis import RedisStore
from failover.stores.base import does_io, flush, writes_async

from . import redis_server
from .conftest import FakeClock, Upstream
from .own_servers import running
from .redis_server import RedisServer
from .test_store_contract import entry


@pytest.fixture
def own_server() -> Iterator[RedisServer]:
    """A server of the test's own, started: the test may kill and restart it."""
    yield from running(RedisServer())


def redis_far(server: RedisServer, clock: FakeClock, prefix: str = "failover:") -> Any:
    return RedisStore(server.url, prefix=prefix, clock=clock, socket_timeout=0.5)


def test_writes_go_to_both_the_far_one_queued(own_server: RedisServer, clock: FakeClock) -> None:
    far = redis_far(own_server, clock)
    store = TieredStore(InMemoryStore(), far)
    assert isinstance(store.far, AsyncWriteStore)
    assert store.far.inner is far
    store.store(entry(clock, "k", {"v": 1}))
    assert store.near.find("n", "k") is not None  # at once
    assert flush(store, timeout=10)  # flushing walks both tiers, down to the far one's queue
    found = far.find("n", "k")
    assert found is not None
    assert found.payload == {"v": 1}
    store.delete("n", "k")
    assert store.find("n", "k") is None
    assert flush(store, timeout=10)
    assert far.find("n", "k") is None
    store.close()


def test_what_it_declares() -> None:
    local = TieredStore(InMemoryStore(), InMemoryStore())
    assert not isinstance(local.far, AsyncWriteStore)  # nothing to queue for: no I/O
    assert (does_io(local), writes_async(local)) == (False, True)
    queued = AsyncWriteStore(InMemoryStore())
    assert TieredStore(InMemoryStore(), queued).far is queued  # queued already: kept as is
    remote = TieredStore(InMemoryStore(), RedisStore("redis://127.0.0.1:1/0"))
    assert (does_io(remote), writes_async(remote)) == (True, True)
    remote.close()


def test_the_freshest_entry_wins_and_is_kept_near(
    own_server: RedisServer, clock: FakeClock
) -> None:
    mine = TieredStore(InMemoryStore(), redis_far(own_server, clock))
    theirs = TieredStore(InMemoryStore(), redis_far(own_server, clock))  # another instance
    mine.store(entry(clock, "k", {"by": "me"}))
    assert flush(mine, 10)
    clock.advance(5)
    theirs.store(entry(clock, "k", {"by": "them"}))
    assert flush(theirs, 10)
    found = mine.find("n", "k")
    assert found is not None
    assert found.payload == {"by": "them"}
    kept = mine.near.find("n", "k")
    assert kept is not None
    assert kept.payload == {"by": "them"}  # for the next outage
    many = theirs.find_many("n", ["k", "absent"])
    assert list(many) == ["k"]
    assert many["k"].payload == {"by": "them"}
    clock.advance(5)
    mine.store(entry(clock, "k", {"by": "me, later"}))  # fresher in near than far yet
    found = mine.find("n", "k")
    assert found is not None
    assert found.payload == {"by": "me, later"}
    assert [p.payload for p in mine.find_all("n")] == [{"by": "me, later"}]
    mine.close()
    theirs.close()


def test_near_answers_while_far_is_down(own_server: RedisServer, clock: FakeClock) -> None:
    registry = CollectorRegistry()
    store = TieredStore(
        InMemoryStore(),
        redis_far(own_server, clock),
        metrics=PrometheusMetrics.for_registry(registry),
    )
    store.store_many([entry(clock, "a", {"v": "a"}), entry(clock, "b", {"v": "b"})])
    assert flush(store, 10)
    own_server.kill()
    found = store.find("n", "a")
    assert found is not None
    assert found.payload == {"v": "a"}
    assert set(store.find_many("n", ["a", "b", "c"])) == {"a", "b"}
    assert [p.key for p in store.find_all("n")] == ["a", "b"]
    with pytest.raises(StoreError):
        store.find("n", "never-stored")  # near misses and far is down: an error, not a miss
    store.store(entry(clock, "c", {"v": "c"}))  # near takes it; far's write waits, retried
    assert not flush(store, 10)  # tried: it waits for far
    assert not registry.get_sample_value("failover_async_writes_failed_total")
    found = store.find("n", "c")
    assert found is not None
    own_server.start()
    store.store(entry(clock, "d", {"v": "d"}))
    assert flush(store, 10)
    assert store.far.find("n", "d") is not None
    store.close()


def test_an_engine_on_a_tiered_store_rides_out_the_shared_store_going_down(
    own_server: RedisServer, clock: FakeClock, upstream: Upstream
) -> None:
    def engine() -> failover.Failover:
        near = CachetoolsStore(clock=clock)
        return failover.Failover(
            TieredStore(near, redis_far(own_server, clock)), clock=clock, metrics=False
        )

    first, second = engine(), engine()  # two instances of one service

    def decorate(on: failover.Failover) -> Any:
        @failover.failover("svc.rates", engine=on)
        def rate(ccy: str) -> dict[str, str]:
            return upstream({"ccy": ccy})  # type: ignore[return-value]

        return rate

    rate_first, rate_second = decorate(first), decorate(second)
    for each in (first, second):
        assert isinstance(each.store, CopyingStore)  # no second queue over the tiered store
        assert isinstance(each.store.inner, TieredStore)
    rate_first("EUR")
    assert first.flush(timeout=10)  # the engine's flush walks both tiers
    upstream.fail()
    clock.advance(60)
    stale = rate_second.referential("EUR")  # from the far store: the first instance wrote it
    assert (stale.up_to_date, stale.as_of) == (False, clock() - timedelta(seconds=60))
    own_server.kill()
    again = rate_second.referential("EUR")  # far is down: the near store kept it
    assert again.payload == {"ccy": "EUR"}
    assert again.up_to_date is False
    first.close()
    second.close()


def test_tiered_urls(own_server: RedisServer, clock: FakeClock, upstream: Upstream) -> None:
    store = make_store(f"tiered+{own_server.url}", clock=clock)
    assert isinstance(store, TieredStore)
    assert isinstance(store.near, CachetoolsStore)
    assert isinstance(store.far, AsyncWriteStore)
    assert isinstance(store.far.inner, RedisStore)
    store.close()
    prefix = redis_server.unique_prefix()
    engine = failover.Failover(
        f"tiered+{own_server.url}?prefix={prefix}",
        tenant_resolver=lambda: "acme",
        clock=clock,
        metrics=False,
    )

    @failover.failover("t.rates", engine=engine)
    def rate(ccy: str) -> dict[str, str]:
        return upstream({"ccy": ccy})  # type: ignore[return-value]

    rate("EUR")
    assert engine.flush(timeout=10)
    router = engine.store
    assert isinstance(router, MultiTenantStore)
    tiered = router.stores["acme"]
    assert isinstance(tiered, CopyingStore)
    assert isinstance(tiered.inner, TieredStore)
    engine.close()
    client = own_server.client()
    assert client.smembers(f"{prefix}t:acme:names") == {b"t.rates"}
    client.close()


def test_bad_tiers_are_configuration_errors() -> None:
    with pytest.raises(ConfigurationError, match="near must be an in-process store"):
        TieredStore(RedisStore("redis://127.0.0.1:1/0"), InMemoryStore())
    with pytest.raises(ConfigurationError, match="far must be a store"):
        TieredStore(InMemoryStore(), "redis://127.0.0.1:1/0")  # type: ignore[arg-type]


def test_the_engine_counts_what_the_far_store_failed_to_write(
    own_server: RedisServer, clock: FakeClock, upstream: Upstream
) -> None:
    registry = CollectorRegistry()
    engine = failover.Failover(
        TieredStore(InMemoryStore(), redis_far(own_server, clock)), clock=clock, metrics=registry
    )

    @failover.failover("svc.rates", engine=engine)
    def rate(ccy: str) -> dict[str, str]:
        return upstream({"ccy": ccy})  # type: ignore[return-value]

    own_server.kill()
    with engine:
        assert rate("EUR") == {"ccy": "EUR"}
        assert not engine.flush(timeout=10)  # tried; it waits for Redis, retried
        # The queue the tiered store put in front of Redis reports to the engine's metrics:
        # nothing given up yet (its close gives it up).
        assert not registry.get_sample_value("failover_async_writes_failed_total")
        upstream.fail()
        assert rate.referential("EUR").up_to_date is False  # from the near store


class _HeldRead(InMemoryStore):
    """A far store whose ``find`` reads, then waits until released: a read in flight."""

    def __init__(self) -> None:
        super().__init__()
        self.read = threading.Event()
        self.release = threading.Event()

    def find(self, name: str, key: str) -> Any:
        found = super().find(name, key)
        self.read.set()
        assert self.release.wait(5)
        return found


def test_a_delete_during_a_read_is_not_undone_by_the_refill(clock: FakeClock) -> None:
    far = _HeldRead()
    tiered = TieredStore(InMemoryStore(), far)
    far.store(entry(clock, "k", {"by": "another instance"}))  # in far only: a read refills near
    reader = threading.Thread(target=tiered.find, args=("n", "k"))
    reader.start()
    assert far.read.wait(5)  # the read has far's entry in hand
    tiered.delete("n", "k")  # invalidated meanwhile, in both tiers
    far.release.set()
    reader.join(5)
    assert tiered.near.find("n", "k") is None  # the refill did not bring it back
    assert tiered.find("n", "k") is None


async def test_async_reads_await_the_far_store_and_keep_its_entries_near(
    own_server: RedisServer, clock: FakeClock
) -> None:
    far = redis_far(own_server, clock)
    store = TieredStore(InMemoryStore(), far)
    assert store.native_async
    far.store_many([entry(clock, "a", {"v": "a"}), entry(clock, "b", {"v": "b"})])
    found = await store.afind_many("n", ["a", "b", "c"])
    assert {k: p.payload for k, p in found.items()} == {"a": {"v": "a"}, "b": {"v": "b"}}
    assert store.near.find("n", "a") is not None  # kept near for the next outage
    await store.astore_many([entry(clock, "c", {"v": "c"})])
    assert (await store.afind("n", "c")).payload == {"v": "c"}  # type: ignore[union-attr]
    await store.aclose()
    own_server.kill()
    assert (await store.afind("n", "a")).payload == {"v": "a"}  # type: ignore[union-attr]
    with pytest.raises(StoreError):
        await store.afind("n", "never-stored")  # near misses and far is down: an error
    await asyncio.to_thread(store.close)
