"""Failures stay where they happen (issue 28), on real servers started by the suite: a batched
read that fails in part answers every key it could read (a Redis Cluster master out, one
tenant's store out); `RedisPermits` with its Redis stopped leaves no unretrieved future and
logs its trouble once; the probes answer while the store hangs; the store dashboard with its
store out answers 503 with a reason, logged once."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import logging
import threading
import tomllib
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path
from typing import Any

import prometheus_client
import pytest
import redis
from prometheus_client import CollectorRegistry, generate_latest

import failover
from failover.dashboard import make_asgi_app, make_store_app
from failover.engine.clock import utcnow
from failover.execution.redis_permits import RedisPermits
from failover.stores.backends.redis import RedisStore
from failover.stores.backends.redis.cluster_nodes import BACKOFF, UNSENT, ClusterNodes
from failover.stores.backends.sql import SqlStore
from failover.stores.base import Payload
from failover.stores.layers.batching import ReadBatcher
from failover.stores.outages import out

from . import postgres, redis_ha, redis_server
from .conftest import FakeClock
from .own_servers import children, own_postgres, running, stopped
from .redis_server import RedisServer
from .servers import serve_asgi, serve_wsgi

_GUARD = 30.0  # hang guard of a join: a test that needs it has failed


class Down(Exception):
    """The upstream's failure."""


def _quotes(engine: failover.Failover, failing: threading.Event) -> tuple[Any, Any]:
    """A sync and an async failover on ``engine`` answering ``v-<key>``, raising `Down` while
    ``failing`` is set."""

    @failover.failover("quote", engine=engine)
    def quote(key: str) -> str:
        if failing.is_set():
            raise Down(key)
        return f"v-{key}"

    @failover.failover("aquote", engine=engine)
    async def aquote(key: str) -> str:
        if failing.is_set():
            raise Down(key)
        return f"v-{key}"

    return quote, aquote


# -- a Redis Cluster master out --------------------------------------------------------------------


@pytest.fixture
def partial_cluster() -> Iterator[redis_ha.RedisCluster]:
    """3 masters and 3 replicas whose nodes keep serving their slots while others are out
    (``cluster-require-full-coverage no``, as the issue's deployment runs)."""
    cluster = redis_ha.RedisCluster()
    for node in cluster.nodes:
        node.args += ["--cluster-require-full-coverage", "no"]
    yield from running(cluster)


def _out(cluster: redis_ha.RedisCluster) -> int:
    """Kill a master and its replica: its slots stay out (no replica takes over, so the test
    never races a promotion); the port of the master killed."""
    master = cluster.masters()[0]
    for port in [*cluster.replicas_of(master), master]:
        cluster.node(port).kill()
    return master


def _node_of(store: RedisStore, fn: Any, key: str) -> int:
    """The port of the cluster node holding ``fn(key)``'s entry (read before any node is out)."""
    stored = fn.peek(key)
    assert stored is not None
    client: Any = store.client
    entry_key = store._keys.entries(fn.definition.effective_name) + stored.key
    port: int = client.get_node_from_key(entry_key).port
    return port


def _stored_then_out(
    cluster: redis_ha.RedisCluster, store: RedisStore, quote: Any, aquote: Any, keys: list[str]
) -> tuple[dict[str, int], dict[str, int], int]:
    """Each key stored by the sync and the async failover; then one master taken out: the
    node of each key's entry (sync's, async's) and the port of the master out."""
    for key in keys:
        assert quote(key) == f"v-{key}"
        assert asyncio.run(aquote(key)) == f"v-{key}"
    nodes = {k: _node_of(store, quote, k) for k in keys}
    anodes = {k: _node_of(store, aquote, k) for k in keys}
    return nodes, anodes, _out(cluster)


def test_a_dead_cluster_master_fails_only_its_own_keys_under_concurrent_recoveries(
    partial_cluster: redis_ha.RedisCluster, clock: FakeClock
) -> None:
    store = RedisStore(partial_cluster.url, prefix=redis_server.unique_prefix(), clock=clock)
    engine = failover.Failover(store, async_writes=False, metrics=False, clock=clock)
    failing = threading.Event()
    quote, aquote = _quotes(engine, failing)

    keys = [f"k{i}" for i in range(40)]
    try:
        nodes, anodes, master = _stored_then_out(partial_cluster, store, quote, aquote, keys)
        failing.set()

        # Threads: all at once (reads queued behind one in flight share a find_many).
        answers: dict[str, object] = {}
        start = threading.Barrier(len(keys))

        def recover(key: str) -> None:
            start.wait(_GUARD)
            try:
                answers[key] = quote.referential(key).payload
            except Down as exc:
                answers[key] = exc

        threads = [threading.Thread(target=recover, args=(k,)) for k in keys]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(_GUARD)

        # Tasks: one loop turn, one find_many for all of them.
        async def recover_all() -> list[object]:
            async def one(key: str) -> object:
                try:
                    return (await aquote.referential(key)).payload
                except Down as exc:
                    return exc

            return await asyncio.gather(*(one(k) for k in keys))

        task_answers = dict(zip(keys, asyncio.run(recover_all()), strict=True))
    finally:
        engine.close()
        store.close()
    assert 0 < sum(nodes[k] == master for k in keys) < len(keys)
    for key in keys:  # every key on a surviving master recovered; the others missed
        assert (
            answers[key] == f"v-{key}" if nodes[key] != master else isinstance(answers[key], Down)
        )
        got = task_answers[key]
        assert got == f"v-{key}" if anodes[key] != master else isinstance(got, Down)


def test_the_read_batcher_answers_every_caller_whose_key_it_could_read(
    partial_cluster: redis_ha.RedisCluster, clock: FakeClock
) -> None:
    store = RedisStore(partial_cluster.url, prefix=redis_server.unique_prefix(), clock=clock)
    batcher = ReadBatcher(store)
    now = clock()
    keys = [f"k{i}" for i in range(30)]
    store.store_many(
        [failover.ReferentialPayload("n", k, k, now, now + timedelta(hours=1), True) for k in keys]
    )
    client: Any = store.client
    nodes = {k: client.get_node_from_key(store._keys.entries("n") + k).port for k in keys}
    try:
        master = _out(partial_cluster)
        assert 0 < sum(nodes[k] == master for k in keys) < len(keys)
        for key in keys:  # a point read: the out node's keys miss, the others are found
            alone = store.find("n", key)
            assert alone is None if nodes[key] == master else alone is not None, key

        async def read_all() -> list[Payload | BaseException | None]:
            # One loop turn: one find_many for every caller.
            reads = [batcher.afind("n", k) for k in keys]
            return await asyncio.gather(*reads, return_exceptions=True)

        by_task = dict(zip(keys, asyncio.run(read_all()), strict=True))
        by_thread: dict[str, Payload | BaseException | None] = {}
        start = threading.Barrier(len(keys))

        def read(key: str) -> None:
            start.wait(_GUARD)
            try:
                by_thread[key] = batcher.find("n", key)
            except Exception as exc:
                by_thread[key] = exc

        threads = [threading.Thread(target=read, args=(k,)) for k in keys]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(_GUARD)
    finally:
        store.close()
    for key in keys:
        for found in (by_task[key], by_thread[key]):
            if nodes[key] == master:
                assert found is None, key
            else:
                assert isinstance(found, failover.ReferentialPayload), (key, found)
                assert found.payload == key


def _slot_map_reads(cluster: redis_ha.RedisCluster, ports: list[int]) -> int:
    """How many times the nodes on ``ports`` were asked for the slot map (``CLUSTER SLOTS``)."""
    total = 0
    for port in ports:
        stats = redis.Redis(port=port).info("commandstats")
        total += stats.get("cmdstat_cluster|slots", {}).get("calls", 0)
    return total


def test_a_node_out_is_asked_once_per_backoff_and_the_slot_map_read_once(
    partial_cluster: redis_ha.RedisCluster, clock: FakeClock
) -> None:
    # Before, each read with a node out went through redis-py's 10 cluster retries, each
    # reading the slot map again: enough to pass a loaded host's store_timeout.
    store = RedisStore(partial_cluster.url, prefix=redis_server.unique_prefix(), clock=clock)
    now = clock()
    keys = [f"k{i}" for i in range(40)]
    store.store_many(
        [failover.ReferentialPayload("n", k, k, now, now + timedelta(hours=1), True) for k in keys]
    )
    client: Any = store.client
    nodes = {k: client.get_node_from_key(store._keys.entries("n") + k).port for k in keys}
    try:
        master = _out(partial_cluster)
        alive = [n.port for n in partial_cluster.nodes if n.process is not None]
        out_keys = [k for k in keys if nodes[k] == master]
        before = _slot_map_reads(partial_cluster, alive)
        for _ in range(3):
            found = store.find_many("n", keys)
            assert sorted(found) == sorted(k for k in keys if nodes[k] != master)
            assert store.find("n", out_keys[0]) is None
        assert _slot_map_reads(partial_cluster, alive) - before == 1  # when it went out
        clock.advance(seconds=BACKOFF + 1)  # the back-off passed: asked again, refused again
        assert len(store.find_many("n", keys)) == len(keys) - len(out_keys)
        assert _slot_map_reads(partial_cluster, alive) - before == 2
    finally:
        store.close()


def test_a_write_with_a_cluster_node_out_writes_the_others_and_leaves_the_store_up(
    partial_cluster: redis_ha.RedisCluster, clock: FakeClock
) -> None:
    # Before, a write naming a key of the node out failed as the store being out (refused at
    # the connection): the store breaker opened, and every read of every node was skipped.
    store = RedisStore(partial_cluster.url, prefix=redis_server.unique_prefix(), clock=clock)
    engine = failover.Failover(
        store, async_writes=False, metrics=False, clock=clock, store_breaker_after=1
    )
    failing = threading.Event()
    quote, aquote = _quotes(engine, failing)
    keys = [f"k{i}" for i in range(20)]
    try:
        nodes, anodes, master = _stored_then_out(partial_cluster, store, quote, aquote, keys)
        for key in keys:  # live: each stored again, the out node's writes failing
            assert quote(key) == f"v-{key}"
            assert asyncio.run(aquote(key)) == f"v-{key}"
        assert [s.status for s in engine.health().stores.values()] == ["up"]
        failing.set()
        answers: dict[str, object] = {}
        for key in keys:
            try:
                answers[key] = quote.referential(key).payload
            except Down as exc:
                answers[key] = exc
            try:
                answers["a" + key] = asyncio.run(aquote.referential(key)).payload
            except Down as exc:
                answers["a" + key] = exc
    finally:
        engine.close()
        store.close()
    assert 0 < sum(nodes[k] == master for k in keys) < len(keys)
    for key in keys:
        for name, node in ((key, nodes[key]), ("a" + key, anodes[key])):
            got = answers[name]
            assert got == f"v-{key}" if node != master else isinstance(got, Down), (name, got)


def test_commands_that_meet_only_the_node_out_do_not_say_the_cluster_is_out(
    partial_cluster: redis_ha.RedisCluster, clock: FakeClock
) -> None:
    """A batch whose commands all name keys of the master out asks no other node: that proves
    the node out, not the store. Before, such a write (an entry and its index on that node)
    was the store out, and `store_breaker_after` of them skipped every read of every node."""
    store = RedisStore(partial_cluster.url, prefix=redis_server.unique_prefix(), clock=clock)
    try:
        client: Any = store.client
        keys = [f"k{i}" for i in range(50)]
        assert store.find_many("n", keys) == {}  # the slot map read while every node answers
        master = _out(partial_cluster)

        def port(key: str) -> int:
            return int(client.nodes_manager.get_node_from_slot(client.keyslot(key)).port)

        on_it = [k for k in keys if port(k) == master]
        elsewhere = [k for k in keys if port(k) != master]
        assert on_it
        assert elsewhere
        nodes = ClusterNodes(client, clock)
        sent = nodes.send([("GET", k) for k in on_it])
        assert all(reply is UNSENT for reply in sent.replies)
        assert sent.error is not None
        assert sent.answered  # the other masters are not known out
        assert nodes.send([("GET", k) for k in elsewhere]).replies == [None] * len(elsewhere)
        for node in partial_cluster.nodes:  # now every master is out: the cluster is
            node.kill()
        sent = nodes.send([("GET", k) for k in keys])
        assert all(reply is UNSENT for reply in sent.replies)
        assert not sent.answered
    finally:
        store.close()


def test_a_store_write_with_a_cluster_node_out_fails_as_an_error_not_an_outage(
    partial_cluster: redis_ha.RedisCluster, clock: FakeClock
) -> None:
    store = RedisStore(partial_cluster.url, prefix=redis_server.unique_prefix(), clock=clock)
    now = clock()
    keys = [f"k{i}" for i in range(30)]

    def payloads() -> list[Payload]:
        return [
            failover.ReferentialPayload("n", k, k, now, now + timedelta(hours=1), True)
            for k in keys
        ]

    store.store_many(payloads())
    client: Any = store.client
    nodes = {k: client.get_node_from_key(store._keys.entries("n") + k).port for k in keys}
    try:
        master = _out(partial_cluster)
        with pytest.raises(failover.StoreError, match=r"unsent \(their cluster node is out") as e:
            store.store_many(payloads())
        assert not out(e.value)  # the store answers: its breaker does not count it
        found = store.find_many("n", keys)
    finally:
        store.close()
    assert sorted(found) == sorted(k for k in keys if nodes[k] != master)


# -- one tenant's store out ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def pg_server() -> Iterator[Any]:
    yield from own_postgres()  # stopped here: no other test waits on it


def _pids(server: Any) -> list[int]:
    """The PostgreSQL server's processes: the postmaster and its backends."""
    postmaster = int((server.data / "postmaster.pid").read_text().split()[0])
    return [postmaster, *children(postmaster)]


def test_a_tenants_store_out_does_not_fail_another_tenants_reads(
    tmp_path: Path, clock: FakeClock, pg_server: Any
) -> None:
    prefix = postgres.unique_prefix()

    def store_of(tenant: str) -> SqlStore:
        # Tenant a's entries in PostgreSQL (stopped below), tenant b's in a SQLite file.
        if tenant == "a":
            return SqlStore(pg_server.url, table_prefix=prefix)
        return SqlStore(f"sqlite:///{tmp_path}/tenant-{tenant}.db")

    engine = failover.Failover(
        store_of,
        tenant_resolver=failover.current_tenant,
        async_writes=False,
        metrics=False,
        clock=clock,
    )
    failing = threading.Event()
    quote, aquote = _quotes(engine, failing)

    keys = [f"k{i}" for i in range(8)]
    answers: dict[tuple[str, str, str], object] = {}
    try:
        for tenant in ("a", "b"):
            with failover.tenant(tenant):
                for key in keys:
                    assert quote(key) == f"v-{key}"
                    assert asyncio.run(aquote(key)) == f"v-{key}"
        failing.set()
        start = threading.Barrier(2 * len(keys))

        def recover(tenant: str, key: str) -> None:
            start.wait(_GUARD)
            with failover.tenant(tenant):
                try:
                    answers[("thread", tenant, key)] = quote(key)
                except Down as exc:
                    answers[("thread", tenant, key)] = exc

        async def arecover(tenant: str, key: str) -> None:
            with failover.tenant(tenant):
                try:
                    answers[("task", tenant, key)] = await aquote(key)
                except Down as exc:
                    answers[("task", tenant, key)] = exc

        async def tasks() -> None:
            await asyncio.gather(*(arecover(t, k) for t in ("a", "b") for k in keys))

        with stopped(_pids(pg_server)):  # tenant a's store hangs
            threads = [
                threading.Thread(target=recover, args=(t, k)) for t in ("a", "b") for k in keys
            ]
            for thread in threads:
                thread.start()
            asyncio.run(tasks())
            for thread in threads:
                thread.join(_GUARD)
    finally:
        engine.close()
    for way in ("thread", "task"):
        for key in keys:
            assert answers[(way, "b", key)] == f"v-{key}", (way, key)
            assert isinstance(answers[(way, "a", key)], Down), (way, key)


# -- RedisPermits with its Redis stopped -----------------------------------------------------------


@pytest.fixture(scope="module")
def own_redis() -> Iterator[RedisServer]:
    yield from running(RedisServer())  # stopped here: no other test waits on it


class _Lines(logging.Handler):
    """The lines logged, as (logger, level, message): no record kept, so no traceback keeps a
    frame (and the futures it holds) alive past the test's `gc.collect`."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[tuple[str, int, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append((record.name, record.levelno, record.getMessage()))


@pytest.fixture
def lines() -> Iterator[_Lines]:
    handler = _Lines()
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        yield handler
    finally:
        root.removeHandler(handler)


def test_redis_permits_with_redis_stopped_leave_no_unretrieved_future_and_log_once(
    own_redis: RedisServer, lines: _Lines
) -> None:
    registry = CollectorRegistry()
    engine = failover.Failover(metrics=registry)
    source = RedisPermits(own_redis.url, socket_timeout=0.05, prefix=redis_server.unique_prefix())
    engine.bulkhead_pool("exports", permits=4, source=source)

    @failover.failover("export", bulkhead="exports", policy="never_throw", engine=engine)
    async def export(i: int) -> int:
        return i

    unhandled: list[dict[str, Any]] = []
    scraped: list[str] = []

    async def main() -> list[Any]:
        loop = asyncio.get_running_loop()
        # Two workers for the asks: 80 asks of at least one socket timeout each keep some
        # waiting past their task's margin (1 s), which then gives them up.
        loop.set_default_executor(ThreadPoolExecutor(2))
        loop.set_exception_handler(lambda _, context: unhandled.append(context))
        assert await export(-1) == -1  # Redis answers: a permit taken and given back
        assert own_redis.process is not None
        with stopped([own_redis.process.pid]):
            answers = await asyncio.gather(*(export(i) for i in range(80)))
            gc.collect()
            # Scraped while Redis is still stopped: the pool's counts are not asked of it.
            scraped.append(generate_latest(registry).decode())
        return answers

    try:
        answers = asyncio.run(main())
        gc.collect()  # a future left with its exception says so when collected
    finally:
        engine.close()
    assert None in answers  # refused (no permit from a stopped Redis), served by the policy
    assert unhandled == []
    assert not [line for line in lines.lines if line[0] == "asyncio" and line[1] >= logging.ERROR]
    warned = [line for line in lines.lines if "permits" in line[2] and line[1] >= logging.WARNING]
    # The outage, once on the engine's stream (StoreLog), not per call nor per kind of trouble.
    assert [line[0] for line in warned if "is out" in line[2]] == ["failover.health"], warned
    assert not [line for line in warned if line[0] == "failover.execution.redis_permits"]
    [text] = scraped
    assert 'failover_store_up{store="permits"} 0.0' in text
    assert (
        'failover_store_errors_total{operation="acquire",reason="timeout",store="permits"}' in text
    )


# -- probes that cannot hang -----------------------------------------------------------------------


class _Watched(ThreadPoolExecutor):
    """The event loop's default executor (one worker), saying when work was handed to it."""

    def __init__(self) -> None:
        super().__init__(1, "default-executor")
        self.handed = threading.Event()

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Any:
        future = super().submit(fn, *args, **kwargs)
        self.handed.set()
        return future


def _get(url: str) -> tuple[int, str]:
    """GET ``url``, within a hang guard: a probe that does not answer fails the test."""
    request = urllib.request.Request(url)
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        with error:
            return error.code, error.read().decode()


def _call(url: str) -> None:
    """A service call: its answer comes once Redis resumes; only the probes are checked."""
    with contextlib.suppress(OSError):
        _get(url)


def test_probes_answer_while_the_store_hangs_and_a_call_holds_the_loops_worker(
    own_redis: RedisServer, clock: FakeClock
) -> None:
    registry = CollectorRegistry()
    # A client of the user's (no socket timeout, no async twin: async calls read it on the
    # loop's default executor), and no store deadline: the call's read waits on the stopped
    # server for as long as it is stopped.
    client = redis.Redis.from_url(own_redis.url)
    store = RedisStore(client, prefix=redis_server.unique_prefix(), clock=clock)
    engine = failover.Failover(
        store, metrics=registry, clock=clock, store_timeout=None, async_writes=False
    )
    failing = threading.Event()

    @failover.failover("quote", domain="quotes", engine=engine)
    def quote(key: str) -> str:
        if failing.is_set():
            raise Down(key)
        return f"v-{key}"

    @failover.failover("aquote", domain="quotes", engine=engine)  # the same entries
    async def aquote(key: str) -> str:
        raise Down(key)

    executor = _Watched()
    dashboard = make_asgi_app(engine)
    metrics = prometheus_client.make_asgi_app(registry)

    async def service(scope: Any, receive: Any, send: Any) -> None:
        """A service: its calls on ``/call``, the engine's dashboard and probes, ``/metrics``."""
        if scope["type"] == "http" and scope["path"] == "/call":
            asyncio.get_running_loop().set_default_executor(executor)
            with contextlib.suppress(Down):
                await aquote("k")
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b""})
        elif scope["type"] == "http" and scope["path"] == "/metrics":
            await metrics(scope, receive, send)
        else:
            await dashboard(scope, receive, send)

    try:
        assert quote("k") == "v-k"  # Redis answers: an entry stored
        failing.set()
        assert own_redis.process is not None
        with serve_asgi(service) as url, stopped([own_redis.process.pid]):
            caller = threading.Thread(target=_call, args=(url + "/call",), daemon=True)
            caller.start()
            # The call's read is on the loop's one worker thread, waiting on Redis.
            assert executor.handed.wait(_GUARD)
            assert _get(url + "/livez") == (200, "ok")
            status, body = _get(url + "/health")
            assert status == 200
            assert json.loads(body)["failovers"]["aquote"]["status"] == "idle"  # none finished
            status, body = _get(url + "/metrics")
            assert status == 200
            assert "failover_calls_total" in body
        caller.join(_GUARD)
    finally:
        engine.close()
        client.close()
        executor.shutdown(wait=False)


def test_the_store_dashboard_with_its_store_out_answers_503_with_a_reason_logged_once(
    lines: _Lines,
) -> None:
    server = RedisServer().start()
    store = RedisStore(server.url, prefix=redis_server.unique_prefix(), socket_timeout=1)
    try:
        # What `failover dashboard --store URL` serves: the store's app, on a WSGI server.
        with serve_wsgi(make_store_app(store, utcnow)) as url:
            status, body = _get(url + "/api/failovers")
            assert status == 200  # the store answers
            server.kill()  # then it is gone: connections refused
            answers = [_get(url + "/api/failovers") for _ in range(10)]
            pages = [_get(url + "/") for _ in range(5)]
    finally:
        store.close()
        server.stop()
    for status, body in answers:
        assert status == 503
        answer = json.loads(body)
        assert answer["error"] == "store unavailable"
        assert "Connection refused" in answer["reason"]
    for status, page in pages:
        assert status == 503
        assert 'role="alert"' in page
        assert "The store cannot be read just now" in page
    logged = [line for line in lines.lines if line[0] == "failover.dashboard.app"]
    warned = [line for line in logged if line[1] >= logging.WARNING]
    assert len(warned) == 1, warned  # once, not once per request
    assert "the store cannot be read" in warned[0][2]


def test_the_install_line_lists_every_extra() -> None:
    root = Path(__file__).parent.parent
    extras = tomllib.loads((root / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    page = (root / "docs" / "index.md").read_text()
    missing = [
        extra
        for extra in extras
        if f"failover[{extra}]" not in page and f'".[{extra}]"' not in page
    ]
    assert missing == []
