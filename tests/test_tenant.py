"""Multi-tenancy: the tenant context, `MultiTenantStore`, the SQL strategies, and tenants kept
apart end to end on memory, SQLite and PostgreSQL stores."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

import failover
from failover import ConfigurationError, Failover, ReferentialPayload, StoreError
from failover.stores import (
    InMemoryStore,
    MultiTenantStore,
    per_tenant_databases,
    per_tenant_tables,
)
from failover.stores.factory import per_tenant_stores
from failover.stores.layers.routing import safe_tenant_id
from failover.tenant import pinned

from . import postgres
from .conftest import FakeClock, Upstream

HOSTILE = [
    "acme; DROP TABLE failover_store; --",
    "acme_failover_store x",
    "../../etc/passwd",
    "Acme",  # would share a SQLite table (and, on some file systems, a file) with "acme"
    "",
    "a" * 32,
    "acme\x00",
    "acme-corp",
]
WAIT = 10.0  # a bound on waits that only a broken test reaches


def entry(clock: FakeClock, key: str, value: object) -> ReferentialPayload[Any]:
    now = clock()
    return ReferentialPayload("n", key, value, now, now + timedelta(seconds=60), True)


# -- the tenant context -----------------------------------------------------------------------


def test_tenant_blocks_nest_and_restore() -> None:
    assert failover.current_tenant() is None
    with failover.tenant("acme") as name:
        assert name == "acme"
        assert failover.current_tenant() == "acme"
        with failover.tenant("globex"):
            assert failover.current_tenant() == "globex"
            with failover.tenant(None):
                assert failover.current_tenant() is None
        assert failover.current_tenant() == "acme"
    assert failover.current_tenant() is None


def test_one_tenant_instance_can_be_entered_again() -> None:
    acme = failover.tenant("acme")
    with acme, failover.tenant("globex"), acme:
        assert failover.current_tenant() == "acme"
    assert failover.current_tenant() is None


def test_tenant_as_a_decorator() -> None:
    @failover.tenant("acme")
    def sync() -> str | None:
        return failover.current_tenant()

    @failover.tenant("globex")
    async def coro() -> str | None:
        await asyncio.sleep(0)
        return failover.current_tenant()

    assert sync() == "acme"
    assert asyncio.run(coro()) == "globex"
    assert failover.current_tenant() is None


def test_tenant_names_must_be_strings() -> None:
    with pytest.raises(ConfigurationError, match="string"):
        failover.tenant(42)  # type: ignore[arg-type]


async def test_the_tenant_follows_asyncio_tasks_and_threads() -> None:
    both_set = asyncio.Barrier(2)

    async def serve(name: str) -> tuple[str | None, str | None]:
        with failover.tenant(name):
            await both_set.wait()  # the two tasks interleave here
            in_thread = await asyncio.to_thread(failover.current_tenant)
            return failover.current_tenant(), in_thread

    results = await asyncio.gather(serve("acme"), serve("globex"))
    assert results == [("acme", "acme"), ("globex", "globex")]
    assert failover.current_tenant() is None


# -- MultiTenantStore -------------------------------------------------------------------------


class CountingFactory:
    """Makes in-memory stores, counting how many per tenant."""

    does_io = False

    def __init__(self) -> None:
        self.made: dict[str, int] = {}
        self.closed = False
        self._lock = threading.Lock()

    def __call__(self, tenant: str) -> InMemoryStore:
        with self._lock:
            self.made[tenant] = self.made.get(tenant, 0) + 1
        return InMemoryStore()

    def close(self) -> None:
        self.closed = True


def test_64_threads_meeting_a_new_tenant_create_one_store(clock: FakeClock) -> None:
    factory = CountingFactory()
    store = MultiTenantStore(factory)
    start = threading.Barrier(64)
    errors: list[BaseException] = []

    def work(i: int) -> None:
        try:
            with failover.tenant("acme"):
                start.wait()
                store.store(entry(clock, f"k{i}", i))
        except BaseException as exc:  # re-raised on the main thread below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(64)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert errors == []
    assert factory.made == {"acme": 1}
    with failover.tenant("acme"):
        assert len(store.find_all("n")) == 64


def test_strict_refuses_unknown_tenants(clock: FakeClock) -> None:
    factory = CountingFactory()
    store = MultiTenantStore(
        factory, default_tenant="shared", strict=True, tenants=["acme", "globex"]
    )
    with failover.tenant("acme"):
        store.store(entry(clock, "k", 1))
    with failover.tenant("initech"), pytest.raises(StoreError, match="unknown tenant 'initech'"):
        store.store(entry(clock, "k", 1))
    store.store(entry(clock, "k", 2))  # no tenant: the default tenant, allowed though not listed
    assert factory.made == {"acme": 1, "shared": 1}
    with pytest.raises(ConfigurationError, match="strict=True needs tenants"):
        MultiTenantStore(factory, strict=True)


def test_non_strict_lets_unknown_tenants_through_with_one_warning(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "failover")
    factory = CountingFactory()
    store = MultiTenantStore(factory, tenants=["acme"])
    with failover.tenant("initech"):
        for i in range(3):
            store.store(entry(clock, f"k{i}", i))
        assert len(store.find_all("n")) == 3
    with failover.tenant("acme"):
        store.store(entry(clock, "k", 1))
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1
    assert "'initech'" in warnings[0]
    assert factory.made == {"initech": 1, "acme": 1}


def test_no_tenant_uses_the_default_tenant_or_fails(clock: FakeClock) -> None:
    with_default = MultiTenantStore(CountingFactory(), default_tenant="shared")
    with_default.store(entry(clock, "k", 1))
    assert list(with_default.stores) == ["shared"]
    without = MultiTenantStore(CountingFactory())
    with pytest.raises(StoreError, match="no current tenant"):
        without.find("n", "k")


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ConfigurationError, match="factory must be callable"):
        MultiTenantStore("memory://")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="resolver must be callable"):
        MultiTenantStore(CountingFactory(), resolver="acme")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="tenants must be a collection"):
        MultiTenantStore(CountingFactory(), tenants="acme")
    with pytest.raises(ConfigurationError, match="default_tenant"):
        MultiTenantStore(CountingFactory(), default_tenant=1)  # type: ignore[arg-type]


def test_clean_and_close_reach_every_tenant(clock: FakeClock) -> None:
    factory = CountingFactory()
    store = MultiTenantStore(factory)
    for name in ("acme", "globex", "initech"):
        with failover.tenant(name):
            store.store(entry(clock, "k", name))
    assert store.clean_by_expiry(clock.advance(61)) == 3
    stores = store.stores
    store.close()
    assert factory.closed
    assert store.stores == {}
    assert all(len(s) == 0 for s in stores.values() if isinstance(s, InMemoryStore))


# -- tenant ids in names ----------------------------------------------------------------------


@pytest.mark.parametrize("tenant", HOSTILE)
def test_hostile_tenant_ids_never_name_anything(tenant: str, tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="cannot name a table or a file"):
        safe_tenant_id(tenant)
    tables = per_tenant_tables(f"sqlite:///{tmp_path / 'f.db'}")
    databases = per_tenant_databases(f"sqlite:///{tmp_path}/{{tenant}}.db")
    for factory in (tables, databases):
        store = MultiTenantStore(factory, resolver=lambda: tenant)
        with pytest.raises(StoreError, match="cannot name a table or a file"):
            store.find("n", "k")
        store.close()
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'f.db'}")
    with engine.connect() as conn:
        assert conn.exec_driver_sql("SELECT name FROM sqlite_master").all() == []
    engine.dispose()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.db"]


def test_per_tenant_tables_checks_every_prefix_up_front(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'f.db'}"
    with pytest.raises(ConfigurationError, match=r"tenant 'globex'.*table_prefix"):
        per_tenant_tables(url, prefixes={"acme": "acme_", "globex": "globex; drop"})
    with pytest.raises(ConfigurationError, match="would share a table"):
        per_tenant_tables(url, prefixes={"acme": "ACME_", "other": "acme_"})
    factory = per_tenant_tables(url, prefixes={"acme": "ACME_"})
    store = MultiTenantStore(factory, resolver=lambda: "globex")
    with pytest.raises(StoreError, match="no table prefix for tenant 'globex'"):
        store.find("n", "k")
    assert store.store_for("acme").table.name == "ACME_failover_store"  # type: ignore[attr-defined]
    store.close()


def test_per_tenant_factories_refuse_what_cannot_isolate(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="must contain '\\{tenant\\}'"):
        per_tenant_databases(f"sqlite:///{tmp_path / 'f.db'}")
    with pytest.raises(ConfigurationError, match="not an in-process store URL"):
        per_tenant_stores(f"sqlite:///{tmp_path / 'f.db'}")
    with pytest.raises(ConfigurationError, match="max_entries"):
        per_tenant_stores("memory://?max_entries=lots")
    assert "s3cret" not in repr(per_tenant_databases("postgresql://app:s3cret@db/f_{tenant}"))


# -- tenants kept apart, end to end -----------------------------------------------------------


def _memory(tmp: Path) -> Failover:
    return Failover("memory://", tenant_resolver=failover.current_tenant, metrics=False)


# The store deadline of the engines on SQL stores: tenants kept apart are tested, and a loaded
# host's read past the default 0.5 s (a tenant's first, which opens its store) would be a miss.


def _sqlite_tables(tmp: Path) -> Failover:
    return Failover(
        f"sqlite:///{tmp / 'f.db'}",
        tenant_resolver=failover.current_tenant,
        metrics=False,
        store_timeout=WAIT,
    )


def _sqlite_databases(tmp: Path) -> Failover:
    return Failover(f"sqlite:///{tmp}/f_{{tenant}}.db", metrics=False, store_timeout=WAIT)


def _postgresql(tmp: Path) -> Failover:
    prefixes = {"acme": postgres.unique_prefix(), "globex": postgres.unique_prefix()}
    return Failover(
        per_tenant_tables(postgres.engine(), prefixes), metrics=False, store_timeout=WAIT
    )


BACKENDS: dict[str, Callable[[Path], Failover]] = {
    "memory": _memory,
    "sqlite-tables": _sqlite_tables,
    "sqlite-databases": _sqlite_databases,
    "postgresql": _postgresql,
}


@pytest.fixture(params=sorted(BACKENDS))
def tenant_engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Failover]:
    engine = BACKENDS[request.param](tmp_path)
    yield engine
    engine.close()


def test_tenants_never_see_each_others_entries(tenant_engine: Failover, upstream: Upstream) -> None:
    @failover.failover("country", engine=tenant_engine)
    def country(code: str) -> object:
        return upstream(code)

    with failover.tenant("acme"):
        assert country("FR") == "FR"
    upstream.fail()
    with failover.tenant("globex"), pytest.raises(ConnectionError) as refused:
        country("FR")
    assert "nothing recovered (no stored entry)" in str(refused.value.__notes__)
    with failover.tenant("globex"):
        assert country.peek("FR") is None
    with failover.tenant("acme"):
        found = country.referential("FR")
        assert (found.payload, found.up_to_date) == ("FR", False)
    assert tenant_engine.flush(10)


async def test_async_functions_route_by_the_tenant_of_their_task(
    tenant_engine: Failover, upstream: Upstream
) -> None:
    @failover.failover("country", engine=tenant_engine)
    async def country(code: str) -> object:
        await asyncio.sleep(0)
        return upstream(code)

    async def as_tenant(name: str, code: str) -> object:
        with failover.tenant(name):
            return await country(code)

    assert await asyncio.gather(as_tenant("acme", "FR"), as_tenant("globex", "DE")) == [
        "FR",
        "DE",
    ]
    upstream.fail()
    assert await as_tenant("acme", "FR") == "FR"  # recovered: on a thread for SQL stores
    with pytest.raises(ConnectionError):
        await as_tenant("acme", "DE")  # globex's entry, not acme's
    assert tenant_engine.flush(10)


def test_a_call_without_a_tenant_returns_its_result_and_logs(
    upstream: Upstream, caplog: pytest.LogCaptureFixture
) -> None:
    engine = Failover("memory://", tenant_resolver=failover.current_tenant, metrics=False)

    @failover.failover("country", engine=engine)
    def country(code: str) -> object:
        return upstream(code)

    caplog.set_level(logging.WARNING, "failover")
    assert country("FR") == "FR"
    assert "storing the live result failed" in caplog.records[-1].getMessage()
    upstream.fail()
    with pytest.raises(ConnectionError) as refused:
        country("FR")
    assert "the store failed while recovering" in str(refused.value.__notes__)
    engine.close()


async def test_async_hand_off_keeps_the_calling_threads_tenant(
    tmp_path: Path, clock: FakeClock
) -> None:
    """A resolver reading thread-local state: the worker thread that does the store I/O of an
    async failover has none, so the tenant must be resolved before the hand-off."""
    local = threading.local()
    eng = Failover(
        f"sqlite:///{tmp_path / 'pinned.db'}",
        async_writes=False,  # writes on a worker thread too
        tenant_resolver=lambda: getattr(local, "tenant", None),
        clock=clock,
        metrics=False,
    )
    up = [True]

    @failover.failover("pinned", engine=eng)
    async def fetch(code: str) -> dict[str, str]:
        if not up[0]:
            raise ConnectionError("down")
        return {"code": code, "tenant": local.tenant}

    try:
        local.tenant = "acme"
        await fetch("FR")
        local.tenant = "globex"
        await fetch("FR")
        up[0] = False
        local.tenant = "acme"
        assert await fetch("FR") == {"code": "FR", "tenant": "acme"}
        local.tenant = "globex"
        assert await fetch("FR") == {"code": "FR", "tenant": "globex"}
    finally:
        eng.close()


def test_sqlstore_per_tenant_is_one_table_each(tmp_path: Path, clock: FakeClock) -> None:
    path = tmp_path / "tables.db"
    factory = failover.SqlStore.per_tenant(
        f"sqlite:///{path}", prefixes={"acme": "ACME_", "globex": "GLOBEX_"}
    )
    eng = Failover(factory, tenant_resolver=failover.current_tenant, clock=clock, metrics=False)

    @failover.failover("per-tenant-tables", engine=eng)
    def country(code: str) -> dict[str, str]:
        return {"code": code}

    try:
        with failover.tenant("acme"):
            country("FR")
        with failover.tenant("globex"):
            country("DE")
            country("IT")
        eng.flush()
    finally:
        eng.close()
    db = sa.create_engine(f"sqlite:///{path}")
    with db.connect() as conn:
        counts = {
            table: conn.execute(sa.text(f"SELECT count(*) FROM {table}")).scalar()
            for table in ("ACME_failover_store", "GLOBEX_failover_store")
        }
    db.dispose()
    assert counts == {"ACME_failover_store": 1, "GLOBEX_failover_store": 2}
    with pytest.raises(ConfigurationError, match="'evil'"):
        failover.SqlStore.per_tenant("sqlite://", prefixes={"evil": "x; DROP TABLE t"})


# -- concurrency and failures -------------------------------------------------------------------


def test_one_tenant_instance_shared_by_threads_restores_each_ones_tenant() -> None:
    acme = failover.tenant("acme")  # e.g. a module-level constant used by every request
    both_in = threading.Barrier(2)
    first_out = threading.Event()
    seen: dict[str, object] = {}

    def serve(name: str, leave_first: bool) -> None:
        try:
            with acme:
                both_in.wait(WAIT)
                if not leave_first:
                    assert first_out.wait(WAIT)
            seen[name] = failover.current_tenant()
        except BaseException as exc:  # checked on the main thread below
            seen[name] = exc
        finally:
            first_out.set()

    threads = [
        threading.Thread(target=serve, args=("first", True)),
        threading.Thread(target=serve, args=("second", False)),
    ]
    for th in threads:
        th.start()
    for th in threads:
        th.join(WAIT)
    assert seen == {"first": None, "second": None}


def test_a_failing_resolver_is_a_store_error(clock: FakeClock) -> None:
    def resolver() -> str | None:
        raise RuntimeError("working outside of a request")

    store = MultiTenantStore(CountingFactory(), resolver=resolver)
    with pytest.raises(StoreError, match="resolver failed") as raised:
        store.find("n", "k")
    assert isinstance(raised.value.__cause__, RuntimeError)


async def test_a_failing_resolver_never_breaks_an_async_call(tmp_path: Path) -> None:
    def resolver() -> str | None:
        raise RuntimeError("working outside of a request")

    engine = Failover(
        f"sqlite:///{tmp_path / 'f.db'}",
        async_writes=False,  # the write goes to a worker thread, the tenant resolved first
        tenant_resolver=resolver,
        metrics=False,
    )

    @failover.failover("f", engine=engine)
    async def f(x: int) -> dict[str, int]:
        return {"x": x}

    try:
        assert await f(1) == {"x": 1}  # the store failed, logged; the live result returns
    finally:
        engine.close()


def test_a_pinned_tenant_is_used_even_when_empty(clock: FakeClock) -> None:
    factory = CountingFactory()
    store = MultiTenantStore(factory, resolver=lambda: "other")
    token = pinned.set("")  # what the calling thread's resolver said, before a hand-off
    try:
        store.store(entry(clock, "k", 1))
    finally:
        pinned.reset(token)
    assert factory.made == {"": 1}


class FailingStore(InMemoryStore):
    """An in-memory store whose cleanup and close fail, like an unreachable database."""

    def clean_by_expiry(self, now: datetime) -> int:
        raise OSError("database unreachable")

    def close(self) -> None:
        raise OSError("database unreachable")


def test_one_failing_tenant_does_not_keep_the_others_from_cleanup_or_close(
    clock: FakeClock,
) -> None:
    made: dict[str, InMemoryStore] = {}

    def factory(tenant: str) -> InMemoryStore:
        made[tenant] = FailingStore() if tenant == "acme" else InMemoryStore()
        return made[tenant]

    store = MultiTenantStore(factory)
    for name in ("acme", "globex"):  # acme first: the first one cleaned and closed
        with failover.tenant(name):
            store.store(entry(clock, "k", name))
    with pytest.raises(OSError, match="unreachable"):
        store.clean_by_expiry(clock.advance(61))
    assert len(made["globex"]) == 0
    with failover.tenant("globex"):
        store.store(entry(clock, "k", "globex"))
    with pytest.raises(OSError, match="unreachable"):
        store.close()
    assert len(made["globex"]) == 0  # closed: an in-memory store drops its entries


def test_no_tenant_store_is_made_after_close(clock: FakeClock) -> None:
    factory = CountingFactory()
    store = MultiTenantStore(factory)
    with failover.tenant("acme"):
        store.store(entry(clock, "k", 1))
    store.close()
    with failover.tenant("globex"), pytest.raises(StoreError, match="closed"):
        store.store(entry(clock, "k", 1))
    with failover.tenant("acme"), pytest.raises(StoreError, match="closed"):
        store.find("n", "k")
    assert factory.made == {"acme": 1}  # nothing made that no one would close
    assert store.flush(0)
    assert store.clean_by_expiry(clock()) == 0


async def test_a_new_tenants_store_is_made_off_the_event_loop(
    tmp_path: Path, clock: FakeClock
) -> None:
    """Making a tenant's SQL store connects to the database: never on the event loop."""
    made_on: list[int] = []

    def factory(tenant: str) -> failover.SqlStore:
        made_on.append(threading.get_ident())
        return failover.SqlStore(f"sqlite:///{tmp_path / safe_tenant_id(tenant)}.db")

    eng = Failover(factory, tenant_resolver=failover.current_tenant, clock=clock, metrics=False)

    @failover.failover("off-loop", engine=eng)
    async def fetch(code: str) -> dict[str, str]:
        return {"code": code}

    loop_thread = threading.get_ident()
    try:
        for name in ("acme", "globex", "acme"):
            with failover.tenant(name):
                await fetch("FR")
        eng.flush()
    finally:
        eng.close()
    assert len(made_on) == 2
    assert loop_thread not in made_on


# -- a tenant block on an engine that does not route by tenant ------------------------------------


async def test_a_tenant_block_on_an_unrouted_engine_is_refused(clock: FakeClock) -> None:
    engine = Failover(clock=clock, metrics=False)
    calls: list[str] = []

    @failover.failover("account", engine=engine)
    def account(field: str) -> str:
        calls.append(field)
        return f"acme's {field}"

    @failover.failover("aaccount", engine=engine)
    async def aaccount(field: str) -> str:
        return f"acme's {field}"

    assert account("balance") == "acme's balance"  # no tenant: a plain engine as ever
    uses = (account, account.peek, account.invalidate, account.referential)
    with failover.tenant("globex"):
        refusals = []
        for use in uses:
            with pytest.raises(ConfigurationError) as refused:
                use("balance")
            refusals.append(str(refused.value))
        with pytest.raises(ConfigurationError) as refused:
            await aaccount("balance")
        refusals.append(str(refused.value))
    for message in refusals:
        assert "does not route by tenant" in message
        assert "tenant_resolver=" in message
        assert "ignore_tenant=True" in message
        assert "inside failover.tenant('globex')" in message
    assert "failover 'aaccount'" in refusals[-1]
    assert calls == ["balance"]  # nothing ran, nothing was read for globex
    engine.close()


def test_ignore_tenant_lets_tenant_blocks_share_one_store(clock: FakeClock) -> None:
    engine = Failover(clock=clock, metrics=False, ignore_tenant=True)

    @failover.failover("account", engine=engine)
    def account(field: str) -> str:
        return f"shared {field}"

    assert account("balance") == "shared balance"
    with failover.tenant("globex"):
        found = account.peek("balance")
    assert found is not None
    assert found.payload == "shared balance"
    engine.close()
