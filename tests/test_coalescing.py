"""Write coalescing: ``store_interval`` bounds how often one key is stored."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import failover
from failover import ConfigurationError, Failover, InMemoryStore

from .conftest import FakeClock


class CountingStore(InMemoryStore):
    """A real in-memory store that counts the writes reaching it."""

    def __init__(self) -> None:
        super().__init__(max_entries=0)
        self.writes = 0
        self._count_lock = threading.Lock()

    def store(self, payload: Any) -> None:
        with self._count_lock:
            self.writes += 1
        super().store(payload)


def test_a_success_within_the_interval_is_live_but_not_stored_again(clock: FakeClock) -> None:
    store = CountingStore()
    eng = Failover(store, clock=clock, metrics=False)

    @failover.failover("rates", engine=eng, store_interval="10s")
    def rate(code: str) -> float:
        return rate.value  # type: ignore[attr-defined,no-any-return]

    rate.value = 1.0  # type: ignore[attr-defined]
    first = rate.referential("EUR")
    rate.value = 2.0  # type: ignore[attr-defined]
    clock.advance(5)
    second = rate.referential("EUR")
    assert second.payload == 2.0
    assert second.up_to_date  # the caller still gets the live value
    assert store.writes == 1
    stored = rate.peek("EUR")
    assert stored is not None
    assert stored.payload == 1.0
    assert stored.as_of == first.as_of  # staleness added: at most the interval
    clock.advance(5)  # the interval has passed: stored again
    rate("EUR")
    assert store.writes == 2
    assert rate.peek("EUR").payload == 2.0  # type: ignore[union-attr]
    rate("USD")  # another key is its own
    assert store.writes == 3
    eng.close()


def test_the_engine_interval_applies_unless_a_failover_sets_its_own(clock: FakeClock) -> None:
    store = CountingStore()
    eng = Failover(store, clock=clock, metrics=False, store_interval=60)

    @failover.failover("a", engine=eng)
    def a(x: int) -> int:
        return x

    @failover.failover("b", engine=eng, store_interval=0)
    def b(x: int) -> int:
        return x

    for _ in range(3):
        a(1)
        b(1)
    assert store.writes == 1 + 3
    assert eng.store_interval == timedelta(seconds=60)
    eng.close()


def test_invalidate_forgets_the_last_store(clock: FakeClock) -> None:
    store = CountingStore()
    eng = Failover(store, clock=clock, metrics=False, store_interval="1h")

    @failover.failover("inv", engine=eng)
    def f(x: int) -> int:
        return x

    f(1)
    f.invalidate(1)
    f(1)
    assert store.writes == 2
    assert f.peek(1) is not None
    eng.close()


def test_each_tenant_has_its_own_last_store(clock: FakeClock) -> None:
    eng = Failover("memory://", tenant_resolver=failover.current_tenant, clock=clock,
                   metrics=False, store_interval="1h")  # fmt: skip

    @failover.failover("tenanted", engine=eng)
    def f(x: int) -> int:
        return x

    for tenant in ("acme", "globex"):
        with failover.tenant(tenant):
            f(1)
    for tenant in ("acme", "globex"):
        with failover.tenant(tenant):
            assert f.peek(1) is not None
    eng.close()


def test_the_bookkeeping_is_bounded(clock: FakeClock) -> None:
    eng = Failover(CountingStore(), clock=clock, metrics=False, store_interval="1h")
    handler: Any = eng.handler
    handler.max_coalesced = 50

    @failover.failover("many", engine=eng)
    def f(x: int) -> int:
        return x

    for i in range(500):
        f(i)
    assert len(handler._until) == 50
    eng.close()


def test_bad_intervals_are_refused() -> None:
    with pytest.raises(ConfigurationError, match=r"'bad'.*store_interval"):

        @failover.failover("bad", store_interval="-1s")
        def f() -> None: ...

    with pytest.raises(ConfigurationError, match="store_interval"):
        Failover(store_interval="soon")


class TickingClock:
    """A shared fake clock that moves 1 ms at every read: threads make simulated time pass."""

    def __init__(self) -> None:
        self.now = datetime(2026, 1, 1, tzinfo=UTC)
        self._lock = threading.Lock()

    def __call__(self) -> datetime:
        with self._lock:
            self.now += timedelta(milliseconds=1)
            return self.now


def test_a_fleet_of_threads_writes_at_most_keys_per_interval() -> None:
    """8 threads calling 100 keys for 3 (simulated) seconds with store_interval=1s write at
    most 100 x 3 (+100) entries, where every call would otherwise write."""
    clock = TickingClock()
    store = CountingStore()
    eng = Failover(store, clock=clock, metrics=False, store_interval="1s")
    end = clock.now + timedelta(seconds=3)

    @failover.failover("fleet", engine=eng)
    def f(x: int) -> int:
        return x

    calls = [0] * 8

    def worker(i: int) -> None:
        while clock.now < end:
            for key in range(100):
                f(key)
                calls[i] += 1

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(calls) > 2_000  # the clock moves per read: about one call per simulated ms
    assert store.writes <= 100 * 3 + 100
    eng.close()


class FlakyStore(CountingStore):
    """A real in-memory store whose writes fail while ``down`` is set."""

    down = False

    def store(self, payload: Any) -> None:
        if self.down:
            raise OSError("store down")
        super().store(payload)

    def store_many(self, payloads: Any) -> None:
        if self.down:
            raise OSError("store down")
        super().store_many(payloads)


def test_a_failed_store_does_not_count_as_the_last_store(clock: FakeClock) -> None:
    # The interval runs from a key's last store: a write that failed stored nothing, so the
    # next success must try again, or an outage would find nothing for up to the interval.
    store = FlakyStore()
    eng = Failover(store, clock=clock, metrics=False, async_writes=False, store_interval="1h")

    @failover.failover("flaky", engine=eng)
    def f(x: int) -> int:
        return x

    store.down = True
    assert f(1) == 1  # the live result returns; the write failed
    store.down = False
    f(1)
    assert store.writes == 1
    assert f.peek(1) is not None
    eng.close()


def test_a_failed_slice_store_does_not_count_as_the_last_store(clock: FakeClock) -> None:
    store = FlakyStore()
    eng = Failover(store, clock=clock, metrics=False, async_writes=False, store_interval="1h")

    @failover.failover("flaky_list", engine=eng, splitter=failover.ListSplitter("id"))
    def f(ids: str) -> list[dict[str, str]]:
        return [{"id": i} for i in ids.split(",")]

    store.down = True
    f("1,2")
    store.down = False
    f("1,2")
    assert f.peek("1,2") is not None
    eng.close()
