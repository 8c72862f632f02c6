"""The engine's store chain: multi-tenant → copying → async writes → raw store, assembled from
``store``, ``async_writes`` and ``tenant_resolver``; and what the async shell does with it."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

import failover
from failover import ConfigurationError, Failover, InMemoryStore, ReferentialPayload
from failover.stores import AsyncWriteStore, CopyingStore, FailoverStore, MultiTenantStore
from failover.stores.backends.sql import SqlStore
from failover.stores.base import isolating, walk

from .conftest import FakeClock, Upstream

WAIT = 10.0


def layers(store: object) -> list[str]:
    """The chain's layers, outermost first, by class name."""
    names = []
    while store is not None:
        names.append(type(store).__name__)
        store = getattr(store, "inner", None)
    return names


CHAINS = {
    # (store, async_writes): the layers of the (tenant's) chain, outermost first
    ("memory", None): ["CopyingStore", "InMemoryStore"],
    ("memory", True): ["CopyingStore", "AsyncWriteStore", "InMemoryStore"],
    ("memory", False): ["CopyingStore", "InMemoryStore"],
    ("sqlite", None): ["CopyingStore", "DeadlineStore", "AsyncWriteStore", "SqlStore"],
    ("sqlite", True): ["CopyingStore", "DeadlineStore", "AsyncWriteStore", "SqlStore"],
    ("sqlite", False): [
        "DeadlineStore",
        "SqlStore",
    ],  # it encodes on the caller's thread: that isolates
}


@pytest.mark.parametrize("multi_tenant", [False, True], ids=["single", "tenants"])
@pytest.mark.parametrize(("kind", "async_writes"), sorted(CHAINS, key=str))
def test_the_assembled_layers(
    kind: str, async_writes: bool | None, multi_tenant: bool, tmp_path: Path
) -> None:
    url = "memory://" if kind == "memory" else f"sqlite:///{tmp_path / 'f.db'}"
    resolver = (lambda: "acme") if multi_tenant else None
    engine = Failover(url, async_writes=async_writes, tenant_resolver=resolver, metrics=False)
    try:
        chain: FailoverStore = engine.store
        if multi_tenant:
            assert isinstance(chain, MultiTenantStore)
            assert chain.resolver is resolver
            chain = chain.store_for("acme")
        assert layers(chain) == CHAINS[kind, async_writes]
        if multi_tenant and kind == "sqlite":
            raw = list(walk(chain))[-1]
            assert raw.table.name == "acme_failover_store"  # one table per tenant
        io = kind == "sqlite"
        assert engine.blocking is io  # async functions read on a thread
        assert engine.blocking_writes is (io and async_writes is False)
    finally:
        engine.close()


def test_multi_tenancy_turns_on_with_a_factory_or_a_tenant_url(tmp_path: Path) -> None:
    factory_engine = Failover(lambda tenant: InMemoryStore(), metrics=False)
    store = factory_engine.store
    assert isinstance(store, MultiTenantStore)
    assert store.resolver is failover.current_tenant
    assert layers(store.store_for("acme")) == ["CopyingStore", "InMemoryStore"]
    # Nothing says a plain factory's stores are in-process: async shells play safe.
    assert factory_engine.blocking
    assert not factory_engine.blocking_writes
    factory_engine.close()

    url_engine = Failover(f"sqlite:///{tmp_path}/f_{{tenant}}.db", metrics=False)
    assert isinstance(url_engine.store, MultiTenantStore)
    with failover.tenant("acme"):
        url_engine.store.find("n", "k")
    assert (tmp_path / "f_acme.db").exists()
    url_engine.close()


def test_engine_settings_that_cannot_work(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="not one store every tenant would share"):
        Failover(InMemoryStore(), tenant_resolver=failover.current_tenant)
    with pytest.raises(ConfigurationError, match="tenant_resolver must be callable"):
        Failover("memory://", tenant_resolver="acme")  # type: ignore[arg-type]
    # A bad URL fails at construction, not when the first tenant comes.
    with pytest.raises(ConfigurationError, match="max_entries"):
        Failover("memory://?max_entries=lots", tenant_resolver=failover.current_tenant)
    with pytest.raises(ConfigurationError, match="does not exist"):
        Failover(f"sqlite:///{tmp_path}/nowhere/f.db", tenant_resolver=failover.current_tenant)
    with pytest.raises(ConfigurationError, match="does not exist"):
        Failover(f"sqlite:///{tmp_path}/nowhere/{{tenant}}.db")


def test_given_layers_are_kept_and_not_doubled() -> None:
    router = MultiTenantStore(lambda t: InMemoryStore(), lambda: "acme")
    engine = Failover(router, metrics=False)
    assert engine.store is router  # a router stays outermost, not queued or copied
    engine.close()
    queue = AsyncWriteStore(InMemoryStore())
    engine = Failover(queue, async_writes=True, metrics=False)
    assert layers(engine.store) == ["CopyingStore", "AsyncWriteStore", "InMemoryStore"]
    engine.close()


class Gated(InMemoryStore):
    """Its ``store_many`` waits for ``gate``: closing the gate parks the async-writes worker."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.entered = threading.Event()

    def store_many(self, payloads: Sequence[ReferentialPayload[Any]]) -> None:
        self.entered.set()
        assert self.gate.wait(WAIT)
        super().store_many(payloads)


def test_mutating_a_live_result_while_its_write_is_queued_changes_nothing(
    clock: FakeClock,
) -> None:
    raw = Gated()
    engine = Failover(raw, async_writes=True, clock=clock, metrics=False)

    @failover.failover("f", engine=engine)
    def f(x: int) -> dict[str, Any]:
        return {"x": x, "tags": ["a"]}

    try:
        f(0)
        assert raw.entered.wait(WAIT)  # the worker is parked: the next write stays queued
        result = f(1)
        result["x"] = "changed"
        result["tags"].append("b")
        queued = f.peek(1)
        assert queued is not None
        assert queued.payload == {"x": 1, "tags": ["a"]}
        queued.payload["tags"].append("c")  # what a reader gets is its own copy, too
        raw.gate.set()
        assert engine.flush(WAIT)
        stored = raw.find("f", queued.key)
        assert stored is not None
        assert stored.payload == {"x": 1, "tags": ["a"]}
    finally:
        raw.gate.set()
        engine.close()


def test_close_flushes_pending_writes(tmp_path: Path, upstream: Upstream) -> None:
    url = f"sqlite:///{tmp_path / 'f.db'}"
    engine = Failover(url, metrics=False)

    @failover.failover("f", engine=engine)
    def f(x: int) -> object:
        return upstream(x)

    for i in range(200):
        f(i)
    engine.close()
    reader = SqlStore(url)
    assert len(reader.find_all("f")) == 200
    reader.close()


def test_clean_reaches_every_tenant(clock: FakeClock, upstream: Upstream) -> None:
    engine = Failover("memory://", tenant_resolver=failover.current_tenant, clock=clock)

    @failover.failover("short", ttl=10, engine=engine)
    def short(x: int) -> object:
        return upstream(x)

    for name in ("acme", "globex", "initech"):
        with failover.tenant(name):
            short(1)
            short(2)
    clock.advance(11)
    assert engine.clean() == 6
    engine.close()


class ThreadRecording(InMemoryStore):
    """An in-memory store that says it does I/O, and records the threads it is called on."""

    does_io = True

    def __init__(self) -> None:
        super().__init__()
        self.threads: set[int] = set()

    def store(self, payload: ReferentialPayload[Any]) -> None:
        self.threads.add(threading.get_ident())
        super().store(payload)

    def store_many(self, payloads: Sequence[ReferentialPayload[Any]]) -> None:
        self.threads.add(threading.get_ident())
        super().store_many(payloads)

    def find(self, name: str, key: str) -> ReferentialPayload[Any] | None:
        self.threads.add(threading.get_ident())
        return super().find(name, key)


@pytest.mark.parametrize("async_writes", [None, False])
async def test_async_functions_never_do_store_io_on_the_event_loop(
    async_writes: bool | None, upstream: Upstream
) -> None:
    raw = ThreadRecording()
    engine = Failover(raw, async_writes=async_writes, metrics=False)

    @failover.failover("f", engine=engine)
    async def f(x: int) -> object:
        return upstream(x)

    try:
        assert await f(1) == 1
        assert engine.flush(WAIT)
        upstream.fail()
        assert await f(1) == 1  # recovered
        assert raw.threads
        assert threading.get_ident() not in raw.threads
    finally:
        engine.close()


def test_a_given_copying_layer_is_not_doubled() -> None:
    assert isolating(CopyingStore(InMemoryStore()))  # it declares so, as SQL and Redis stores do
    engine = Failover(CopyingStore(InMemoryStore()), metrics=False)
    assert layers(engine.store) == ["CopyingStore", "InMemoryStore"]
    engine.close()
    # Queued, a copy is still made before the queue: the caller's value is not encoded yet.
    engine = Failover(CopyingStore(InMemoryStore()), async_writes=True, metrics=False)
    assert layers(engine.store)[:2] == ["CopyingStore", "AsyncWriteStore"]
    engine.close()
