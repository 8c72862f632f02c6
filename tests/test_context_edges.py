"""The call's context off its own path: per-tenant stores when the tenants' async calls share one
loop (their writes off the loop, their recovery reads batched in one loop turn), refresh ahead
(stored as a late result, not counted as a call, one per key, a bulkhead permit of its own, the
tenant of its caller), fresh answers, and a live result stored on a worker thread (a failing or
hung write, the caller's context variables). Sync and async; real SQLite files with async writes
on and off, and process memory; a fake clock; events and joins, no timed sleep."""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

import pytest

import failover
from failover import BulkheadFull, Failover, InMemoryStore, ReferentialPayload
from failover.errors import SoftTimeoutError
from failover.stores import MultiTenantStore
from failover.stores.backends.sql import SqlStore

from .conftest import FakeClock
from .execution_support import WAIT, ABlocking, Blocking

KINDS = ["sync", "async"]
STORES = ["memory", "sqlite", "sqlite-direct"]  # sqlite-direct: no async writes, stores off-loop
T = TypeVar("T")
T0 = FakeClock().now  # the fake clock's start: when the first entries are stored
FRESH = {"ttl": "1h", "fresh_for": "40s", "refresh_ahead": "20s"}  # all within health's minute


class Down(Exception):
    """The upstream's error."""


def decorate(kind: str, upstream: Callable[..., Any], name: str, **options: Any) -> Any:
    """A failover over the sync callable ``upstream``: a plain function, or an ``async def``."""
    if kind == "sync":

        def get(code: str) -> Any:
            return upstream(code)

        return failover.failover(name, **options)(get)

    async def aget(code: str) -> Any:
        return upstream(code)

    return failover.failover(name, **options)(aget)


async def background_done(but: frozenset[asyncio.Task[Any]] = frozenset()) -> None:
    """Join every other task of the running loop (the refreshes ahead it runs, and what they
    start in turn), ``but`` those."""
    while others := {t for t in asyncio.all_tasks() if t is not asyncio.current_task()} - but:
        _, pending = await asyncio.wait(others, timeout=WAIT)
        assert not pending, "a background task never ended"


def drive(kind: str, scenario: Coroutine[Any, Any, T]) -> T:
    """Run ``scenario``: on a loop of its own (``async``), or, for sync calls, with no loop at
    all (it must then never suspend: its awaits are of coroutines that finish at once)."""
    if kind == "async":
        return asyncio.run(scenario)
    try:
        scenario.send(None)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    scenario.close()
    raise AssertionError("a sync scenario suspended")


async def value(kind: str, out: Any) -> Any:
    """What a call gave: ``out``, awaited for an async failover."""
    return await out if kind == "async" else out


async def settled(kind: str, engine: Failover) -> None:
    """The refreshes ahead done (tasks of this loop, or the engine's pool) and written."""
    if kind == "async":
        await background_done()
        assert await asyncio.to_thread(engine.refreshes.wait, WAIT)
        assert await asyncio.to_thread(engine.flush, WAIT)
    else:
        assert engine.refreshes.wait(WAIT)
        assert engine.flush(WAIT)


def make_engine(store: str, tmp_path: Path, clock: FakeClock, **settings: Any) -> Failover:
    if store == "memory":
        return Failover(clock=clock, metrics=False, **settings)
    url = f"sqlite:///{tmp_path / 'f.db'}"
    # A generous store deadline: contexts and refreshes are tested, and a loaded host's read or
    # write past the default 0.5 s would be a miss or a write given up.
    settings.setdefault("store_timeout", WAIT)
    return Failover(url, clock=clock, metrics=False, async_writes=store == "sqlite", **settings)


def counts(engine: Failover, name: str) -> dict[str, int]:
    return dict(engine.health().failovers[name].counts)


# -- per-tenant stores, tenants gathered on one loop ---------------------------------------------


class TenantSqlite(SqlStore):
    """One tenant's SQLite file; its point and batched reads recorded (a real store, counted)."""

    def __init__(self, tenant: str, path: Path) -> None:
        super().__init__(f"sqlite:///{path / f't_{tenant}.db'}", tenant=tenant)
        self.reads: list[tuple[str, ...]] = []
        self._reads_lock = threading.Lock()

    def find(self, name: str, key: str) -> Any:
        with self._reads_lock:
            self.reads.append((key,))
        return super().find(name, key)

    def find_many(self, name: str, keys: Any) -> dict[str, Any]:
        keys = list(keys)
        with self._reads_lock:
            self.reads.append(tuple(keys))
        return super().find_many(name, keys)


def tenant_engine(store: str, tmp_path: Path, clock: FakeClock) -> Failover:
    if store == "memory":
        return Failover(
            "memory://", tenant_resolver=failover.current_tenant, clock=clock, metrics=False
        )
    return Failover(
        lambda tenant: TenantSqlite(tenant, tmp_path),
        clock=clock,
        metrics=False,
        async_writes=store == "sqlite",
        store_timeout=WAIT,  # as make_engine's: the tenants' reads are counted, not timed
    )


def tenant_store(engine: Failover, tenant: str) -> Any:
    """The raw store of ``tenant`` (below the engine's layers)."""
    router = engine.store
    assert isinstance(router, MultiTenantStore)
    layer: Any = router.stores[tenant]
    while hasattr(layer, "inner"):
        layer = layer.inner
    return layer


@pytest.mark.parametrize("store", STORES)
async def test_tenants_gathered_on_one_loop_each_recover_only_their_own_entries(
    store: str, tmp_path: Path, clock: FakeClock
) -> None:
    """acme and globex call concurrently on one loop (their writes off the loop without async
    writes); the upstream goes down: each tenant's recoveries of one loop turn are one read of
    its own store, and get its own entries; a key only acme stored is no entry for globex."""
    engine = tenant_engine(store, tmp_path, clock)
    down: list[bool] = []

    @failover.failover("ctx.country", engine=engine)
    async def country(code: str) -> dict[str, Any]:
        await asyncio.sleep(0)  # the tenants' calls interleave
        if down:
            raise Down(code)
        return {"code": code, "tenant": failover.current_tenant()}

    async def as_tenant(name: str, code: str) -> Any:
        with failover.tenant(name):
            return await country.referential(code)

    rt = country._failover_state.runtime()
    assert rt.blocking_writes == (store == "sqlite-direct")
    live = await asyncio.gather(
        as_tenant("acme", "FR"), as_tenant("globex", "FR"), as_tenant("acme", "DE")
    )
    assert [(g.payload["tenant"], g.up_to_date) for g in live] == [
        ("acme", True),
        ("globex", True),
        ("acme", True),
    ]
    assert await asyncio.to_thread(engine.flush, WAIT)
    clock.advance(minutes=5)
    down.append(True)
    asked = [("acme", "FR"), ("globex", "FR"), ("acme", "DE"), ("globex", "DE")]
    got = await asyncio.gather(*(as_tenant(t, c) for t, c in asked), return_exceptions=True)
    for (tenant, code), g, stored in zip(asked[:3], got, live, strict=False):
        assert isinstance(g, ReferentialPayload), (tenant, code, g)
        assert g.payload == {"code": code, "tenant": tenant}
        assert (g.up_to_date, g.as_of, g.key) == (False, stored.as_of, stored.key)
    assert isinstance(got[3], Down)
    assert "no stored entry" in str(got[3].__notes__)
    if store != "memory":  # each tenant's reads of the turn: one find_many of its store
        wanted = {live[0].key, live[2].key}
        for tenant in ("acme", "globex"):
            reads = tenant_store(engine, tenant).reads
            assert [set(r) for r in reads] == [wanted], (tenant, reads)
    await asyncio.to_thread(engine.close)


@pytest.mark.parametrize("store", STORES)
@pytest.mark.parametrize("kind", KINDS)
def test_a_refresh_ahead_of_one_tenant_writes_to_its_store_only(
    kind: str, store: str, tmp_path: Path, clock: FakeClock
) -> None:
    engine = tenant_engine(store, tmp_path, clock)
    calls: list[str | None] = []

    def upstream(code: str) -> dict[str, Any]:
        calls.append(failover.current_tenant())
        return {"code": code, "tenant": failover.current_tenant(), "n": len(calls)}

    get = decorate(kind, upstream, "ctx.refresh_tenant", engine=engine, **FRESH)

    async def call(tenant: str) -> ReferentialPayload[Any]:
        with failover.tenant(tenant):
            return await value(kind, get.referential("FR"))

    async def scenario() -> None:
        await call("acme")
        await call("globex")
        clock.advance(25)  # past refresh_ahead, within fresh_for
        answered = await call("acme")
        assert (answered.payload["n"], answered.up_to_date, answered.as_of) == (1, True, T0)
        await settled(kind, engine)

    drive(kind, scenario())
    assert calls == ["acme", "globex", "acme"]  # the refresh ran as acme
    with failover.tenant("acme"):
        acme = get.peek("FR")
    with failover.tenant("globex"):
        globex = get.peek("FR")
    assert acme is not None
    assert globex is not None
    assert (acme.payload, acme.as_of) == ({"code": "FR", "tenant": "acme", "n": 3}, clock.now)
    assert (globex.payload, globex.as_of) == ({"code": "FR", "tenant": "globex", "n": 2}, T0)
    engine.close()


@pytest.mark.parametrize("kind", KINDS)
def test_a_refresh_ahead_keeps_the_tenant_a_thread_local_resolver_gave_its_caller(
    kind: str, clock: FakeClock
) -> None:
    """A resolver that reads state only the calling thread has (as in test_tenant's hand-off
    test), and a default tenant: the refresh of acme's entry must land in acme's store, never
    in the default tenant's, wherever the refresh runs."""
    local = threading.local()
    router = MultiTenantStore(
        lambda tenant: InMemoryStore(),
        resolver=lambda: getattr(local, "tenant", None),
        default_tenant="shared",
    )
    engine = Failover(router, clock=clock, metrics=False)
    calls: list[str] = []

    def upstream(code: str) -> dict[str, Any]:
        calls.append(code)
        return {"code": code, "n": len(calls)}

    get = decorate(kind, upstream, "ctx.local_tenant", engine=engine, **FRESH)

    async def scenario() -> None:
        local.tenant = "acme"
        await value(kind, get("FR"))
        clock.advance(25)
        assert (await value(kind, get("FR")))["n"] == 1  # fresh; refreshed behind
        await settled(kind, engine)

    drive(kind, scenario())
    assert calls == ["FR", "FR"]
    assert set(router.stores) == {"acme"}  # nothing written for the default tenant
    local.tenant = "acme"
    refreshed = get.peek("FR")
    assert refreshed is not None
    assert (refreshed.payload["n"], refreshed.as_of) == (2, clock.now)
    engine.close()


def test_a_late_result_keeps_the_tenant_a_thread_local_resolver_gave_its_caller_thread(
    clock: FakeClock,
) -> None:
    """The same resolver, a sync soft timeout: the caller gives up, the upstream answers on the
    engine's pool later, and its late result is stored in the caller's tenant's store."""
    local = threading.local()
    router = MultiTenantStore(
        lambda tenant: InMemoryStore(),
        resolver=lambda: getattr(local, "tenant", None),
        default_tenant="shared",
    )
    engine = Failover(router, clock=clock, metrics=False)
    up = Blocking()
    get = failover.failover("ctx.late_tenant", engine=engine, timeout=0.05)(up)
    local.tenant = "acme"
    with pytest.raises(SoftTimeoutError):  # nothing stored yet: the caller gets the timeout
        get("FR")
    up.release.set()
    assert engine.refreshes.wait(WAIT)
    assert set(router.stores) == {"acme"}  # the recovery's read, then the late write
    late = get.peek("FR")
    assert late is not None
    assert late.payload == "FR"
    engine.close()


async def test_an_async_late_result_keeps_the_tenant_a_thread_local_resolver_gave(
    clock: FakeClock,
) -> None:
    local = threading.local()
    router = MultiTenantStore(
        lambda tenant: InMemoryStore(),
        resolver=lambda: getattr(local, "tenant", None),
        default_tenant="shared",
    )
    engine = Failover(router, clock=clock, metrics=False)
    up = ABlocking()
    get = failover.failover("ctx.alate_tenant", engine=engine, timeout=0.05)(up)
    local.tenant = "acme"
    with pytest.raises(SoftTimeoutError):
        await get("FR")
    up.release.set()
    await background_done()
    assert set(router.stores) == {"acme"}
    late = get.peek("FR")
    assert late is not None
    assert late.payload == "FR"
    await asyncio.to_thread(engine.close)


# -- refresh ahead -------------------------------------------------------------------------------


@pytest.mark.parametrize("store", STORES)
@pytest.mark.parametrize("kind", KINDS)
def test_a_refresh_is_stored_and_served_fresh_and_is_not_counted_as_a_call(
    kind: str, store: str, tmp_path: Path, clock: FakeClock
) -> None:
    engine = make_engine(store, tmp_path, clock)
    calls: list[str] = []

    def upstream(code: str) -> dict[str, Any]:
        calls.append(code)
        return {"code": code, "n": len(calls)}

    get = decorate(kind, upstream, "ctx.refreshed", engine=engine, **FRESH)

    async def scenario() -> None:
        first = await value(kind, get.referential("FR"))
        await settled(kind, engine)
        clock.advance(19)  # not yet past refresh_ahead: no refresh
        assert (await value(kind, get.referential("FR"))).payload["n"] == 1
        await settled(kind, engine)
        assert calls == ["FR"]
        clock.advance(6)  # 25 s old
        fresh = await value(kind, get.referential("FR"))
        assert (fresh.payload["n"], fresh.up_to_date, fresh.as_of) == (1, True, first.as_of)
        assert (fresh.expire_on, fresh.key) == (first.expire_on, first.key)
        await settled(kind, engine)
        refreshed_at = clock.now
        clock.advance(1)
        again = await value(kind, get.referential("FR"))  # the refreshed entry, its own time
        assert (again.payload["n"], again.up_to_date, again.as_of) == (2, True, refreshed_at)
        assert (again.expire_on, again.key) == (refreshed_at + timedelta(hours=1), first.key)

    drive(kind, scenario())
    assert calls == ["FR", "FR"]
    assert counts(engine, "ctx.refreshed") == {
        "live": 1,  # the refresh is not a call of its own
        "recovered": 0,
        "not_recovered": 0,
        "fresh": 3,
    }
    engine.close()


@pytest.mark.parametrize("store", STORES)
@pytest.mark.parametrize("kind", KINDS)
def test_a_failed_refresh_leaves_the_entry_served_and_its_key_free(
    kind: str, store: str, tmp_path: Path, clock: FakeClock
) -> None:
    engine = make_engine(store, tmp_path, clock)
    calls: list[str] = []
    down: list[bool] = []

    def upstream(code: str) -> dict[str, Any]:
        calls.append(code)
        if down:
            raise Down(code)
        return {"code": code, "n": len(calls)}

    get = decorate(kind, upstream, "ctx.failed_refresh", engine=engine, **FRESH)

    async def scenario() -> None:
        first = await value(kind, get.referential("FR"))
        await settled(kind, engine)
        down.append(True)
        clock.advance(25)
        for tries in (2, 3):  # each fresh answer past the mark tries again: the key is free
            got = await value(kind, get.referential("FR"))
            assert (got.payload["n"], got.up_to_date, got.as_of) == (1, True, first.as_of)
            await settled(kind, engine)
            assert len(calls) == tries
        clock.advance(20)  # 45 s: past fresh_for; the upstream is asked and fails over
        stale = await value(kind, get.referential("FR"))
        assert (stale.payload["n"], stale.up_to_date, stale.as_of) == (1, False, first.as_of)
        assert isinstance(stale.cause, Down)
        await settled(kind, engine)

    drive(kind, scenario())
    assert len(calls) == 4
    assert counts(engine, "ctx.failed_refresh") == {
        "live": 1,
        "recovered": 1,
        "not_recovered": 0,  # the failed refreshes are no calls
        "fresh": 2,
    }
    engine.close()


def test_one_refresh_per_key_at_a_time_threads(clock: FakeClock) -> None:
    engine = Failover(clock=clock, metrics=False)
    up = Blocking()
    up.release.set()
    get = failover.failover("ctx.one_per_key", engine=engine, **FRESH)(up)
    get("FR")
    get("DE")
    up.wait_entered(2)
    up.release.clear()
    clock.advance(25)
    rt = get._failover_state.runtime()
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(get, ["FR", "DE"] * 10))  # every one answered from the store
    assert answers == ["FR", "DE"] * 10
    up.wait_entered(2)  # one refresh per key, both running
    assert (up.calls, up.inside, len(rt.ahead)) == (4, 2, 2)
    assert get("FR") == "FR"
    up.release.set()
    assert engine.refreshes.wait(WAIT)
    assert (up.calls, up.most, len(rt.ahead)) == (4, 2, 0)
    assert get.referential("FR").as_of == clock.now
    clock.advance(25)
    get("FR")  # refreshed again: the key was given back
    assert engine.refreshes.wait(WAIT)
    assert up.calls == 5
    engine.close()


async def test_one_refresh_per_key_at_a_time_tasks(clock: FakeClock) -> None:
    engine = Failover(clock=clock, metrics=False)
    up = ABlocking()
    up.release.set()
    get = failover.failover("ctx.aone_per_key", engine=engine, **FRESH)(up)
    await get("FR")
    await get("DE")
    up.release.clear()
    clock.advance(25)
    rt = get._failover_state.runtime()
    answers = await asyncio.gather(*(get(code) for code in ["FR", "DE"] * 10))
    assert answers == ["FR", "DE"] * 10
    await up.wait_entered(4)  # the two seeds, then one refresh per key
    assert (up.calls, up.inside, len(rt.ahead)) == (4, 2, 2)
    assert await get("DE") == "DE"
    up.release.set()
    await background_done()
    assert (up.calls, up.most, len(rt.ahead)) == (4, 2, 0)
    assert (await get.referential("DE")).as_of == clock.now
    await asyncio.to_thread(engine.close)


def test_a_refresh_takes_a_bulkhead_permit_and_gives_it_back_threads(clock: FakeClock) -> None:
    engine = Failover(clock=clock, metrics=False)
    up = Blocking()
    up.release.set()
    get = failover.failover("ctx.permit", engine=engine, max_concurrency=1, **FRESH)(up)
    bulkhead = engine.bulkhead(get.definition)
    get("FR")
    up.wait_entered()
    up.release.clear()
    clock.advance(25)
    assert get("FR") == "FR"  # fresh; its refresh holds the only permit
    up.wait_entered()
    assert bulkhead.free == 0
    with pytest.raises(BulkheadFull):  # a call that is not fresh needs the permit
        get("DE")
    up.release.set()
    assert engine.refreshes.wait(WAIT)
    assert bulkhead.free == 1
    assert engine.health().pools[bulkhead.pool.name].rejected == {"ctx.permit": 1}

    # The permit held by a caller: the refresh is refused, the entry stays, the key is free.
    up.release.clear()
    with ThreadPoolExecutor(1) as pool:
        holder = pool.submit(get, "DE")
        up.wait_entered()
        clock.advance(25)
        refreshed_at = get.referential("FR").as_of
        assert engine.refreshes.wait(WAIT)
        assert engine.health().pools[bulkhead.pool.name].rejected == {"ctx.permit": 2}
        assert up.calls == 3  # the refused refresh never called the upstream
        up.release.set()
        assert holder.result(WAIT) == "DE"
    assert get.referential("FR").as_of == refreshed_at  # still the entry the refresh left
    assert engine.refreshes.wait(WAIT)
    assert up.calls == 4  # the second fresh answer's refresh, once the permit was free
    assert bulkhead.free == 1
    engine.close()


async def test_a_refresh_takes_a_bulkhead_permit_and_gives_it_back_tasks(
    clock: FakeClock,
) -> None:
    engine = Failover(clock=clock, metrics=False)
    up = ABlocking()
    up.release.set()
    get = failover.failover("ctx.apermit", engine=engine, max_concurrency=1, **FRESH)(up)
    bulkhead = engine.bulkhead(get.definition)
    await get("FR")
    up.release.clear()
    clock.advance(25)
    assert await get("FR") == "FR"
    await up.wait_entered(2)
    assert bulkhead.free == 0
    with pytest.raises(BulkheadFull):
        await get("DE")
    up.release.set()
    await background_done()
    assert bulkhead.free == 1
    assert engine.health().pools[bulkhead.pool.name].rejected == {"ctx.apermit": 1}

    up.release.clear()
    holder = asyncio.create_task(get("DE"))
    await up.wait_entered()
    holding = frozenset(asyncio.all_tasks())  # the holder's, waiting for the upstream
    clock.advance(25)
    refreshed_at = (await get.referential("FR")).as_of
    await background_done(but=holding)  # the refresh: refused, the key given back
    assert engine.health().pools[bulkhead.pool.name].rejected == {"ctx.apermit": 2}
    assert up.calls == 3
    up.release.set()
    assert await holder == "DE"
    await background_done()
    assert (await get.referential("FR")).as_of == refreshed_at
    await background_done()
    assert up.calls == 4
    assert bulkhead.free == 1
    await asyncio.to_thread(engine.close)


# -- fresh answers -------------------------------------------------------------------------------


@pytest.mark.parametrize("store", STORES)
@pytest.mark.parametrize("kind", KINDS)
def test_fresh_answers_are_counted_fresh_and_carry_the_entrys_time(
    kind: str, store: str, tmp_path: Path, clock: FakeClock
) -> None:
    engine = make_engine(store, tmp_path, clock)
    calls: list[str] = []

    def upstream(code: str) -> dict[str, Any]:
        calls.append(code)
        return {"code": code, "n": len(calls)}

    get = decorate(kind, upstream, "ctx.fresh", engine=engine, ttl="1h", fresh_for="40s")

    async def scenario() -> None:
        live = await value(kind, get.referential("FR"))
        await settled(kind, engine)
        for seconds in (1, 20, 18):  # 39 s old at the last: still fresh
            clock.advance(seconds)
            fresh = await value(kind, get.referential("FR"))
            assert (fresh.payload, fresh.up_to_date, fresh.cause) == (live.payload, True, None)
            assert (fresh.name, fresh.key, fresh.as_of, fresh.expire_on) == (
                live.name,
                live.key,
                T0,
                T0 + timedelta(hours=1),
            )
            assert await value(kind, get("FR")) == live.payload
        assert calls == ["FR"]

    drive(kind, scenario())
    assert counts(engine, "ctx.fresh") == {
        "live": 1,
        "recovered": 0,
        "not_recovered": 0,
        "fresh": 6,
    }
    assert engine.health().failovers["ctx.fresh"].status == "up"
    engine.close()


# -- the live result stored off the loop --------------------------------------------------------

request_id: contextvars.ContextVar[str | None] = contextvars.ContextVar("request_id", default=None)


class Watching(InMemoryStore):
    """A store of your own that says it does I/O (so an async caller writes on a worker thread
    without async writes): it records, for each write and read, the thread and what the
    caller's context variables said there; ``fail`` makes writes raise, ``hold`` makes them
    wait for ``release``."""

    does_io = True

    def __init__(self) -> None:
        super().__init__()
        self.fail = False
        self.hold = False
        self.held = threading.Event()
        self.release = threading.Event()
        self.writes: list[tuple[str | None, str | None, int]] = []
        self.reads: list[tuple[str | None, str | None, int]] = []

    def _seen(self) -> tuple[str | None, str | None, int]:
        return (request_id.get(), failover.current_tenant(), threading.get_ident())

    def store(self, payload: Any) -> None:
        self.writes.append(self._seen())
        if self.hold:
            self.held.set()
            assert self.release.wait(WAIT), "the test never released the store"
        if self.fail:
            raise OSError("disk full")
        super().store(payload)

    def find(self, name: str, key: str) -> Any:
        self.reads.append(self._seen())
        return super().find(name, key)

    def find_many(self, name: str, keys: Any) -> dict[str, Any]:
        self.reads.append(self._seen())
        return super().find_many(name, keys)


def watching_engine(clock: FakeClock, store_timeout: float | None) -> tuple[Failover, Watching]:
    store = Watching()
    engine = Failover(
        store,
        async_writes=False,
        store_timeout=store_timeout,
        ignore_tenant=True,
        clock=clock,
        metrics=False,
    )
    return engine, store


DEADLINES = [None, 5.0]  # without and with the store deadline layer (its own worker threads)


@pytest.mark.parametrize("store_timeout", DEADLINES, ids=["no-deadline", "deadline"])
async def test_a_failing_off_loop_write_still_returns_the_live_result(
    store_timeout: float | None, clock: FakeClock
) -> None:
    engine, store = watching_engine(clock, store_timeout)
    down: list[bool] = []

    @failover.failover("ctx.failing_write", engine=engine)
    async def rates(code: str) -> dict[str, str]:
        if down:
            raise Down(code)
        return {"code": code}

    assert rates._failover_state.runtime().offloads()
    store.fail = True
    got = await rates.referential("FR")
    assert (got.payload, got.up_to_date, got.as_of) == ({"code": "FR"}, True, T0)
    assert len(store.writes) == 1
    assert store.writes[0][2] != threading.get_ident()  # written on a worker thread
    down.append(True)
    with pytest.raises(Down) as caught:  # nothing was stored to recover
        await rates("FR")
    assert "no stored entry" in str(caught.value.__notes__)
    assert counts(engine, "ctx.failing_write") == {
        "live": 1,
        "recovered": 0,
        "not_recovered": 1,
        "fresh": 0,
    }
    await asyncio.to_thread(engine.close)


async def test_a_hung_off_loop_write_holds_the_caller_no_longer_than_the_store_deadline(
    clock: FakeClock,
) -> None:
    engine, store = watching_engine(clock, 0.2)

    @failover.failover("ctx.hung_write", engine=engine)
    async def rates(code: str) -> dict[str, str]:
        return {"code": code}

    store.hold = True
    try:
        got = await rates.referential("FR")  # the write is given up at the deadline
        assert store.held.is_set()
        assert not store.release.is_set()
        assert (got.payload, got.up_to_date) == ({"code": "FR"}, True)
    finally:
        store.release.set()
    await asyncio.to_thread(engine.close)


async def test_an_off_loop_write_never_blocks_the_loop(clock: FakeClock) -> None:
    """No deadline: the caller waits for its write, on a worker thread; the loop goes on, and
    another task of it is the one that lets the write end."""
    engine, store = watching_engine(clock, None)

    @failover.failover("ctx.slow_write", engine=engine)
    async def rates(code: str) -> dict[str, str]:
        return {"code": code}

    async def releaser() -> None:
        assert await asyncio.to_thread(store.held.wait, WAIT)
        store.release.set()

    store.hold = True
    got, _ = await asyncio.gather(rates.referential("FR"), releaser())
    assert (got.payload, got.up_to_date) == ({"code": "FR"}, True)
    assert len(store.writes) == 1
    store.hold = False
    assert engine.store.find("ctx.slow_write", got.key) is not None
    await asyncio.to_thread(engine.close)


@pytest.mark.parametrize("store_timeout", DEADLINES, ids=["no-deadline", "deadline"])
@pytest.mark.parametrize("kind", KINDS)
def test_a_stores_own_methods_see_the_callers_context_variables(
    kind: str, store_timeout: float | None, clock: FakeClock
) -> None:
    """The caller's context (a request id of its own, the tenant) reaches the store's ``store``
    and ``find``, on whichever thread the library runs them: a worker of the event loop's, or
    the store deadline's."""
    engine, store = watching_engine(clock, store_timeout)
    down: list[bool] = []

    def upstream(code: str) -> dict[str, str]:
        if down:
            raise Down(code)
        return {"code": code}

    get = decorate(kind, upstream, "ctx.seen", engine=engine)

    async def scenario() -> None:
        for rid in ("r1", "r2"):
            request_id.set(rid)
            with failover.tenant("acme"):  # shared on purpose: ignore_tenant
                assert await value(kind, get("FR")) == {"code": "FR"}
                down.append(True)
                assert await value(kind, get("FR")) == {"code": "FR"}  # recovered
                down.clear()

    drive(kind, scenario())
    assert [seen[:2] for seen in store.writes] == [("r1", "acme"), ("r2", "acme")]
    assert [seen[:2] for seen in store.reads] == [("r1", "acme"), ("r2", "acme")]
    engine.close()
