"""Adversarial edges of the scale-out stores, against the suite's real servers
(tests/redis_ha.py, tests/pgbouncer.py): a Sentinel set's master switched over by the sentinels
(``SENTINEL FAILOVER``) between calls, sync and async; a Redis Cluster slot migrated while
calls store and recover (``ASK`` mid-migration, ``MOVED`` after); many sync and async calls
through a 2-connection transaction-pooling PgBouncer, restarted under them. tests/test_scale_out.py
holds the plain loads with a master killed; not repeated here."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import redis
import sqlalchemy as sa

import failover
from failover import DictSplitter
from failover.keys import make_key
from failover.stores.backends.redis import RedisStore
from failover.stores.backends.redis.topology import LazyCluster
from failover.stores.backends.sql import SqlStore

from . import pgbouncer, postgres, redis_ha, redis_server
from .conftest import FakeClock
from .own_servers import running

# -- Sentinel: a switch-over ----------------------------------------------------------------------


@pytest.fixture
def own_sentinels() -> Iterator[redis_ha.SentinelSet]:
    yield from running(redis_ha.SentinelSet())


def switch_over(sentinels: redis_ha.SentinelSet) -> int:
    """``SENTINEL FAILOVER`` (the replica in sync first): wait until the sentinels name the
    replica and the old master has become its replica; the new master's port."""
    old, new = sentinels.master.port, sentinels.replica.port
    assert (redis_ha._ask(old, "WAIT", "1", "5000") or 0) >= 1  # the replica has every write
    assert redis_ha._ask(sentinels.sentinels[0].port, "SENTINEL", "FAILOVER", "mymaster")
    redis_ha.wait_for(
        lambda: (
            sentinels.master_port() == new
            and redis_ha._replication(new).get("role") == "master"
            and redis_ha._replication(old).get("role") == "slave"
        ),
        "the sentinels to switch the master over",
    )
    return new


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_sentinel_switch_over_between_calls(
    own_sentinels: redis_ha.SentinelSet, clock: FakeClock, mode: str
) -> None:
    store = RedisStore(own_sentinels.url, prefix=redis_server.unique_prefix(), clock=clock)
    engine = failover.Failover(store, async_writes=False, metrics=False, clock=clock)
    down = threading.Event()

    def value(key: str) -> dict[str, str]:
        if down.is_set():
            raise ConnectionError("rates down")
        return {"k": key}

    @failover.failover("rates", engine=engine)
    def rate(key: str) -> dict[str, str]:
        return value(key)

    @failover.failover("arates", engine=engine)
    async def arate(key: str) -> dict[str, str]:
        return value(key)

    name = "rates" if mode == "sync" else "arates"

    def call(keys: list[str]) -> list[dict[str, str]]:
        if mode == "sync":
            return [rate(k) for k in keys]

        async def all_of() -> list[dict[str, str]]:
            return list(await asyncio.gather(*(arate(k) for k in keys)))

        return asyncio.run(all_of())

    before = [f"b{i}" for i in range(10)]
    after = [f"a{i}" for i in range(10)]
    with engine:
        assert call(before) == [{"k": k} for k in before]  # live, stored on the first master
        new = switch_over(own_sentinels)
        # The store's connections are still on the old master (now a read-only replica).
        assert call(after) == [{"k": k} for k in after]  # live: never fails
        on_new = RedisStore(f"redis://127.0.0.1:{new}", prefix=store.prefix)
        try:  # every write, before the switch (replicated) and after, is on the new master
            payloads = [e.payload for e in on_new.find_all(name)]
        finally:
            on_new.close()
        assert sorted(p["k"] for p in payloads) == sorted(before + after)
        down.set()
        # Recovery: the entries written before the switch (replicated) and after.
        assert call(before + after) == [{"k": k} for k in before + after]
        assert len(store.find_all(name)) == len(before + after)
    assert store.client.connection_pool.get_master_address()[1] == new
    store.close()


# -- Cluster: a slot migrated under calls ---------------------------------------------------------


def _node(port: int) -> redis.Redis:
    return redis.Redis(port=port, socket_timeout=5)


def test_a_cluster_slot_migrated_while_calls_store_and_recover(clock: FakeClock) -> None:
    cluster = redis_ha.cluster()
    store = RedisStore(cluster.url, prefix=redis_server.unique_prefix(), clock=clock)
    engine = failover.Failover(store, async_writes=False, metrics=False, clock=clock)
    down = threading.Event()

    @failover.failover("quotes", splitter=DictSplitter(item_key="id"), engine=engine)
    def quotes(*ids: str) -> dict[str, dict[str, object]]:
        if down.is_set():
            raise ConnectionError("quotes down")
        return {i: {"id": i, "px": len(i)} for i in ids}

    @failover.failover("rate", engine=engine)
    def rate(key: str) -> dict[str, str]:
        if down.is_set():
            raise ConnectionError("rate down")
        return {"k": key}

    ids = [f"q{i}" for i in range(200)]
    with engine:
        assert quotes(*ids) == {i: {"id": i, "px": len(i)} for i in ids}
        assert isinstance(store.client, LazyCluster)
        client = store.client.get()
        moved_key = f"{store.prefix}e:quotes:{store.find_all('quotes')[0].key}"
        slot = client.keyslot(moved_key)
        source = client.get_node_from_key(moved_key).port
        target = next(m for m in cluster.masters() if m != source)
        # A key of ``rate`` in the same slot: written while the slot is half-way.
        extra = next(
            f"x{i}"
            for i in range(500_000)
            if client.keyslot(f"{store.prefix}e:rate:{make_key('rate', (f'x{i}',))}") == slot
        )
        src, dst = _node(source), _node(target)
        try:
            src_id, dst_id = (
                src.execute_command("CLUSTER MYID"),
                dst.execute_command("CLUSTER MYID"),
            )
            dst.execute_command("CLUSTER SETSLOT", slot, "IMPORTING", src_id)
            src.execute_command("CLUSTER SETSLOT", slot, "MIGRATING", dst_id)
            keys = src.execute_command("CLUSTER GETKEYSINSLOT", slot, 1000)
            assert moved_key in [k.decode() if isinstance(k, bytes) else k for k in keys]
            src.execute_command("MIGRATE", "127.0.0.1", target, "", 0, 5000, "KEYS", *keys)
            # Half-way: the source answers ASK for every key of the slot.
            assert rate(extra) == {"k": extra}  # written on the target (ASK)
            asking = dst.pipeline(transaction=False)  # one connection: ASKING, then EXISTS
            asking.execute_command("ASKING")
            asking.exists(f"{store.prefix}e:rate:{make_key('rate', (extra,))}")
            assert asking.execute()[1] == 1
            down.set()
            assert quotes(*ids) == {i: {"id": i, "px": len(i)} for i in ids}
            assert rate(extra) == {"k": extra}
            down.clear()
            for node in cluster.masters():  # done: the target owns the slot (MOVED)
                _node(node).execute_command("CLUSTER SETSLOT", slot, "NODE", dst_id)
            redis_ha.wait_for(
                lambda: all(
                    _node(m).execute_command("CLUSTER COUNTKEYSINSLOT", slot) == 0
                    for m in cluster.masters()
                    if m != target
                ),
                "the slot's keys to be on the target only",
            )
            assert quotes(*ids[:20]) == {i: {"id": i, "px": len(i)} for i in ids[:20]}  # writes
            down.set()
            assert quotes(*ids) == {i: {"id": i, "px": len(i)} for i in ids}  # MOVED followed
            assert rate(extra) == {"k": extra}
            assert sorted(e.payload["id"] for e in store.find_all("quotes")) == sorted(ids)
            assert [e.payload for e in store.find_all("rate")] == [{"k": extra}]
            assert store.count("quotes") == 200
        finally:
            src.close()
            dst.close()
    store.close()


# -- PgBouncer: a small pool under mixed sync and async calls ----------------------------------


@pytest.fixture
def small_bouncer() -> Iterator[pgbouncer.PgBouncer]:
    bouncer = pgbouncer.PgBouncer(pool_size=2)
    try:
        yield bouncer.start()
    finally:
        bouncer.stop()


def left_in_a_transaction() -> list[Any]:
    """Server sessions of the test database idle inside a transaction (asked directly)."""
    direct = sa.create_engine(
        postgres.server().url.replace("postgresql://", "postgresql+psycopg://")
    )
    try:
        with direct.connect() as conn:
            return list(
                conn.execute(
                    sa.text(
                        "SELECT pid, state, query FROM pg_stat_activity "
                        "WHERE datname = current_database() AND pid <> pg_backend_pid() "
                        "AND state LIKE 'idle in transaction%'"
                    )
                )
            )
    finally:
        direct.dispose()


def test_mixed_sync_and_async_calls_through_a_two_connection_bouncer_restarted(
    small_bouncer: pgbouncer.PgBouncer, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    store = SqlStore(small_bouncer.url, table_prefix=postgres.unique_prefix())
    engine = failover.Failover(store, async_writes=False, metrics=False, clock=clock)
    down = threading.Event()

    def value(key: str) -> dict[str, str]:
        if down.is_set():
            raise ConnectionError("down")
        return {"k": key}

    @failover.failover("mixed", engine=engine)
    def rate(key: str) -> dict[str, str]:
        return value(key)

    @failover.failover("amixed", engine=engine)
    async def arate(key: str) -> dict[str, str]:
        return value(key)

    errors: list[BaseException] = []

    def round_of(tag: str, n: int) -> None:
        """6 threads and 6 tasks, ``n`` calls each, at once."""

        def sync_worker(w: int) -> None:
            try:
                for i in range(n):
                    key = f"{tag}s{w}-{i}"
                    assert rate(key) == {"k": key}
            except BaseException as exc:  # re-raised on the main thread
                errors.append(exc)

        async def tasks() -> None:
            async def task(w: int) -> None:
                for i in range(n):
                    key = f"{tag}a{w}-{i}"
                    assert await arate(key) == {"k": key}

            await asyncio.gather(*(task(w) for w in range(6)))

        threads = [threading.Thread(target=sync_worker, args=(w,)) for w in range(6)]
        for t in threads:
            t.start()
        try:
            asyncio.run(tasks())
        finally:
            for t in threads:
                t.join(timeout=60)
        assert errors == []

    keys = [f"{t}{k}{w}-{i}" for t in ("r1",) for k in "sa" for w in range(6) for i in range(10)]
    with engine:
        round_of("r1", 10)  # live: 120 entries written through 2 server connections
        down.set()
        round_of("r1", 10)  # recovered, each
        assert len(store.find_all("mixed")) == len(store.find_all("amixed")) == len(keys) // 2
        small_bouncer.kill()  # every pooled connection broken
        small_bouncer.start()
        round_of("r1", 10)  # recovered right after the restart: no call fails
        down.clear()
        round_of("r2", 5)  # live after the restart
        assert len(store.find_all("mixed")) == len(store.find_all("amixed")) == len(keys) // 2 + 30
    assert "prepared statement" not in caplog.text
    assert left_in_a_transaction() == []
    store.close()


def test_a_read_right_after_the_bouncer_restarted_answers_with_several_kept_connections(
    clock: FakeClock,
) -> None:
    from failover.stores.backends.sql.psycopg import spares

    bouncer = pgbouncer.PgBouncer(pool_size=2)
    store = SqlStore(bouncer.start().url, table_prefix=postgres.unique_prefix())
    engine = failover.Failover(store, async_writes=False, metrics=False, clock=clock)
    down = threading.Event()

    @failover.failover("after.restart", engine=engine)
    def rate(key: str) -> dict[str, str]:
        if down.is_set():
            raise ConnectionError("down")
        return {"k": key}

    try:
        with engine:
            assert rate("k") == {"k": "k"}
            kept = spares(store.engine)  # three connections at once, all kept between calls
            taken = [kept.take() for _ in range(3)]
            for fairy in taken:
                kept.give(fairy)
            assert len(kept) == 3
            bouncer.kill()  # every kept connection broken
            bouncer.start()
            down.set()
            assert rate("k") == {"k": "k"}  # recovered: the read goes to a new connection
            assert store.find("after.restart", make_key("after.restart", ("k",))) is not None
    finally:
        store.close()
        bouncer.stop()
