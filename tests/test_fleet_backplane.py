"""The backplane (issue 32): a `TieredStore`'s near copies stay coherent across the processes of
a fleet.

Real processes (forked children, `tests.fleet_procs`), each with a ``tiered+redis://`` store
and ``fresh_for`` (so that a near copy, if trusted, answers the call), on a fleet of this
module's own redis-server (stopped with ``SIGSTOP`` to play a backplane outage, always resumed)
or the suite's 3+3 cluster; the far store is the suite's shared redis-server. Each wait for a
message is a bounded wait on the child's backplane events; no sleep, no assertion on time.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

import failover
from failover import Failover
from failover.stores.layers.tiered import TieredStore

from . import redis_ha
from .fleet_procs import HANG, Child, Commands, Here, fleet_of
from .own_servers import running, stopped
from .redis_server import RedisServer, unique_prefix
from .redis_server import server as shared_server

PROCESSES = 4
DOMAIN = "fleet.backplane"


@pytest.fixture(scope="module")
def fleet_server() -> Iterator[RedisServer]:
    """A redis-server of this module's own: stopping it stalls no other test."""
    yield from running(RedisServer())


def _child(fleet: str, store: str, tag: str) -> Callable[[int, Here], Commands]:
    def setup(index: int, here: Here) -> Commands:
        engine = Failover(store=store, fleet=fleet, metrics=False, store_timeout=0.25)
        assert engine.fleet is not None
        fleet_ = engine.fleet
        fleet_.bus.heartbeat = 0.2  # an outage noticed within 0.2 + 2 x 0.25 s
        assert fleet_.bus.subscribed.wait(HANG)
        tiered = engine.raw_store
        assert isinstance(tiered, TieredStore)
        versions = redis.Redis.from_url(shared_server().url)

        def body() -> dict[str, int]:
            return {"v": int(versions.get(f"{tag}version") or 0)}

        @failover.failover(
            "fleet.bp.cached", engine=engine, domain=DOMAIN, fresh_for="1m", tags=lambda b: ["fx"]
        )
        def cached(base: str) -> dict[str, int]:
            return body()

        @failover.failover("fleet.bp.live", engine=engine, domain=DOMAIN)
        def live(base: str) -> dict[str, int]:
            return body()

        def read(which: str) -> list[Any]:
            answer = (cached if which == "cached" else live).referential("EUR")
            return [answer.payload["v"], answer.up_to_date]

        def near() -> int:
            return len(tiered.near.find_all(DOMAIN))

        def invalidate() -> bool:
            cached.invalidate("EUR")
            return engine.flush(HANG)  # the far delete made: then it is announced

        def flush() -> bool:
            return engine.flush(HANG)

        def control(how: str) -> bool:
            """An entry control made in this process: its near and far tiers at once."""
            if how == "expire":
                cached.expire("EUR")
            elif how == "clear":
                cached.invalidate_all()
            else:
                engine.invalidate_tag("fx")
            return True

        def arm() -> int:
            fleet_.backplane.applied.clear()
            return fleet_.backplane.resyncs

        def heard() -> bool:
            return fleet_.backplane.applied.wait(HANG)

        def dropped() -> bool:
            """Until no near copy is left (bounded: each step a wait on the next batch)."""
            backplane = fleet_.backplane
            deadline = time.monotonic() + HANG
            while near():
                left = deadline - time.monotonic()
                if left <= 0 or not backplane.applied.wait(left):
                    return False
                backplane.applied.clear()
            return True

        def resynced(before: int) -> bool:
            backplane = fleet_.backplane
            deadline = time.monotonic() + HANG
            while backplane.resyncs <= before:
                left = deadline - time.monotonic()
                if left <= 0 or not backplane.applied.wait(left):
                    return False
                backplane.applied.clear()
            return True

        def lost() -> bool:
            return fleet_.bus.lost.wait(HANG)

        return {
            "read": read,
            "near": near,
            "invalidate": invalidate,
            "flush": flush,
            "control": control,
            "arm": arm,
            "heard": heard,
            "dropped": dropped,
            "resynced": resynced,
            "lost": lost,
        }

    return setup


def _warm(children: list[Child], versions: Any, tag: str) -> None:
    """Every process holds a near copy of version 1, and no message is on its way."""
    versions.set(f"{tag}version", 1)
    writer, others = children[0], children[1:]
    for child in others:
        child.ask("arm")
    assert writer.ask("read", "cached") == [1, True]
    assert writer.ask("flush")
    for child in others:
        assert child.ask("heard")  # the writer's store announced: nothing left in flight
        assert child.ask("read", "cached") == [1, True]  # from far, kept near
    assert [child.ask("near") for child in children] == [1] * PROCESSES


@pytest.mark.parametrize("where", ["server", "cluster", "sentinel"])
def test_a_write_in_one_process_drops_the_others_near_copies(
    where: str, fleet_server: RedisServer
) -> None:
    store = shared_server()
    tag = unique_prefix()
    urls = {"cluster": redis_ha.cluster, "sentinel": redis_ha.sentinels}
    fleet = (urls[where]().url if where in urls else fleet_server.url) + f"?prefix={tag}"
    versions = store.client()
    setup = _child(fleet, f"tiered+{store.url}?prefix={tag}", tag)
    with fleet_of(PROCESSES, setup) as children:
        _warm(children, versions, tag)
        writer, others = children[0], children[1:]
        # An invalidation: the others' next read does not serve their near copy.
        versions.set(f"{tag}version", 2)
        for child in others:
            child.ask("arm")
        assert writer.ask("invalidate")
        for child in others:
            assert child.ask("dropped")
            assert child.ask("read", "cached") == [2, True]
        # Each of them stored version 2 (its call reached the upstream): made in far before
        # version 3 is. One still queued (its write given up at a loaded host's deadline, to be
        # retried) would answer that process's next read, which is not what is tested here.
        for child in others:
            assert child.ask("flush")
        # A newer entry stored by one process: the others read it, not their near copy.
        versions.set(f"{tag}version", 3)
        for child in others:
            child.ask("arm")
        assert writer.ask("read", "live") == [3, True]
        assert writer.ask("flush")
        for child in others:
            assert child.ask("dropped")
            assert child.ask("read", "cached") == [3, True]
    versions.close()


@pytest.mark.parametrize("how", ["expire", "clear", "tag"])
def test_an_entry_control_in_one_process_drops_the_others_near_copies(
    how: str, fleet_server: RedisServer
) -> None:
    store = shared_server()
    tag = unique_prefix()
    setup = _child(fleet_server.url + f"?prefix={tag}", f"tiered+{store.url}?prefix={tag}", tag)
    versions = store.client()
    with fleet_of(PROCESSES, setup) as children:
        _warm(children, versions, tag)
        writer, others = children[0], children[1:]
        versions.set(f"{tag}version", 2)
        for child in others:
            child.ask("arm")
        assert writer.ask("control", how)  # .expire(), .invalidate_all() or invalidate_tag()
        for child in others:
            assert child.ask("dropped")
            assert child.ask("read", "cached") == [2, True]  # not the near copy's fresh 1
    versions.close()


def test_after_a_backplane_outage_no_near_copy_is_trusted(fleet_server: RedisServer) -> None:
    store = shared_server()
    tag = unique_prefix()
    versions = store.client()
    setup = _child(f"{fleet_server.url}?prefix={tag}", f"tiered+{store.url}?prefix={tag}", tag)
    assert fleet_server.process is not None
    with fleet_of(PROCESSES, setup) as children:
        _warm(children, versions, tag)
        writer, others = children[0], children[1:]
        before = [child.ask("arm") for child in others]
        with stopped([fleet_server.process.pid]):
            for child in children:
                assert child.ask("lost")  # each process noticed the silent backplane
            versions.set(f"{tag}version", 2)
            assert writer.ask("invalidate")  # far has it; its message cannot go out yet
        for child, count in zip(others, before, strict=True):
            assert child.ask("resynced", count)  # back: every near copy dropped
            assert child.ask("read", "cached") == [2, True]
    versions.close()


def test_a_process_does_not_act_on_its_own_messages(fleet_server: RedisServer) -> None:
    store = shared_server()
    tag = unique_prefix()
    engine = Failover(
        store=f"tiered+{store.url}?prefix={tag}",
        fleet=f"{fleet_server.url}?prefix={tag}",
        metrics=False,
    )
    other = Failover(fleet=f"{fleet_server.url}?prefix={tag}", metrics=False)
    try:
        assert engine.fleet is not None
        assert other.fleet is not None
        assert engine.fleet.bus.subscribed.wait(HANG)
        assert other.fleet.bus.subscribed.wait(HANG)
        heard = threading.Event()
        other.fleet.bus.handlers["n"] = lambda items: heard.set()

        @failover.failover("fleet.bp.own", engine=engine, fresh_for="1m")
        def own(base: str) -> int:
            return 1

        own("EUR")
        assert engine.flush(HANG)
        assert heard.wait(HANG)  # the message went out (another process heard it)
        assert engine.fleet.sync()  # after the round that published it
        assert engine.fleet.bus.sent >= 1
        tiered = engine.raw_store
        assert isinstance(tiered, TieredStore)
        assert len(tiered.near.find_all("fleet.bp.own")) == 1  # its own near copy kept
        assert engine.fleet.backplane.dropped == 0
    finally:
        engine.close()
        other.close()
