"""Optional members (issue 17): what a store, a permit source or a metrics object has beyond its
protocol is recognised by a runtime-checkable Protocol, and an object without it works as one
that never had it."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from failover import LocalPermits
from failover.closeable import Closeable
from failover.execution import Pool
from failover.stores.base import declared, delete_many, does_io, flush
from failover.stores.declaring import DeclaresIO, Flushable, SupportsDeleteMany


class PlainStore:
    """The `FailoverStore` methods that matter here, and nothing declared."""

    def __init__(self) -> None:
        self.deleted: list[tuple[str, str]] = []

    def delete(self, name: str, key: str) -> None:
        self.deleted.append((name, key))

    def clean_by_expiry(self, now: datetime) -> int:
        return 0


class DeclaringStore(PlainStore):
    does_io = False

    def __init__(self) -> None:
        super().__init__()
        self.isolating = True  # on the instance: recognised as well as a class attribute
        self.batches: list[list[str]] = []
        self.flushed: list[float | None] = []

    def delete_many(self, name: str, keys: Iterable[str]) -> None:
        self.batches.append(list(keys))

    def flush(self, timeout: float | None = None) -> bool:
        self.flushed.append(timeout)
        return False


def test_a_store_that_declares_nothing_takes_the_defaults() -> None:
    store: Any = PlainStore()
    said = declared(store)
    assert (said.does_io, said.writes_async, said.isolating, said.browsable) == (
        True,
        False,
        False,
        False,
    )
    assert (said.native_async, said.keeps_health, said.shares_results) == (False, False, False)
    delete_many(store, "n", ["a", "b", "a"])
    assert store.deleted == [("n", "a"), ("n", "b")]  # one delete per key, each once
    assert flush(store, 1.0) is True  # nothing queued
    assert not isinstance(store, DeclaresIO | SupportsDeleteMany | Flushable)


def test_a_store_declares_with_plain_members() -> None:
    store: Any = DeclaringStore()
    said = declared(store)
    assert (said.does_io, said.isolating, said.writes_async) == (False, True, False)
    assert does_io(store) is False
    delete_many(store, "n", ["a", "b"])
    assert (store.batches, store.deleted) == ([["a", "b"]], [])
    assert flush(store, 2.0) is False
    assert store.flushed == [2.0]


class SaysNone(PlainStore):
    flush = None  # "no flush", the way a subclass takes a method away
    delete_many = None


def test_a_method_set_to_none_is_not_declared() -> None:
    store: Any = SaysNone()
    assert flush(store) is True
    delete_many(store, "n", ["a"])
    assert store.deleted == [("n", "a")]


class BareSource:
    """A permit source with the `PermitSource` methods only (no take, kind or close)."""

    def __init__(self) -> None:
        self.local = LocalPermits(2)

    def bind(self, pool: str, permits: int, fair: bool) -> BareSource:
        return self

    def acquire(self, weight: int, deadline: float | None) -> object | None:
        return self.local.acquire(weight, deadline)

    async def aacquire(self, weight: int, deadline: float | None) -> object | None:
        return await self.local.aacquire(weight, deadline)

    def release(self, lease: object) -> None:
        self.local.release(lease)

    def in_use(self) -> int:
        return self.local.in_use()

    def waiting(self) -> int:
        return self.local.waiting()


def test_a_permit_source_without_the_optional_members() -> None:
    pool = Pool("bare", 2, source=BareSource())
    assert pool.kind == "BareSource"  # named after its class
    assert not isinstance(pool.source, Closeable)
    pool.close()  # nothing to close
    assert Pool("local", 2).kind == "local"
