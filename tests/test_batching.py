"""Batched recoveries (`failover.stores.layers.batching.ReadBatcher`): concurrent recoveries of one
failover answered by one ``find_many``, counted on a real ``redis-server`` (``INFO
commandstats``) and a real SQLite file (SQLAlchemy's statement events); each caller gets its own
entry; the event loop keeps running while the store reads."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

import failover
from failover.stores import SqlStore
from failover.stores.backends.sql import caller_reads
from failover.stores.layers.batching import ReadBatcher

from .own_servers import running
from .redis_server import RedisServer

N = 1_000
# The engines' store deadline: what is tested is the batching, and a loaded host's read or write
# may outlast the default 0.5 s (a read given up is a miss, three in a row take the store out, a
# write given up still runs while statements or commands are counted).
STORE_TIMEOUT = 10.0


class Down(Exception):
    pass


class Flaky:
    """An async upstream that answers, or raises while ``down``."""

    def __init__(self) -> None:
        self.down = False

    async def __call__(self, code: int) -> dict[str, Any]:
        if self.down:
            raise Down(code)
        return {"code": code, "rates": [1.0, 2.0]}


@pytest.fixture(scope="module")
def own_redis() -> Iterator[RedisServer]:
    """A server of this module's own: its command counts are this test's alone."""
    yield from running(RedisServer())


def commands(client: Any) -> dict[str, int]:
    """Calls per command since the last ``CONFIG RESETSTAT``, the counting commands left out."""
    stats = client.info("commandstats")
    counts = {name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()}
    return {c: n for c, n in counts.items() if c not in ("info", "config|resetstat")}


async def test_concurrent_async_recoveries_share_one_mget_and_a_lone_one_is_one_get(
    own_redis: RedisServer,
) -> None:
    engine = failover.Failover(own_redis.url, metrics=False, store_timeout=STORE_TIMEOUT)
    upstream = Flaky()
    rates = failover.failover("batch.rates", engine=engine)(upstream)
    await asyncio.gather(*(rates(i) for i in range(N)))
    assert await asyncio.to_thread(engine.flush, 10)
    client = own_redis.client()
    upstream.down = True
    try:
        await rates(0)  # the loop's async connection is made (its HELLO) before counting
        client.config_resetstat()
        served = await asyncio.gather(*(rates.referential(i) for i in range(N)))
        assert [s.payload["code"] for s in served] == list(range(N))
        assert not any(s.up_to_date for s in served)
        counted = commands(client)
        assert set(counted) == {"mget"}
        assert counted["mget"] <= 3  # one with the default batch bound; "a few" at most
        client.config_resetstat()
        lone = await rates(7)
        assert lone["code"] == 7
        assert commands(client) == {"get": 1}
        # Read on the event loop by redis.asyncio: the loop has a client of its own.
        assert asyncio.get_running_loop() in engine.raw_store._aio._clients
        await engine.aclose()
        assert client.info("clients")["connected_clients"] == 1  # this one: the store's closed
    finally:
        client.close()
        await engine.aclose()


async def test_async_store_methods_read_your_writes_through_the_layers(
    own_redis: RedisServer,
) -> None:
    from failover.payload import envelope
    from failover.stores import AsyncWriteStore, CopyingStore, RedisStore

    raw = RedisStore(own_redis.url, prefix="rw:")
    gate = threading.Event()

    class Held(CopyingStore):
        """A copying layer whose writes wait for ``gate``: they stay queued above it."""

        def store_many(self, payloads: Any) -> None:
            gate.wait(10)
            super().store_many(payloads)

    queued = AsyncWriteStore(Held(raw))
    assert queued.native_async
    now = failover.engine.utcnow()
    later = now + timedelta(hours=1)
    stored = [envelope("n", k, {"k": k}, now, later, True) for k in ("a", "b")]
    await raw.astore_many(stored[:1])
    assert (await raw.afind("n", "a")).payload == {"k": "a"}  # type: ignore[union-attr]
    await queued.astore_many(stored[1:])  # queued: the worker waits for the gate
    assert (await queued.afind("n", "b")).payload == {"k": "b"}  # type: ignore[union-attr]
    found = await queued.afind_many("n", ["a", "b", "c"])
    assert {k: p.payload for k, p in found.items()} == {"a": {"k": "a"}, "b": {"k": "b"}}
    gate.set()
    assert await asyncio.to_thread(queued.flush, 10)
    assert (await raw.afind_many("n", ["b"]))["b"].payload == {"k": "b"}
    await queued.aclose()
    await asyncio.to_thread(queued.close)


async def test_each_caller_gets_its_own_entry(tmp_path: Path) -> None:
    engine = failover.Failover(
        f"sqlite:///{tmp_path / 'f.db'}", metrics=False, store_timeout=STORE_TIMEOUT
    )
    upstream = Flaky()
    rates = failover.failover("batch.same", engine=engine)(upstream)
    await rates(1)
    assert await asyncio.to_thread(engine.flush, 10)
    upstream.down = True
    try:
        served = await asyncio.gather(*(rates(1) for _ in range(20)))
        assert all(s == {"code": 1, "rates": [1.0, 2.0]} for s in served)
        assert len({id(s) for s in served}) == 20
        assert len({id(s["rates"]) for s in served}) == 20  # no mutable part shared either
    finally:
        await asyncio.to_thread(engine.close)


def counting(store: SqlStore, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The SQL statements ``store`` runs from now on: its engine's, and those of its reads on
    callers' threads (`caller_reads`, on connections opened from now on)."""
    statements: list[str] = []
    sa.event.listen(
        store.engine, "before_cursor_execute", lambda *a: statements.append(a[2].split()[0])
    )
    real = caller_reads.connect

    def connect(path: str, timeout: float) -> sqlite3.Connection:
        conn = real(path, timeout)
        conn.set_trace_callback(lambda sql: statements.append(sql.split()[0]))
        return conn

    monkeypatch.setattr(caller_reads, "connect", connect)
    return statements


async def test_sqlite_recoveries_share_one_select(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = SqlStore(f"sqlite:///{tmp_path / 'f.db'}")
    engine = failover.Failover(
        store, metrics=False, async_writes=False, store_timeout=STORE_TIMEOUT
    )
    upstream = Flaky()
    rates = failover.failover("batch.sql", engine=engine)(upstream)
    await asyncio.gather(*(rates(i) for i in range(200)))
    upstream.down = True
    statements = counting(store, monkeypatch)
    try:
        served = await asyncio.gather(*(rates(i) for i in range(200)))
        assert [s["code"] for s in served] == list(range(200))
        assert statements == ["SELECT"]
    finally:
        await asyncio.to_thread(engine.close)


class GatedStore(failover.InMemoryStore):
    """A real in-memory store whose batch reads wait (on the worker thread) for ``gate``."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.opened: bool | None = None
        self.batches = 0

    @property
    def does_io(self) -> bool:
        return True  # as a database would: async callers must not read it on the event loop

    def find_many(self, name: str, keys: Any) -> dict[str, Any]:
        self.batches += 1
        self.opened = self.gate.wait(10)
        return super().find_many(name, keys)


async def test_the_event_loop_keeps_ticking_during_a_thousand_recoveries() -> None:
    store = GatedStore()
    engine = failover.Failover(
        store, metrics=False, async_writes=False, store_timeout=STORE_TIMEOUT
    )
    upstream = Flaky()
    rates = failover.failover("batch.ticks", engine=engine)(upstream)
    await asyncio.gather(*(rates(i) for i in range(N)))
    upstream.down = True
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while ticks < 100:  # the read waits for these ticks: a blocked loop never makes them
            ticks += 1
            await asyncio.sleep(0)
        store.gate.set()

    try:
        recoveries = asyncio.gather(*(rates(i) for i in range(N)))
        await ticker()
        served = await recoveries
        assert [s["code"] for s in served] == list(range(N))
        assert store.opened is True
        assert ticks == 100
        assert store.batches == 1
    finally:
        await asyncio.to_thread(engine.close)


async def test_a_waiter_that_gives_up_leaves_the_others_their_entries() -> None:
    store = GatedStore()
    engine = failover.Failover(
        store, metrics=False, async_writes=False, store_timeout=STORE_TIMEOUT
    )
    upstream = Flaky()
    rates = failover.failover("batch.cancel", engine=engine)(upstream)
    await asyncio.gather(*(rates(i) for i in range(10)))
    upstream.down = True
    try:
        tasks = [asyncio.create_task(rates(i)) for i in range(10)]
        await asyncio.sleep(0)
        tasks[3].cancel()
        store.gate.set()
        done = await asyncio.gather(*tasks, return_exceptions=True)
        assert isinstance(done[3], asyncio.CancelledError)
        assert [d["code"] for i, d in enumerate(done) if i != 3] == [  # type: ignore[index]
            i for i in range(10) if i != 3
        ]
    finally:
        await asyncio.to_thread(engine.close)


def test_threads_get_their_own_entries_and_the_store_error() -> None:
    store = failover.InMemoryStore()
    batcher = ReadBatcher(store, window=0.01, max_batch=8)
    engine = failover.Failover(store, metrics=False)
    fill = failover.failover("batch.threads", engine=engine)(lambda code: {"code": code})
    for i in range(40):
        fill(i)
    name = fill.definition.effective_name
    keys = {i: fill.referential(i).key for i in range(40)}
    got: dict[int, Any] = {}
    start = threading.Barrier(40)

    def read(i: int) -> None:
        start.wait()
        got[i] = batcher.find(name, keys[i])

    threads = [threading.Thread(target=read, args=(i,)) for i in range(40)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert {i: p.payload for i, p in got.items()} == {i: {"code": i} for i in range(40)}
    engine.close()

    class Gone(failover.InMemoryStore):
        def find_many(self, name: str, keys: Any) -> dict[str, Any]:
            raise OSError("disk gone")

    with pytest.raises(OSError, match="disk gone"):
        _two_reads(ReadBatcher(Gone()))


def _two_reads(batcher: ReadBatcher) -> None:
    """Two reads in one batch (the second joins the first's): both meet the store's error."""
    errors: list[BaseException] = []

    async def both() -> None:
        results = await asyncio.gather(
            batcher.afind("n", "a"), batcher.afind("n", "b"), return_exceptions=True
        )
        errors.extend(r for r in results if isinstance(r, BaseException))

    asyncio.run(both())
    assert len(errors) == 2
    raise errors[0]


async def test_postgresql_recoveries_are_read_on_the_loop_by_psycopg(postgres_url: str) -> None:
    from . import postgres

    store = postgres.pg_store()
    assert store.native_async
    engine = failover.Failover(store, metrics=False, store_timeout=STORE_TIMEOUT)
    upstream = Flaky()
    rates = failover.failover("batch.pg", engine=engine)(upstream)
    await asyncio.gather(*(rates(i) for i in range(N)))
    assert await asyncio.to_thread(engine.flush, 10)
    upstream.down = True
    loop = asyncio.get_running_loop()
    try:
        served = await asyncio.gather(*(rates(i) for i in range(N)))
        assert [s["code"] for s in served] == list(range(N))
        assert len(store._aio._idle[loop]) == 1  # one connection of this loop served them all
        assert (await rates(5))["code"] == 5
        assert (await store.afind("nowhere", "k")) is None
        assert await store.afind_many("nowhere", []) == {}
    finally:
        await engine.aclose()
    assert loop not in store._aio._idle


async def test_concurrent_scatter_gather_recoveries_share_one_mget(own_redis: RedisServer) -> None:
    from failover.scatter import DictSplitter

    engine = failover.Failover(own_redis.url, metrics=False, store_timeout=STORE_TIMEOUT)
    down = False

    @failover.failover("batch.fx", splitter=DictSplitter(), engine=engine)
    async def rates(currencies: tuple[str, ...]) -> dict[str, float]:
        if down:
            raise Down("fx")
        return {c: float(len(c)) for c in currencies}

    codes = [f"C{i:03d}" for i in range(60)]
    await rates(tuple(codes))
    assert await asyncio.to_thread(engine.flush, 10)
    down = True
    client = own_redis.client()
    try:
        assert await rates(("C000",)) == {"C000": 4.0}  # the loop's connection made first
        client.config_resetstat()
        calls = [tuple(codes[i : i + 3]) for i in range(0, 60, 3)]  # 20 calls, 3 slices each
        got = await asyncio.gather(*(rates(c) for c in calls))
        assert got == [dict.fromkeys(call, 4.0) for call in calls]
        assert commands(client) == {"mget": 1}
    finally:
        client.close()
        await engine.aclose()


async def test_a_postgresql_read_cancelled_mid_statement_discards_its_connection(
    postgres_url: str,
) -> None:
    from . import postgres

    store = postgres.pg_store()
    loop = asyncio.get_running_loop()
    assert await store.afind("n", "k") is None  # the loop's connection, made and kept idle
    assert len(store._aio._idle[loop]) == 1
    table = store.engine.dialect.identifier_preparer.format_table(store.table)
    with store.engine.connect() as locker:
        locker.exec_driver_sql(f"LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE")  # reads wait
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.2):
                await store.afind_many("n", ["a", "b"])
        assert store._aio._idle[loop] == []  # its state unknown: never reused
        locker.rollback()
    assert await store.afind_many("n", ["a", "b"]) == {}  # a new connection
    await store.aclose()
    await asyncio.to_thread(store.close)


async def test_a_tenants_recoveries_are_batched_on_its_own_store(own_redis: RedisServer) -> None:
    engine = failover.Failover(
        f"{own_redis.url}?prefix=tn:",
        metrics=False,
        tenant_resolver=failover.current_tenant,
        store_timeout=STORE_TIMEOUT,
    )
    upstream = Flaky()
    rates = failover.failover("batch.tenants", engine=engine)(upstream)
    for tenant in ("acme", "globex"):
        with failover.tenant(tenant):
            await asyncio.gather(*(rates(i) for i in range(50)))
    assert await asyncio.to_thread(engine.flush, 10)
    upstream.down = True
    client = own_redis.client()
    try:
        with failover.tenant("acme"):
            await rates(0)  # the loop's async connection made before counting
            client.config_resetstat()
            served = await asyncio.gather(*(rates.referential(i) for i in range(50)))
        assert [s.payload["code"] for s in served] == list(range(50))
        assert commands(client) == {"mget": 1}
        client.config_resetstat()
        with failover.tenant("nobody"):  # a tenant's first read makes its store: on a worker
            assert await asyncio.gather(rates(1), rates(2), return_exceptions=True)
        assert commands(client) == {"mget": 1}
    finally:
        client.close()
        await engine.aclose()


def test_threads_reading_while_one_read_is_in_flight_share_the_next_find_many() -> None:
    class Counted(failover.InMemoryStore):
        """A real in-memory store whose reads wait for ``gate`` and are recorded."""

        def __init__(self) -> None:
            super().__init__()
            self.gate = threading.Event()
            self.inside = threading.Event()
            self.reads: list[list[str]] = []

        def find(self, name: str, key: str) -> Any:
            self.reads.append([key])
            self.inside.set()
            self.gate.wait(10)
            return super().find(name, key)

        def find_many(self, name: str, keys: Any) -> dict[str, Any]:
            self.reads.append(list(keys))
            self.gate.wait(10)
            plain = failover.InMemoryStore.find  # not this class's: one read recorded
            return {k: p for k in keys if (p := plain(self, name, k)) is not None}

    store = Counted()
    # A batch fires when full: with a long window, the count is exact whatever the timing.
    batcher = ReadBatcher(store, window=10, max_batch=19)
    got: dict[int, Any] = {}

    def read(i: int) -> None:
        got[i] = batcher.find("n", f"k{i}")

    first = threading.Thread(target=read, args=(0,))
    first.start()
    store.inside.wait(10)  # a read in flight: the next ones gather
    others = [threading.Thread(target=read, args=(i,)) for i in range(1, 20)]
    for t in others:
        t.start()
    for t in others:
        while t.is_alive() and len(store.reads) < 2:
            t.join(0.01)  # until the second batch, full, has gone to the store
    store.gate.set()
    for t in [first, *others]:
        t.join()
    assert store.reads[0] == ["k0"]  # a lone read: `find`
    assert sorted(store.reads[1]) == sorted(f"k{i}" for i in range(1, 20))
    assert len(store.reads) == 2
    assert got == dict.fromkeys(range(20))
