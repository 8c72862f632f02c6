"""Tenants kept apart in the tables of calls in flight (issue 27): single flight (narrowed
scatter/gather calls included), the soft timeout's shared calls and refresh ahead key a call in
flight by tenant and key on an engine routed by tenant. Acme's call is held in flight until
globex's identical call has reached the upstream itself: a globex call that joined acme's
flight instead (and got, and stored, acme's answer) fails the test. Real SQLite files, one per
tenant, PostgreSQL tables and redis-server key prefixes; sync and async."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import failover
from failover import Failover
from failover.scatter import ListSplitter
from failover.stores import per_tenant_tables
from failover.stores.backends.redis import RedisStore

from . import postgres, redis_server
from .conftest import FakeClock
from .execution_support import WAIT, watch

KINDS = ["sync", "async"]
TENANTS = ("acme", "globex")


BACKENDS = ["sqlite", "postgresql", "redis"]


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    """Where the tenants' stores are: PostgreSQL and redis-server are the session's (the test
    is skipped, saying why, where their binaries are missing)."""
    name: str = request.param
    return name


def routed(tmp_path: Path, clock: FakeClock, backend: str = "sqlite") -> Failover:
    """An engine with a store per tenant, routed by `current_tenant`: a SQLite file per tenant
    (``{tenant}.db``), a table per tenant on the session's PostgreSQL, or a key prefix per
    tenant on its redis-server (each under a prefix of this test's own)."""
    store: Any
    if backend == "sqlite":
        store = f"sqlite:///{tmp_path}/{{tenant}}.db"
    elif backend == "postgresql":
        prefix = postgres.unique_prefix()
        store = per_tenant_tables(postgres.server().url, {t: f"{prefix}{t}_" for t in TENANTS})
    else:
        url = redis_server.server().url
        store = RedisStore.per_tenant(url, prefix=redis_server.unique_prefix(), clock=clock)
    # A generous store deadline: tenants' flights are tested, and a loaded host's read past the
    # default 0.5 s (a tenant's first, which opens its store) would be a miss.
    return Failover(
        store,
        tenant_resolver=failover.current_tenant,
        clock=clock,
        metrics=False,
        store_timeout=WAIT,
    )


class Held:
    """An upstream answering its caller's tenant's own profile. While ``holding``, acme's call
    waits (at most `WAIT`) until globex's call has entered the upstream: an acme call that
    never sees it fails with a `LookupError` (the test fails rather than hangs)."""

    def __init__(self) -> None:
        self.holding = False
        self.calls: list[str | None] = []
        self.entered = {t: threading.Event() for t in TENANTS}
        self._lock = threading.Lock()

    def enter(self, section: str) -> tuple[str | None, bool]:
        tenant = failover.current_tenant()
        with self._lock:
            self.calls.append(tenant)
        holding = self.holding
        if holding and tenant in self.entered:
            self.entered[tenant].set()
        return tenant, holding and tenant == "acme"

    @staticmethod
    def answer(tenant: str | None, section: str) -> dict[str, Any]:
        return {"tenant": tenant, "section": section}

    def __call__(self, section: str) -> dict[str, Any]:
        tenant, held = self.enter(section)
        if held and not self.entered["globex"].wait(WAIT):
            raise LookupError("globex's call never reached the upstream")
        return self.answer(tenant, section)

    async def acall(self, section: str) -> dict[str, Any]:
        tenant, held = self.enter(section)
        if held:
            seen = await asyncio.to_thread(self.entered["globex"].wait, WAIT)
            if not seen:
                raise LookupError("globex's call never reached the upstream")
        return self.answer(tenant, section)


def decorate(kind: str, engine: Failover, upstream: Held, **options: Any) -> Any:
    fn = upstream if kind == "sync" else upstream.acall
    return failover.failover("profile", engine=engine, ttl="1d", **options)(fn)


def in_tenant(tenant: str, fn: Callable[..., Any], *args: Any) -> Any:
    with failover.tenant(tenant):
        return fn(*args)


async def ain_tenant(tenant: str, fn: Callable[..., Any], *args: Any) -> Any:
    with failover.tenant(tenant):
        return await fn(*args)


def both_sync(profile: Any, upstream: Held, section: str = "settings") -> dict[str, Any]:
    """Acme's call in flight, then globex's identical one: each tenant's answer."""
    got: dict[str, Any] = {}

    def call(tenant: str) -> None:
        try:
            got[tenant] = in_tenant(tenant, profile, section)
        except Exception as exc:
            got[tenant] = exc

    acme = threading.Thread(target=call, args=("acme",))
    acme.start()
    assert upstream.entered["acme"].wait(WAIT)
    globex = threading.Thread(target=call, args=("globex",))
    globex.start()
    for t in (acme, globex):
        t.join(3 * WAIT)
        assert not t.is_alive(), "a call never returned"
    return got


async def both_async(profile: Any, upstream: Held, section: str = "settings") -> dict[str, Any]:
    acme = asyncio.ensure_future(ain_tenant("acme", profile, section))
    assert await asyncio.to_thread(upstream.entered["acme"].wait, WAIT)
    globex = asyncio.ensure_future(ain_tenant("globex", profile, section))
    done = await asyncio.wait_for(asyncio.gather(acme, globex, return_exceptions=True), 3 * WAIT)
    return dict(zip(TENANTS, done, strict=True))


def stored(profile: Any, tenant: str, section: str = "settings") -> Any:
    """What ``tenant``'s own SQLite file holds for the call (read on this thread)."""
    with failover.tenant(tenant):
        found = profile.peek(section)
    return None if found is None else found.payload


def check_apart(engine: Failover, profile: Any, upstream: Held, got: dict[str, Any]) -> None:
    for tenant in TENANTS:
        assert got[tenant] == Held.answer(tenant, "settings"), got
    assert sorted(t for t in upstream.calls if t is not None) == ["acme", "globex"]
    engine.flush(WAIT)
    for tenant in TENANTS:
        assert stored(profile, tenant) == Held.answer(tenant, "settings")


# -- single flight and the soft timeout's shared calls ----------------------------------------

SHARING = {
    "single_flight": {"single_flight": True},
    "timeout": {"timeout": 4 * WAIT},  # the soft timeout alone shares calls in flight
    "both": {"single_flight": True, "timeout": 4 * WAIT},
}


@pytest.mark.parametrize("sharing", list(SHARING))
def test_sync_calls_of_two_tenants_never_share_one_upstream_call(
    sharing: str, backend: str, tmp_path: Path, clock: FakeClock
) -> None:
    engine = routed(tmp_path, clock, backend)
    upstream = Held()
    profile = decorate("sync", engine, upstream, **SHARING[sharing])
    upstream.holding = True
    got = both_sync(profile, upstream)
    check_apart(engine, profile, upstream, got)
    rt = profile._failover_state.runtime()
    assert rt.flights is None or len(rt.flights) == 0
    assert rt.timeout is None or rt.timeout.in_flight == 0
    engine.close()


@pytest.mark.parametrize("sharing", list(SHARING))
async def test_async_calls_of_two_tenants_never_share_one_upstream_call(
    sharing: str, backend: str, tmp_path: Path, clock: FakeClock
) -> None:
    engine = routed(tmp_path, clock, backend)
    upstream = Held()
    profile = decorate("async", engine, upstream, **SHARING[sharing])
    upstream.holding = True
    got = await both_async(profile, upstream)
    await asyncio.to_thread(check_apart, engine, profile, upstream, got)
    rt = profile._failover_state.runtime()
    assert rt.flights is None or len(rt.flights) == 0
    assert rt.timeout is None or rt.timeout.in_flight == 0
    await engine.aclose()


@pytest.mark.parametrize("kind", KINDS)
async def test_one_tenants_calls_still_share_one_upstream_call(
    kind: str, backend: str, tmp_path: Path, clock: FakeClock
) -> None:
    """Per tenant, single flight still shares: two acme calls, one upstream call."""
    engine = routed(tmp_path, clock, backend)
    release = threading.Event()
    entered = threading.Event()
    calls: list[str | None] = []

    def upstream(section: str) -> dict[str, Any]:
        calls.append(failover.current_tenant())
        entered.set()
        assert release.wait(WAIT)
        return Held.answer(failover.current_tenant(), section)

    async def aupstream(section: str) -> dict[str, Any]:
        calls.append(failover.current_tenant())
        entered.set()
        assert await asyncio.to_thread(release.wait, WAIT)
        return Held.answer(failover.current_tenant(), section)

    fn = upstream if kind == "sync" else aupstream
    profile: Any = failover.failover("profile", engine=engine, single_flight=True)(fn)
    flights = watch(profile)
    if kind == "sync":
        got: list[Any] = []
        threads = [
            threading.Thread(target=lambda: got.append(in_tenant("acme", profile, "s")))
            for _ in range(2)
        ]
        threads[0].start()
        assert entered.wait(WAIT)
        threads[1].start()
        flights.reach(leads=1, follows=1)
        release.set()
        for t in threads:
            t.join(WAIT)
    else:
        first = asyncio.ensure_future(ain_tenant("acme", profile, "s"))
        assert await asyncio.to_thread(entered.wait, WAIT)
        second = asyncio.ensure_future(ain_tenant("acme", profile, "s"))
        await flights.areach(leads=1, follows=1)
        release.set()
        got = await asyncio.gather(first, second)
    assert got == [Held.answer("acme", "s")] * 2
    assert calls == ["acme"]
    await engine.aclose()


# -- scatter/gather: a call narrowed to the slices not fresh ----------------------------------


@pytest.mark.parametrize("kind", KINDS)
async def test_narrowed_calls_of_two_tenants_never_share_one_upstream_call(
    kind: str, backend: str, tmp_path: Path, clock: FakeClock
) -> None:
    """A scatter/gather failover with ``fresh_for``: each tenant's call narrowed to the ids not
    fresh flies under its own tenant's key."""
    engine = routed(tmp_path, clock, backend)
    entered = {t: threading.Event() for t in TENANTS}
    holding = False

    def answer(ids: list[int]) -> list[dict[str, Any]]:
        tenant = failover.current_tenant()
        return [{"id": i, "tenant": tenant} for i in ids]

    def held() -> tuple[str | None, bool]:
        tenant = failover.current_tenant()
        if holding and tenant in entered:
            entered[tenant].set()
        return tenant, holding and tenant == "acme"

    def users(ids: list[int]) -> list[dict[str, Any]]:
        _, hold = held()
        if hold and not entered["globex"].wait(WAIT):
            raise LookupError("globex's call never reached the upstream")
        return answer(ids)

    async def ausers(ids: list[int]) -> list[dict[str, Any]]:
        _, hold = held()
        if hold and not await asyncio.to_thread(entered["globex"].wait, WAIT):
            raise LookupError("globex's call never reached the upstream")
        return answer(ids)

    options: dict[str, Any] = {
        "engine": engine,
        "splitter": ListSplitter("id"),
        "single_flight": True,
        "fresh_for": "10m",
        "ttl": "1d",
    }
    fn = users if kind == "sync" else ausers
    get: Any = failover.failover("users", **options)(fn)
    ids = [1, 2]
    for tenant in TENANTS:  # 1 fresh for both; 2 asked of the upstream, narrowed
        if kind == "sync":
            in_tenant(tenant, get, [1])
        else:
            await ain_tenant(tenant, get, [1])
    holding = True
    if kind == "sync":

        def call(tenant: str) -> None:
            try:
                got[tenant] = in_tenant(tenant, get, ids)
            except Exception as exc:
                got[tenant] = exc

        got: dict[str, Any] = {}
        acme = threading.Thread(target=call, args=("acme",))
        acme.start()
        assert entered["acme"].wait(WAIT)
        globex = threading.Thread(target=call, args=("globex",))
        globex.start()
        for t in (acme, globex):
            t.join(3 * WAIT)
    else:
        first = asyncio.ensure_future(ain_tenant("acme", get, ids))
        assert await asyncio.to_thread(entered["acme"].wait, WAIT)
        second = asyncio.ensure_future(ain_tenant("globex", get, ids))
        answers = await asyncio.wait_for(
            asyncio.gather(first, second, return_exceptions=True), 3 * WAIT
        )
        got = dict(zip(TENANTS, answers, strict=True))
    for tenant in TENANTS:
        assert got[tenant] == [{"id": i, "tenant": tenant} for i in ids], got
    assert len(get._failover_state.runtime().flights) == 0
    await engine.aclose()


# -- refresh ahead --------------------------------------------------------------------------


async def settled(engine: Failover) -> None:
    """Until the engine's background refreshes (pool calls and tasks) have ended."""
    tasks = set(engine.refreshes._tasks)
    if tasks:
        await asyncio.wait(tasks, timeout=3 * WAIT)
    assert await asyncio.to_thread(engine.refreshes.wait, 3 * WAIT)


@pytest.mark.parametrize("kind", KINDS)
async def test_a_tenants_refresh_ahead_never_stands_in_for_anothers(
    kind: str, backend: str, tmp_path: Path, clock: FakeClock
) -> None:
    """Acme's refresh of ``settings`` is in flight when globex's call of the same key is answered
    from its store past ``refresh_ahead``: globex's entry is refreshed by a call of its own."""
    engine = routed(tmp_path, clock, backend)
    upstream = Held()
    profile = decorate(kind, engine, upstream, fresh_for="10m", refresh_ahead=0.5)
    for tenant in TENANTS:
        if kind == "sync":
            in_tenant(tenant, profile, "settings")
        else:
            await ain_tenant(tenant, profile, "settings")
    await asyncio.to_thread(engine.flush, WAIT)
    first = list(upstream.calls)
    clock.advance(minutes=6)  # past refresh_ahead: answered from the store, refreshed behind
    upstream.holding = True
    for tenant in TENANTS:  # acme's refresh starts first, and waits for globex's
        if kind == "sync":
            served = in_tenant(tenant, profile, "settings")
        else:
            served = await ain_tenant(tenant, profile, "settings")
        assert served == Held.answer(tenant, "settings")  # from the tenant's own store
        if tenant == "acme":
            assert await asyncio.to_thread(upstream.entered["acme"].wait, WAIT)
    await settled(engine)
    assert upstream.entered["globex"].is_set(), "globex's refresh was dropped"
    assert sorted(t for t in upstream.calls[len(first) :] if t) == ["acme", "globex"]
    rt = profile._failover_state.runtime()
    assert len(rt.ahead) == 0
    await asyncio.to_thread(engine.flush, WAIT)
    for tenant in TENANTS:  # each refreshed entry in its own tenant's file, as of now
        with failover.tenant(tenant):
            found = await asyncio.to_thread(profile.peek, "settings")
        assert found is not None
        assert (found.payload, found.as_of) == (Held.answer(tenant, "settings"), clock.now)
    await engine.aclose()
