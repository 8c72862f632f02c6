"""One flight per key across the fleet (``single_flight="fleet"``, issue 32), and one cleanup
per period for the fleet.

Real processes (forked children, `tests.fleet_procs`), each with an engine of its own, on a
redis-server of this module's own (stopped with ``SIGSTOP`` to play an unreachable fleet,
always resumed) and on the suite's 3+3 Redis Cluster. The upstream counts its calls in Redis
(``INCR``) and holds the first one until the test releases it, once every other process says
its calls wait for that flight: so the calls are concurrent by construction, not by timing.
Waits are bounded reads of the children's pipes; no assertion on time.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

import failover
from failover import ConfigurationError, Failover

from . import redis_ha
from .conftest import FakeClock
from .fleet_procs import HANG, Child, Commands, Here, fleet_of
from .own_servers import running, stopped
from .redis_server import RedisServer, unique_prefix
from .redis_server import server as shared_server

PROCESSES = 4
CALLERS = 4
NAME = "fleet.flight.rates"


@pytest.fixture(scope="module")
def fleet_server() -> Iterator[RedisServer]:
    """A redis-server of this module's own: stopping it stalls no other test."""
    yield from running(RedisServer())


@pytest.fixture(scope="module")
def fleet_cluster() -> Iterator[redis_ha.RedisCluster]:
    """A 3+3 Redis Cluster of this module's own: stopping it stalls no other test."""
    yield from running(redis_ha.RedisCluster())


def _fleet_url(where: str, fleet_server: RedisServer) -> str:
    if where == "cluster":
        return f"{redis_ha.cluster().url}?prefix={unique_prefix()}"
    if where == "sentinel":  # the Sentinel set's master, found through its sentinels
        return f"{redis_ha.sentinels().url}?prefix={unique_prefix()}"
    return f"{fleet_server.url}?prefix={unique_prefix()}"


def _child(
    fleet: str,
    store: str,
    counter: str,
    tag: str,
    kind: str,
    lease: float,
    hold: str,
    timeout: float = 2.0,
) -> Callable[[int, Here], Commands]:
    """A child's setup: an engine on ``fleet`` and ``store``, one failover whose upstream
    counts its calls in ``counter`` and holds the first one (``hold``: ``"release"`` until
    the test pushes to the release list, ``"forever"`` until killed). ``timeout``: the fleet's
    socket timeout (long enough that a loaded machine does not make a lease's ask fail)."""

    def setup(index: int, here: Here) -> Commands:
        engine = Failover(store=store, fleet=fleet, metrics=False, store_timeout=timeout)
        assert engine.fleet is not None
        engine.fleet.flights.lease = lease
        assert engine.fleet.bus.subscribed.wait(HANG)  # it hears the others' landings
        counts = redis.Redis.from_url(counter)
        local = [0]

        def body() -> dict[str, int]:
            local[0] += 1
            n = int(counts.incr(f"{tag}calls"))
            here.report(["called", n])
            if n == 1 and hold == "release":
                assert counts.blpop([f"{tag}release"], timeout=HANG) is not None
            elif n == 1 and hold == "forever":
                threading.Event().wait()
            return {"n": n}

        if kind == "sync":

            @failover.failover(NAME, engine=engine, single_flight="fleet", fresh_for="1m")
            def rates(base: str) -> dict[str, int]:
                return body()

        else:

            @failover.failover(NAME, engine=engine, single_flight="fleet", fresh_for="1m")
            async def rates(base: str) -> dict[str, int]:  # type: ignore[misc]
                return await asyncio.to_thread(body)

        results: list[Any] = []
        done = threading.Event()

        def one(answer: Any) -> list[Any]:
            return [None if answer.payload is None else answer.payload["n"], answer.up_to_date]

        def callers() -> None:
            try:
                if kind == "sync":
                    barrier = threading.Barrier(CALLERS)

                    def call() -> None:
                        barrier.wait(HANG)
                        results.append(one(rates.referential("EUR")))

                    threads = [threading.Thread(target=call) for _ in range(CALLERS)]
                    for t in threads:
                        t.start()
                    for t in threads:
                        t.join(3 * HANG)
                else:

                    async def all_of() -> None:
                        answers = await asyncio.gather(
                            *[rates.referential("EUR") for _ in range(CALLERS)]  # type: ignore[misc]
                        )
                        results.extend(one(a) for a in answers)

                    asyncio.run(all_of())
            finally:
                done.set()

        def watch() -> None:
            assert engine.fleet is not None
            if engine.fleet.flights.waited.wait(3 * HANG):
                here.report(["waiting", index])

        def start() -> str:
            threading.Thread(target=watch, daemon=True).start()
            threading.Thread(target=callers, daemon=True).start()
            return "started"

        def answers() -> dict[str, Any]:
            assert done.wait(3 * HANG)
            assert engine.fleet is not None
            health = engine.health().stores["fleet"]
            return {
                "results": results,
                "upstream": local[0],
                "counts": dict(engine.fleet.flights.counts),
                "fleet": health.status,
                "flight_errors": sum(
                    n for (op, _), n in engine.fleet.errors.items() if op == "flight"
                ),
            }

        return {"start": start, "answers": answers}

    return setup


def _events(children: list[Child]) -> dict[str, list[Any]]:
    """One event per child: which one called the upstream, which ones wait for it."""
    seen: dict[str, list[Any]] = {"called": [], "waiting": []}
    for child in children:
        kind, value = child.event()
        seen[kind].append((child, value))
    return seen


def _shared_store_setup(
    where: str, fleet_server: RedisServer, kind: str, lease: float, hold: str
) -> tuple[RedisServer, str, Callable[[int, Here], Commands]]:
    """The suite's shared Redis as every child's store (its upstream counter there too), a
    tag of the test's own, and the children's setup on the fleet ``where``."""
    store = shared_server()
    tag = unique_prefix()
    setup = _child(
        _fleet_url(where, fleet_server),
        f"{store.url}?prefix={tag}",
        store.url,
        tag,
        kind,
        lease=lease,
        hold=hold,
    )
    return store, tag, setup


def _one_called(children: list[Child]) -> dict[str, list[Any]]:
    """Start every child's callers; one process calls the upstream, the others wait for it."""
    for child in children:
        assert child.ask("start") == "started"
    seen = _events(children)
    assert len(seen["called"]) == 1
    assert len(seen["waiting"]) == PROCESSES - 1
    return seen


@pytest.mark.parametrize("kind", ["sync", "async"])
@pytest.mark.parametrize("where", ["server", "cluster", "sentinel"])
def test_processes_times_callers_of_one_cold_key_make_one_upstream_call(
    where: str, kind: str, fleet_server: RedisServer
) -> None:
    store, tag, setup = _shared_store_setup(where, fleet_server, kind, 5.0, "release")
    counts = store.client()
    with fleet_of(PROCESSES, setup) as children:
        _one_called(children)
        counts.rpush(f"{tag}release", "go")  # the holder answers
        out = [child.ask("answers", timeout=3 * HANG) for child in children]
    results = [r for o in out for r in o["results"]]
    assert results == [[1, True]] * (PROCESSES * CALLERS)
    assert int(counts.get(f"{tag}calls")) == 1  # one upstream call for the whole fleet
    assert sum(o["counts"].get("led", 0) for o in out) == 1
    counts.close()


@pytest.mark.parametrize("kind", ["sync", "async"])
@pytest.mark.parametrize("where", ["server", "cluster", "sentinel"])
def test_a_holder_killed_mid_call_is_taken_over_and_every_caller_answered(
    where: str, kind: str, fleet_server: RedisServer
) -> None:
    # A short lease: a dead holder's lapses within two seconds.
    store, tag, setup = _shared_store_setup(where, fleet_server, kind, 2.0, "forever")
    counts = store.client()
    with fleet_of(PROCESSES, setup) as children:
        seen = _one_called(children)
        holder = seen["called"][0][0]
        holder.kill()  # SIGKILL mid-call: its lease is no longer renewed
        survivors = [c for c in children if c is not holder]
        out = [child.ask("answers", timeout=3 * HANG) for child in survivors]
    results = [r for o in out for r in o["results"]]
    # Another process took the lapsed lease, called once, and every caller got its answer.
    assert results == [[2, True]] * ((PROCESSES - 1) * CALLERS)
    assert int(counts.get(f"{tag}calls")) == 2
    assert sum(o["upstream"] for o in out) == 1
    counts.close()


@pytest.mark.parametrize("kind", ["sync", "async"])
@pytest.mark.parametrize("where", ["server", "cluster"])
def test_with_the_fleet_stopped_each_process_flies_alone_and_callers_are_answered(
    where: str, kind: str, fleet_server: RedisServer, request: pytest.FixtureRequest
) -> None:
    """Every process of the fleet (its one server, or every node of its cluster) stopped."""
    store = shared_server()
    tag = unique_prefix()
    if where == "cluster":
        cluster: redis_ha.RedisCluster = request.getfixturevalue("fleet_cluster")
        url = f"{cluster.url}?prefix={tag}"
        pids = [n.process.pid for n in cluster.nodes if n.process is not None]
    else:
        assert fleet_server.process is not None
        url = f"{fleet_server.url}?prefix={tag}"
        pids = [fleet_server.process.pid]
    setup = _child(
        url,
        "memory://",  # each process its own store: the stopped Redis is the fleet's alone
        store.url,
        tag,
        kind,
        lease=5.0,
        hold="none",
        timeout=0.5,
    )
    with fleet_of(PROCESSES, setup) as children, stopped(pids):
        for child in children:
            assert child.ask("start") == "started"
        out = [child.ask("answers", timeout=3 * HANG) for child in children]
    for o in out:
        assert len(o["results"]) == CALLERS
        assert all(up for _, up in o["results"])
        assert o["upstream"] == 1  # single flight per process
        assert o["fleet"] == "down"  # the fleet's trouble shows in health
        assert o["flight_errors"] + o["counts"].get("local", 0) >= 1


def test_fleet_single_flight_needs_an_engine_with_a_fleet(clock: FakeClock) -> None:
    engine = Failover(clock=clock, metrics=False)

    @failover.failover("fleet.flight.none", engine=engine, single_flight="fleet")
    def rates(base: str) -> int:
        return 1

    with pytest.raises(
        ConfigurationError, match="single_flight='fleet' needs an engine with fleet="
    ):
        rates("EUR")
    with pytest.raises(
        ConfigurationError, match="single_flight= must be True or False, or 'fleet'"
    ):
        failover.failover("f", single_flight="fleets")(lambda: 1)  # type: ignore[call-overload]
    engine.close()


# -- one cleanup per period for the fleet --------------------------------------------------------


class Cleaned:
    """A cleanup that counts its runs and says when it ran (``ran``)."""

    def __init__(self) -> None:
        self.runs = 0
        self.ran = threading.Event()

    def __call__(self) -> int:
        self.runs += 1
        self.ran.set()
        return 0


def test_one_cleanup_per_period_for_the_whole_fleet(
    fleet_server: RedisServer, clock: FakeClock
) -> None:
    url = f"{fleet_server.url}?prefix={unique_prefix()}"
    engines = [Failover(clock=clock, metrics=False, fleet=url) for _ in range(4)]
    try:
        schedulers = []
        for engine in engines:
            assert engine.fleet is not None
            scheduler = engine.start_cleanup(every="1h")
            schedulers.append(scheduler)
        for s in schedulers:
            s.stop(HANG)
        fleets = [e.fleet for e in engines if e.fleet is not None]
        ran = sum(f.cleanups.counts["ran"] for f in fleets)
        skipped = sum(f.cleanups.counts["skipped"] for f in fleets)
        assert ran == 1  # one instance cleans this period
        assert skipped == 3  # the others skip it, counted
        assert sum(s.skipped for s in schedulers) == 3
    finally:
        for e in engines:
            e.close()


def test_with_the_fleet_stopped_every_instance_cleans(
    fleet_server: RedisServer, clock: FakeClock
) -> None:
    url = f"{fleet_server.url}?prefix={unique_prefix()}"
    engines = [Failover(clock=clock, metrics=False, fleet=url) for _ in range(2)]
    assert fleet_server.process is not None
    try:
        with stopped([fleet_server.process.pid]):
            schedulers = [e.start_cleanup(every="1h") for e in engines]
            for s in schedulers:
                s.stop(HANG)
        fleets = [e.fleet for e in engines if e.fleet is not None]
        assert sum(f.cleanups.counts["local"] for f in fleets) == 2
        assert all(s.skipped == 0 for s in schedulers)
    finally:
        for e in engines:
            e.close()


def test_without_a_fleet_every_scheduler_cleans(clock: FakeClock) -> None:
    engines = [Failover(clock=clock, metrics=False) for _ in range(2)]
    try:
        schedulers = [e.start_cleanup(every="1h") for e in engines]
        for s in schedulers:
            s.stop(HANG)
        assert all(s.skipped == 0 and s.turn is None for s in schedulers)
    finally:
        for e in engines:
            e.close()


# -- scatter/gather ----------------------------------------------------------------------------


def test_scatter_slices_not_fresh_fly_once_for_the_fleet(fleet_server: RedisServer) -> None:
    """Two engines standing for two processes: a call whose slices are partly fresh asks the
    upstream for the others only, once for the fleet; the other engine's call of the same
    slices waits for that flight and is answered from the slices it stored."""
    from failover.scatter import ListSplitter

    tag = unique_prefix()
    store = shared_server()
    engines = [
        Failover(
            store=f"{store.url}?prefix={tag}",
            fleet=f"{fleet_server.url}?prefix={tag}",
            metrics=False,
            store_timeout=2.0,
        )
        for _ in range(2)
    ]
    calls: list[str] = []
    entered, release = threading.Event(), threading.Event()
    fns = []
    try:
        for e in engines:
            assert e.fleet is not None
            assert e.fleet.bus.subscribed.wait(HANG)

            @failover.failover(
                "fleet.flight.countries",
                engine=e,
                single_flight="fleet",
                fresh_for="1m",
                splitter=ListSplitter(item_key="code"),
            )
            def countries(codes: str) -> list[dict[str, str]]:
                calls.append(codes)
                entered.set()
                assert release.wait(HANG)
                return [{"code": c} for c in codes.split(",")]

            fns.append(countries)
        release.set()
        assert fns[0]("FR") == [{"code": "FR"}]  # FR fresh from now on
        assert engines[0].flush(HANG)
        calls.clear()
        entered.clear()
        release.clear()
        out: list[Any] = [None, None]
        first = threading.Thread(target=lambda: out.__setitem__(0, fns[0]("FR,IT")))
        first.start()
        assert entered.wait(HANG)  # the first engine's flight of IT holds the lease
        second = threading.Thread(target=lambda: out.__setitem__(1, fns[1]("FR,IT")))
        second.start()
        fleet = engines[1].fleet
        assert fleet is not None
        assert fleet.flights.waited.wait(HANG)  # the second waits for that flight
        release.set()
        first.join(HANG)
        second.join(HANG)
        assert calls == ["IT"]  # the slice not fresh, asked once for the fleet
        assert out == [[{"code": "FR"}, {"code": "IT"}]] * 2
    finally:
        release.set()
        for e in engines:
            e.close()


# -- what the fleet is told cannot be used against it ----------------------------------------


def test_two_tenants_never_share_a_fleet_flight(fleet_server: RedisServer, tmp_path: Any) -> None:
    """A flight's lease is the tenant's: while acme's call of a key is in flight in one process,
    globex's call of the same key in another takes its own lease and calls its own upstream."""
    tag = unique_prefix()
    engines = [
        Failover(
            f"sqlite:///{tmp_path}/{i}-{{tenant}}.db",
            tenant_resolver=failover.current_tenant,
            fleet=f"{fleet_server.url}?prefix={tag}",
            metrics=False,
            store_timeout=2.0,
        )
        for i in range(2)
    ]
    entered, release = threading.Event(), threading.Event()
    fns = []
    try:
        for e in engines:

            @failover.failover("fleet.flight.profile", engine=e, single_flight="fleet")
            def profile(user: str) -> dict[str, str | None]:
                tenant = failover.current_tenant()
                if tenant == "acme":
                    entered.set()
                    assert release.wait(HANG)
                return {"tenant": tenant}

            fns.append(profile)

        def call(fn: Any, tenant: str, out: list[Any]) -> None:
            with failover.tenant(tenant):
                out.append(fn("u1"))

        acme: list[Any] = []
        holder = threading.Thread(target=call, args=(fns[0], "acme", acme))
        holder.start()
        assert entered.wait(HANG)
        globex: list[Any] = []
        call(fns[1], "globex", globex)  # not held by acme's flight: answers at once
        assert globex == [{"tenant": "globex"}]
        fleet = engines[1].fleet
        assert fleet is not None
        assert fleet.flights.counts["waited"] == 0
        release.set()
        holder.join(HANG)
        assert acme == [{"tenant": "acme"}]
    finally:
        release.set()
        for e in engines:
            e.close()


def test_messages_that_are_not_the_buses_are_ignored(fleet_server: RedisServer) -> None:
    """Anyone who can publish on the fleet's channel: malformed messages, unknown kinds and
    items of the wrong shape are ignored; the process keeps listening and acting."""
    tag = unique_prefix()
    store = shared_server()
    engine = Failover(
        store=f"tiered+{store.url}?prefix={tag}",
        fleet=f"{fleet_server.url}?prefix={tag}",
        metrics=False,
    )
    client = fleet_server.client()
    try:
        assert engine.fleet is not None
        bus = engine.fleet.bus
        assert bus.subscribed.wait(HANG)
        channel = bus.channel
        for junk in (
            "not json",
            '{"o": "x", "k": {"zz": [1]}}',
            '{"o": "x", "k": {"n": [1, "a", ["s"]], "f": [["k"], 3]}}',
            '{"o": "x", "k": []}',
            '{"o": "x", "k": [1, 2]}',
            "[1, 2]",
        ):
            client.publish(channel, junk)
        engine.fleet.backplane.applied.clear()
        client.publish(channel, '{"o": "x", "k": {"n": [["d", null, "name", ["key"]]]}}')
        assert engine.fleet.backplane.applied.wait(HANG)  # still listening, still acting
        assert bus.subscribed.is_set()
        assert not bus.lost.is_set()  # never dropped the subscription (nor resynced)
        assert bus.resynced == 1
    finally:
        client.close()
        engine.close()
