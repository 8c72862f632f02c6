"""Engines publishing their health to the shared store (``Failover(publish_health=...)``): the
rows a real SQLite file, a real PostgreSQL, a real redis-server and a Redis Cluster keep, their
expiry on the engine's fake clock, the layers they pass through, and a publisher that never
touches a call."""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import failover
from failover import Failover
from failover.errors import ConfigurationError
from failover.publish import DEFAULT_EVERY, LIFETIME, HealthPublisher, publish_interval
from failover.stores import InMemoryStore, TieredStore
from failover.stores.base import keeps_health
from failover.stores.health_rows import FailoverSummary, ProcessHealth, decoded

from . import postgres, redis_ha, redis_server
from .conftest import FakeClock, Upstream

Opener = Callable[[], Any]


@pytest.fixture(params=["sqlite", "postgresql", "redis", "redis-cluster"])
def shared(request: pytest.FixtureRequest, tmp_path: Path, clock: FakeClock) -> Iterator[Opener]:
    """Opens a new store on one shared database (what each process of a cluster does): a
    SQLite file, a PostgreSQL table prefix, a Redis key prefix."""
    opened: list[Any] = []
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'shared.db'}"

        def open_sql() -> Any:
            from failover.stores.backends.sql import SqlStore

            opened.append(SqlStore(url))
            return opened[-1]

        yield open_sql
    elif request.param == "postgresql":
        url, prefix = request.getfixturevalue("postgres_url"), postgres.unique_prefix()

        def open_pg() -> Any:
            from failover.stores.backends.sql import SqlStore

            opened.append(SqlStore(url, table_prefix=prefix))
            return opened[-1]

        yield open_pg
    else:
        # A Redis Cluster spreads the rows' keys over its slots and nodes.
        server = redis_ha.cluster() if request.param == "redis-cluster" else redis_server.server()
        prefix = redis_server.unique_prefix()

        def open_redis() -> Any:
            from failover.stores.backends.redis import RedisStore

            opened.append(RedisStore(server.url, prefix=prefix, clock=clock))
            return opened[-1]

        yield open_redis
    for store in opened:
        store.close()


def _engine(store: Any, clock: FakeClock, every: str = "1h") -> Failover:
    """An engine that publishes; its thread's first publish is joined, so that the test alone
    publishes afterwards (the next one is an hour away)."""
    engine = Failover(store=store, clock=clock, metrics=False, publish_health=every)
    assert engine.publisher is not None
    assert engine.publisher.published.wait(10)
    return engine


def test_each_engine_writes_its_row_and_the_rows_expire_on_the_engines_clock(
    shared: Opener, clock: FakeClock, upstream: Upstream
) -> None:
    first, second = _engine(shared(), clock), _engine(shared(), clock)
    try:

        @failover.failover("rates", engine=first, policy="never_throw", ttl="1d")
        def rates(currency: str) -> object:
            return upstream({"currency": currency})

        failover.failover("rates", engine=second, ttl="1d")(lambda currency: currency)

        @failover.failover("countries", engine=first, ttl="1d", fresh_for="1h")
        def countries(code: str) -> object:
            return {"code": code}

        countries("FR")
        countries("FR")  # within fresh_for: answered from the store
        for currency in ("EUR", "USD", "GBP"):
            rates(currency)
        upstream.fail()
        rates("EUR")
        rates("EUR")
        rates("CHF")  # nothing stored
        assert first.publisher is not None
        assert first.publisher.publish()
        assert second.publisher is not None
        assert second.publisher.publish()

        reader = shared()
        rows = {row.process: row for row in reader.health_rows(clock())}
        assert set(rows) == {first.publisher.process, second.publisher.process}
        mine = rows[first.publisher.process]
        assert (mine.hostname, mine.pid) == (socket.gethostname(), os.getpid())
        assert mine.published_at == clock()
        assert mine.started_at == clock()
        assert mine.expire_on == clock() + timedelta(hours=1) * LIFETIME
        assert mine.status == "degraded"
        assert mine.failovers["rates"] == FailoverSummary(
            "degraded", live=3, stale=2, not_recovered=1, last_failure="ConnectionError"
        )
        assert mine.failovers["countries"] == FailoverSummary("up", live=1, fresh=1)
        assert mine.failovers["countries"].calls == 2
        assert rows[second.publisher.process].failovers["rates"].status == "idle"

        # The second engine's process dies (nothing removes its row); the first keeps publishing.
        clock.advance(hours=2)
        assert first.publisher.publish()
        clock.advance(hours=1, seconds=30)
        rows = {row.process: row for row in reader.health_rows(clock())}
        assert set(rows) == {first.publisher.process}
        clock.advance(hours=2)
        assert reader.health_rows(clock()) == []
    finally:
        first.close()
        second.close()


def test_closing_the_engine_removes_its_row(shared: Opener, clock: FakeClock) -> None:
    engine = _engine(shared(), clock)
    other = _engine(shared(), clock)
    reader = shared()
    assert len(reader.health_rows(clock())) == 2
    engine.close()
    assert [row.process for row in reader.health_rows(clock())] == [other.publisher.process]  # type: ignore[union-attr]
    other.close()
    assert reader.health_rows(clock()) == []


def test_the_row_is_published_at_once_then_every_interval(tmp_path: Path, clock: FakeClock) -> None:
    """The thread publishes on start; the next publish waits for the interval (a stop ends
    the wait at once)."""
    from failover.stores.backends.sql import SqlStore

    store = SqlStore(f"sqlite:///{tmp_path / 'f.db'}")
    written: list[ProcessHealth] = []
    published = threading.Event()

    class Counting:
        keeps_health = True

        def publish_health(self, row: ProcessHealth) -> None:
            store.publish_health(row)
            written.append(row)
            published.set()

        def remove_health(self, process: str) -> None:
            store.remove_health(process)

    engine = Failover(store=store, clock=clock, metrics=False)
    publisher = HealthPublisher(Counting(), engine.health, clock, timedelta(hours=1)).start()
    assert published.wait(10)
    assert publisher.stop(10)
    assert len(written) == 1  # an hour to the next one: the stop ended the wait
    assert store.health_rows(clock()) == []
    engine.close()


def test_the_setting_is_checked_naming_the_engine_and_the_setting(tmp_path: Path) -> None:
    assert publish_interval(False) is None
    assert publish_interval(None) is None
    assert publish_interval(True) == DEFAULT_EVERY == timedelta(seconds=15)
    assert publish_interval("30s") == timedelta(seconds=30)
    assert publish_interval(2.5) == timedelta(seconds=2.5)
    for bad in ("often", 0, -5, "0s", [15], float("inf")):
        with pytest.raises(ConfigurationError, match=r"^Failover: publish_health must be"):
            Failover(metrics=False, publish_health=bad)
    with pytest.raises(ConfigurationError, match=r"InMemoryStore.*publish_health needs a shared"):
        Failover(metrics=False, publish_health=True)
    url = f"sqlite:///{tmp_path / 't-{tenant}.db'}"
    with pytest.raises(ConfigurationError, match=r"publish_health needs a shared store"):
        Failover(store=url, metrics=False, publish_health=True)


def test_the_rows_pass_through_the_layers_and_under_the_store_deadline(
    tmp_path: Path, clock: FakeClock
) -> None:
    from failover.stores.backends.sql import SqlStore
    from failover.stores.layers.deadline import DeadlineStore

    far = SqlStore(f"sqlite:///{tmp_path / 'f.db'}")
    tiered = TieredStore(InMemoryStore(), far)
    assert keeps_health(tiered)
    assert not keeps_health(InMemoryStore())
    engine = _engine(tiered, clock)
    assert [r.process for r in far.health_rows(clock())] == [engine.publisher.process]  # type: ignore[union-attr]
    engine.close()

    sql = Failover(store=f"sqlite:///{tmp_path / 'g.db'}", clock=clock, metrics=False)
    layers = []
    layer = sql.store
    while layer is not None:
        layers.append(type(layer).__name__)
        layer = getattr(layer, "inner", None)
    assert layers == ["CopyingStore", "DeadlineStore", "AsyncWriteStore", "SqlStore"]
    assert keeps_health(sql.store)
    deadline = sql.store.inner  # type: ignore[attr-defined]
    assert isinstance(deadline, DeadlineStore)
    sql.close()


def test_a_hung_store_holds_neither_a_call_nor_close_past_the_deadline(
    tmp_path: Path, clock: FakeClock, upstream: Upstream
) -> None:
    """The publish runs on its own thread under the engine's store_timeout: a store that hangs
    while publishing neither delays a business call nor keeps close() waiting for it."""
    from failover.stores.backends.sql import SqlStore

    release = threading.Event()
    entered = threading.Event()

    class Hanging(SqlStore):
        def publish_health(self, row: ProcessHealth) -> None:
            entered.set()
            release.wait(30)

    store = Hanging(f"sqlite:///{tmp_path / 'h.db'}")
    engine = Failover(store=store, clock=clock, metrics=False, publish_health="1h")
    try:
        assert entered.wait(10)  # the first publish hangs, on the publisher's thread

        @failover.failover("rates", engine=engine, ttl="1d")
        def rates(currency: str) -> object:
            return upstream(currency)

        assert rates("EUR") == "EUR"  # answered while the publish hangs
        assert engine.publisher is not None
        assert not engine.publisher.publish()  # the deadline gave up on it: logged, no raise
    finally:
        engine.close(timeout=0.1)  # does not wait for the hung publish
        release.set()


def test_a_failing_publish_is_logged_once_and_retried(
    tmp_path: Path, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    from failover.stores.backends.sql import SqlStore

    class Refusing(SqlStore):
        refuse = True

        def publish_health(self, row: ProcessHealth) -> None:
            if self.refuse:
                raise OSError("disk full")
            super().publish_health(row)

    store = Refusing(f"sqlite:///{tmp_path / 'r.db'}")
    engine = Failover(store=store, clock=clock, metrics=False, publish_health="1h")
    publisher = engine.publisher
    assert publisher is not None
    assert publisher.published.wait(10)
    with caplog.at_level(logging.DEBUG, logger="failover.publish"):
        assert not publisher.publish()
        assert not publisher.publish()
        clock.advance(minutes=1)
        assert not publisher.publish()
        store.refuse = False
        assert publisher.publish()
    levels = [r.levelname for r in caplog.records]
    # The first by the thread, at once; a minute later one with the count; each at debug too.
    assert levels == ["WARNING", "DEBUG", "DEBUG", "WARNING", "DEBUG", "INFO"]
    assert "(2 failures since the last such line" in caplog.records[3].getMessage()
    assert len(store.health_rows(clock())) == 1
    engine.close()


def test_rows_that_are_not_health_rows_are_skipped_and_never_run_code(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    good = ProcessHealth(
        "p1", "h", 1, clock(), clock(), clock() + timedelta(minutes=1), "up", 60, {}
    ).to_json()
    bad = [
        "not json",
        "[]",
        json.dumps({"process": 1}),
        good.replace('"pid":1', '"pid":true'),
        good.replace('"failovers":{}', '"failovers":{"a":{"status":"up","live":-1}}'),
        '{"py/object": "os.system"}',
    ]
    with caplog.at_level(logging.WARNING, logger="failover.stores"):
        rows = decoded("store", [*bad, good], clock())
    # Shown as one unreadable row, never added up; one warning per read.
    assert [r.process for r in rows] == ["unreadable", "p1"]
    assert rows[0].problem is not None
    assert rows[0].problem.startswith("6 health rows cannot")
    assert len(caplog.records) == 1
    assert decoded("store", [good], clock() + timedelta(minutes=1)) == []  # expired


def test_the_store_dashboard_adds_the_rows_up_and_escapes_them(
    tmp_path: Path, clock: FakeClock
) -> None:
    """What a row holds is shown as text: anyone who can write to the store can write a row."""
    from failover.dashboard import make_store_app
    from failover.dashboard.cluster import cluster_of
    from failover.stores.backends.sql import SqlStore

    from .servers import fetch, serve_wsgi

    store = SqlStore(f"sqlite:///{tmp_path / 'd.db'}")
    hostile = "<script>alert(1)</script>"
    with serve_wsgi(make_store_app(store, clock)) as url:
        status, page = fetch(url + "/")
        assert status == 200
        assert "No process publishes its health" in page
        assert json.loads(fetch(url + "/api/failovers")[1])["cluster"]["processes"] == []

        def row(process: str, status: str, **failovers: FailoverSummary) -> ProcessHealth:
            expire_on = clock() + timedelta(minutes=1)
            return ProcessHealth(
                process, hostile, 7, clock(), clock(), expire_on, status, 60, failovers
            )

        store.publish_health(row("p1", "up", **{hostile: FailoverSummary("up", live=5)}))
        store.publish_health(
            row("p2", "down", **{hostile: FailoverSummary("down", not_recovered=5, breaker="open")})
        )
        status, page = fetch(url + "/")
        assert hostile not in page
        assert "&lt;script&gt;" in page
        cluster = json.loads(fetch(url + "/api/failovers")[1])["cluster"]
        assert cluster["status"] == "down"
        assert cluster["failovers"] == [
            {
                "name": hostile,
                "status": "down",
                "processes": 2,
                "statuses": {"down": 1, "up": 1},
                "calls": 10,
                "live": 5,
                "stale": 0,
                "not_recovered": 5,
                "fresh": 0,
                "breakers_open": 1,
                "last_failure": None,
            }
        ]
    assert cluster_of([]).status == "idle"
    assert cluster_of([]).kpis()["stale_percent"] is None
    store.close()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="POSIX only")
def test_a_forked_worker_publishes_its_own_row_and_reads_the_store(
    tmp_path: Path, clock: FakeClock, upstream: Upstream
) -> None:
    """A preforking server's worker: the publisher starts again in the child, with the child's
    pid and a new process id, and the child's store reads run (the parent's deadline workers
    did not come along: the child gets its own)."""
    engine = _engine(f"sqlite:///{tmp_path / 'fork.db'}", clock)

    @failover.failover("rates", engine=engine, policy="never_throw", ttl="1d")
    def rates(currency: str) -> object:
        return upstream({"currency": currency})

    rates("EUR")
    engine.flush(10)
    upstream.fail()
    assert rates("EUR") == {"currency": "EUR"}  # the parent reads under its deadline workers
    publisher = engine.publisher
    assert publisher is not None
    reading, writing = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report through the pipe, never return into pytest
        try:
            recovered = rates("EUR")
            published = publisher.published.wait(10)
            said = json.dumps([recovered, published, publisher.process, publisher.pid])
            os.write(writing, said.encode())
        finally:
            os._exit(0)
    os.close(writing)
    with os.fdopen(reading) as pipe:
        recovered, published, process, child = json.loads(pipe.read())
    os.waitpid(pid, 0)
    try:
        assert recovered == {"currency": "EUR"}
        assert published
        assert child == pid
        assert process != publisher.process
        rows = {row.process: row.pid for row in engine.store.health_rows(clock())}  # type: ignore[attr-defined]
        assert rows == {publisher.process: os.getpid(), process: pid}
    finally:
        engine.close()


@pytest.mark.parametrize("backend", ["sqlite", "redis"])
def test_the_dashboard_command_shows_the_processes_publishing(
    backend: str, tmp_path: Path, upstream: Upstream
) -> None:
    """``failover dashboard --store URL``, the real command in a subprocess, on a store that a
    publishing engine of this process writes to (the command opens it read-only: on SQLite,
    before any process created the health table, it shows no process rather than failing)."""
    import signal

    from .servers import fetch
    from .test_cli import free_port, start_cli

    if backend == "sqlite":
        url = f"sqlite:///{tmp_path / 'shared.db'}"
        failover.Failover(url, metrics=False).close()  # the entries' table only
    else:
        url = f"{redis_server.server().url}?prefix={redis_server.unique_prefix()}"
    port = free_port()
    proc, started = start_cli("dashboard", "--store", url, "--port", str(port))
    try:
        assert f"on http://127.0.0.1:{port}/" in started, started
        api = f"http://127.0.0.1:{port}/api/failovers"
        assert json.loads(fetch(api)[1])["cluster"]["processes"] == []
        engine = Failover(url, metrics=False, publish_health="1h")
        try:

            @failover.failover("rates", engine=engine, policy="never_throw", ttl="1d")
            def rates(currency: str) -> object:
                return upstream(currency)

            rates("EUR")
            assert engine.publisher is not None
            assert engine.publisher.publish()
            cluster = json.loads(fetch(api)[1])["cluster"]
            assert [p["pid"] for p in cluster["processes"]] == [os.getpid()]
            assert cluster["failovers"][0]["name"] == "rates"
            assert cluster["failovers"][0]["live"] == 1
        finally:
            engine.close()
        assert json.loads(fetch(api)[1])["cluster"]["processes"] == []
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert err == ""
