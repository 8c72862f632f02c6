"""Scale-out deployments, against real servers started by the suite: a Redis Cluster (3 masters,
3 replicas), a Sentinel set (a master, a replica, three sentinels) and PgBouncer in transaction
mode in front of PostgreSQL (tests/redis_ha.py, tests/pgbouncer.py). The store contract suite
runs over each (tests/stores.py); here: what is particular to each, and a load with a failover
(a master killed, the bouncer restarted) during which no call breaks and no write goes
unaccounted."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import redis
from prometheus_client import CollectorRegistry

import failover
from failover import DictSplitter, ReferentialPayload
from failover.errors import ConfigurationError, StoreError
from failover.stores.backends.redis import RedisStore
from failover.stores.backends.redis.topology import LazyCluster
from failover.stores.backends.sql import SqlStore
from failover.stores.base import Payload

from . import pgbouncer, postgres, redis_ha, redis_server
from .conftest import FakeClock
from .own_servers import running


def entry(clock: FakeClock, key: str, name: str = "n") -> ReferentialPayload[Any]:
    now = clock()
    return ReferentialPayload(name, key, {"k": key}, now, now + timedelta(minutes=5), True)


# -- Redis Cluster ---------------------------------------------------------------------------------


def test_a_names_entries_spread_over_the_slots_and_the_masters(clock: FakeClock) -> None:
    cluster = redis_ha.cluster()
    store = RedisStore(cluster.url, prefix=redis_server.unique_prefix(), clock=clock)
    try:
        store.store_many([entry(clock, f"k{i}") for i in range(300)])
        assert isinstance(store.client, LazyCluster)
        client = store.client.get()
        entry_keys = [f"{store.prefix}e:n:k{i}" for i in range(300)]
        slots = {client.keyslot(k) for k in entry_keys}
        # A key each: no hot slot for the name. CRC16 is linear, so the count depends on the
        # random prefix: 210..300 distinct slots over 2,000 prefixes (never near one slot).
        assert len(slots) > 150
        owners = {client.get_node_from_key(k).port for k in entry_keys}
        assert owners == set(cluster.masters())
        assert len(store.find_all("n")) == 300
        assert [e.key for e in store.page("n", None, 3).entries] == ["k0", "k1", "k10"]
        assert [e.key for e in store.page("n", "k97", 5).entries] == ["k98", "k99"]
    finally:
        store.close()


def count_round_trips(monkeypatch: pytest.MonkeyPatch) -> dict[int, int]:
    """The packets redis-py sends from now on, per server port: one per command, one per
    pipeline (a round trip)."""
    sent: dict[int, int] = {}
    lock = threading.Lock()
    send = redis.connection.Connection.send_packed_command

    def counting(self: Any, command: Any, check_health: bool = True) -> None:
        with lock:
            sent[self.port] = sent.get(self.port, 0) + 1
        send(self, command, check_health)

    monkeypatch.setattr(redis.connection.Connection, "send_packed_command", counting)
    return sent


def test_scatter_gather_of_1000_slices_is_one_round_trip_per_node(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster = redis_ha.cluster()
    store = RedisStore(cluster.url, prefix=redis_server.unique_prefix(), clock=clock)
    # No deadline to speak of: a write given up at it (the first one loads the script on every
    # master; on a loaded host it may take longer than 0.5 s) would still be running in the
    # background while the round trips are counted.
    engine = failover.Failover(
        store, async_writes=False, metrics=False, clock=clock, store_timeout=30
    )
    down = threading.Event()

    @failover.failover("quotes", splitter=DictSplitter(item_key="id"), engine=engine)
    def quotes(*ids: str) -> dict[str, dict[str, object]]:
        if down.is_set():
            raise ConnectionError("quotes down")
        return {i: {"id": i, "px": len(i)} for i in ids}

    try:
        ids = [f"q{i}" for i in range(1000)]
        quotes(*ids)  # live: 1,000 slices stored
        down.set()
        masters = cluster.masters()
        sent = count_round_trips(monkeypatch)
        recovered = quotes(*ids)  # every slice recovered: one find_many
        counted = dict(sent)
        assert recovered == {i: {"id": i, "px": len(i)} for i in ids}
        assert counted == dict.fromkeys(masters, 1)  # one pipeline to each master
    finally:
        store.close()


def test_a_batch_of_1000_writes_is_one_round_trip_per_node(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The write script (entries only move forward) is called once per entry on a cluster; each
    # call is routed by its key, never by asking a node for its keys (a round trip each).
    cluster = redis_ha.cluster()
    store = RedisStore(cluster.url, prefix=redis_server.unique_prefix(), clock=clock)
    now = clock()
    batch = [
        ReferentialPayload("n", f"k{i}", {"i": i}, now, now + timedelta(hours=1), True)
        for i in range(1000)
    ]
    try:
        store.store_many(batch)  # every master loads the script (EVAL, on NOSCRIPT)
        sent = count_round_trips(monkeypatch)
        assert store.store_many(batch) == 0
        counted = dict(sent)
        assert len(store.find_many("n", [p.key for p in batch])) == 1000
        assert counted == dict.fromkeys(cluster.masters(), 1)  # one pipeline to each master
    finally:
        store.close()


# -- load with a failover --------------------------------------------------------------------------


class Counted:
    """Between the async-writes queue and the real store: the entries successful
    ``store_many`` calls wrote (each once: a batch given up at its deadline may still land and
    be retried too), and those begun after the failover was over."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.over = threading.Event()
        self.lock = threading.Lock()
        self.keys: set[tuple[str, str]] = set()
        self.written_after: list[Payload] = []

    @property
    def written(self) -> int:
        return len(self.keys)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def store(self, payload: Payload) -> Any:
        return self.store_many([payload])

    def store_many(self, payloads: Sequence[Payload]) -> Any:
        after = self.over.is_set()
        kept = self.inner.store_many(payloads)
        with self.lock:
            self.keys.update((p.name, p.key) for p in payloads)
            if after:
                self.written_after += payloads
        return kept


def run_load(store: Any, disrupt: Callable[[], object]) -> None:
    """8 threads call through an engine on ``store`` (its writes queued) while ``disrupt``
    runs; then: no call broke, every write queued was written or counted failed, every write
    begun once ``disrupt`` was over is found, and writes resumed."""
    counted = Counted(store)
    registry = CollectorRegistry()
    engine = failover.Failover(counted, metrics=registry)  # async writes: on (does_io)

    @failover.failover("load", engine=engine)
    def rate(key: str) -> dict[str, str]:
        return {"k": key}

    progress = threading.Condition()
    calls = [0]
    stop = threading.Event()
    errors: list[BaseException] = []

    def load(worker: int) -> None:
        i = 0
        while not stop.is_set():
            key = f"{worker}-{i}"  # every key once: no write replaces a queued one
            try:
                assert rate(key) == {"k": key}
            except BaseException as exc:  # collected and re-raised on the main thread
                errors.append(exc)
                return
            i += 1
            with progress:
                calls[0] += 1
                progress.notify_all()

    def after(more: int) -> None:
        with progress:
            target = calls[0] + more
            assert progress.wait_for(lambda: calls[0] >= target or bool(errors), timeout=30)

    workers = [threading.Thread(target=load, args=(w,)) for w in range(8)]
    with engine:
        for worker in workers:
            worker.start()
        try:
            after(200)
            disrupt()
            counted.over.set()
            after(400)
        finally:
            stop.set()
            for worker in workers:
                worker.join(timeout=30)
        assert errors == []
        # Writes to the slots of a node that was out are retried: they land once the store
        # has read the slot map again (within its one-second back-off), a flush or two later.
        redis_ha.wait_for(lambda: engine.flush(timeout=30), "the queued writes written", 30)
        failed = registry.get_sample_value("failover_async_writes_failed_total") or 0
        dropped = registry.get_sample_value("failover_async_writes_dropped_total") or 0
        # Nothing lost: each write was written or counted failed. A batch given up at its
        # deadline may still land after its retry failed: then it is both (never neither).
        assert counted.written <= calls[0] <= counted.written + failed + dropped
        assert counted.written_after  # writes resumed
        names = {p.key: p for p in counted.written_after}
        found = store.find_many("load", list(names))
        assert sorted(found) == sorted(names)
        assert all(found[k].payload == names[k].payload for k in names)


@pytest.fixture
def own_cluster() -> Iterator[redis_ha.RedisCluster]:
    yield from running(redis_ha.RedisCluster())


@pytest.fixture
def own_sentinels() -> Iterator[redis_ha.SentinelSet]:
    yield from running(redis_ha.SentinelSet())


def test_a_cluster_master_killed_mid_load(own_cluster: redis_ha.RedisCluster) -> None:
    store = RedisStore(own_cluster.url, prefix=redis_server.unique_prefix())
    try:
        run_load(store, own_cluster.kill_master)
    finally:
        store.close()


def test_a_sentinel_failover_mid_load(own_sentinels: redis_ha.SentinelSet) -> None:
    store = RedisStore(own_sentinels.url, prefix=redis_server.unique_prefix())
    try:
        run_load(store, own_sentinels.kill_master)
        assert store.client.connection_pool.get_master_address()[1] == own_sentinels.replica.port
    finally:
        store.close()


def test_the_bouncer_restarted_mid_load() -> None:
    bouncer = pgbouncer.PgBouncer()
    store = SqlStore(bouncer.start().url, table_prefix=postgres.unique_prefix())

    def restart() -> None:
        bouncer.kill()
        bouncer.start()

    try:
        run_load(store, restart)
    finally:
        store.close()
        bouncer.stop()


# -- PgBouncer -------------------------------------------------------------------------------------


def test_nothing_is_prepared_behind_a_transaction_pooling_bouncer(clock: FakeClock) -> None:
    # 8 threads, 4 server connections: each statement may run on another server session.
    store = postgres.pg_store(engine=pgbouncer.engine())
    errors: list[BaseException] = []

    def work(worker: int) -> None:
        try:
            for i in range(30):
                store.store(entry(clock, f"{worker}-{i}"))
                assert store.find("n", f"{worker}-{i}") is not None
                assert len(store.find_many("n", [f"{worker}-{i}", "absent"])) == 1
        except BaseException as exc:  # re-raised below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(w,)) for w in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert errors == []
    assert len(store.find_all("n")) == 240
    store.close()


async def test_async_reads_prepare_nothing_behind_the_bouncer(clock: FakeClock) -> None:
    store = postgres.pg_store(engine=pgbouncer.engine())
    try:
        store.store_many([entry(clock, f"k{i}") for i in range(20)])
        assert store.native_async

        async def reader(worker: int) -> None:
            for i in range(20):
                assert (await store.afind("n", f"k{i}")) is not None
                assert len(await store.afind_many("n", [f"k{i}", f"k{worker}"])) == len({i, worker})

        # 8 concurrent readers on 4 server connections: each statement may meet another one.
        await asyncio.gather(*(reader(w) for w in range(8)))
    finally:
        await store.aclose()
        store.close()


def test_the_pgbouncer_setting() -> None:
    from failover.stores.backends.sql import make_engine

    url = postgres.server().url
    engine = make_engine(url, pgbouncer="transaction")
    try:
        with engine.connect() as conn:
            assert conn.connection.driver_connection.prepare_threshold is None
    finally:
        engine.dispose()
    plain = make_engine(url)
    try:
        with plain.connect() as conn:
            assert conn.connection.driver_connection.prepare_threshold is not None
    finally:
        plain.dispose()
    with pytest.raises(ConfigurationError, match="pgbouncer must be one of"):
        make_engine(url + "?pgbouncer=yes")
    with pytest.raises(ConfigurationError, match="PostgreSQL only"):
        make_engine("sqlite:///x.db?pgbouncer=transaction")


# -- URLs ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("redis+sentinel://127.0.0.1:1", "master_name"),
        ("redis+sentinel://127.0.0.1:x/m", "host:port"),
        ("redis+sentinel://127.0.0.1:1/m?socket_timeout=1", "options are not read"),
        ("redis+cluster://127.0.0.1:1/0", "no database number"),
        ("redis://127.0.0.1:1/3", "no database number"),
    ],
)
def test_bad_scale_out_urls(url: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        RedisStore(url, cluster=url.startswith("redis://"))


def test_a_store_on_a_cluster_out_of_reach_is_made_and_its_calls_answer_live() -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    store = RedisStore(f"redis+cluster://127.0.0.1:{port}", socket_timeout=0.2)
    engine = failover.Failover(store, async_writes=False, metrics=False)

    @failover.failover("unreachable", engine=engine)
    def double(x: int) -> int:
        return 2 * x

    with engine:
        assert double(4) == 8  # its write fails (a store error, logged), the call answers
        with pytest.raises(StoreError, match="RedisStore"):
            store.find("unreachable", "k")


def test_the_engine_opens_cluster_and_sentinel_urls(clock: FakeClock) -> None:
    for url in (redis_ha.cluster().url, redis_ha.sentinels().url):
        # The first operation finds the topology: on a loaded machine it may take longer than
        # the default store_timeout, and this test is about opening the URLs.
        engine = failover.Failover(
            url + "?prefix=" + redis_server.unique_prefix(), clock=clock, store_timeout=10
        )
        with engine:

            @failover.failover("via.url", engine=engine)
            def double(x: int) -> int:
                return 2 * x

            assert double(21) == 42
            assert engine.flush(timeout=10)
            assert [e.payload for e in engine.raw_store.find_all("via.url")] == [42]


def _sockets_to(ports: set[int]) -> int:
    """This process's open TCP connections to ``ports`` on loopback (Linux: /proc)."""
    import os
    from pathlib import Path

    mine = set()
    for fd in Path("/proc/self/fd").iterdir():
        with contextlib.suppress(OSError):
            target = os.readlink(fd)
            if target.startswith("socket:["):
                mine.add(target[8:-1])
    count = 0
    for line in Path("/proc/self/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        remote_port = int(fields[2].rsplit(":", 1)[1], 16)
        if remote_port in ports and fields[3] == "01" and fields[9] in mine:  # ESTABLISHED
            count += 1
    return count


@pytest.mark.skipif(not Path("/proc/self/net/tcp").exists(), reason="reads Linux's /proc")
def test_a_sentinel_store_closed_leaves_no_connection_to_the_sentinels() -> None:
    """Closing a store (or a fleet) on a ``redis+sentinel://`` URL closes the connections its
    client made to the sentinels to find the master, not only those to the master: a service
    that opens and closes engines (tests, reloads) kept one socket per sentinel asked."""
    sentinels = redis_ha.sentinels()
    ports = {s.port for s in sentinels.sentinels}
    before = _sockets_to(ports)
    store = RedisStore(sentinels.url, prefix=redis_server.unique_prefix())
    now = datetime.now(UTC)  # the server's clock decides when a Redis entry expires
    store.store(ReferentialPayload("n", "k", 1, now, now + timedelta(hours=1), True))
    assert store.find("n", "k") is not None
    assert _sockets_to(ports) > before  # the master was asked of a sentinel
    store.close()
    assert _sockets_to(ports) == before
