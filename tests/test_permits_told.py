"""A `RedisPermits` source tells its Redis going out and answering again on the engine's stream
(`Observer.store_state`, ``store="permits"``), as a store's deadline layer does: health, the
metrics and the logs observe it (one line each way per outage), none polls the source."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry

import failover
from failover.execution.redis_permits import RedisPermits

from . import redis_server
from .execution_support import metric
from .own_servers import running, stopped
from .redis_server import RedisServer


@pytest.fixture
def own_server() -> Iterator[RedisServer]:
    yield from running(RedisServer())


def permits_health(engine: failover.Failover) -> str | None:
    found = engine.health().stores.get("permits")
    return None if found is None else found.status


def said(caplog: pytest.LogCaptureFixture, text: str) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if "'permits'" in r.getMessage() and text in r.getMessage()
    ]


@pytest.mark.parametrize("unavailable", ["refuse", "local"])
def test_a_killed_redis_is_told_out_then_back_after_a_restart(
    own_server: RedisServer, unavailable: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "failover")
    registry = CollectorRegistry()
    engine = failover.Failover(metrics=registry)
    source = RedisPermits(
        own_server.url,
        unavailable=unavailable,
        socket_timeout=0.2,
        prefix=redis_server.unique_prefix(),
    )
    engine.bulkhead_pool("told", permits=2, source=source)

    @failover.failover("told-f", engine=engine, bulkhead="told", policy="never_throw")
    def f() -> str:
        return "live"

    try:
        assert f() == "live"
        assert permits_health(engine) == "up"
        assert metric(registry, "failover_store_up", store="permits") == 1
        own_server.kill()
        for _ in range(3):
            f()  # refused and served from the store, or on in-process permits
        assert permits_health(engine) == "down"
        assert engine.health().status == "degraded"
        assert metric(registry, "failover_store_up", store="permits") == 0
        [line] = said(caplog, "is out")  # once per outage, not per call
        meanwhile = "in-process permits" if unavailable == "local" else "are refused"
        assert meanwhile in line
        assert said(caplog, "answers again") == []
        own_server.start()  # the same port
        assert f() == "live"
        assert permits_health(engine) == "up"
        assert metric(registry, "failover_store_up", store="permits") == 1
        assert len(said(caplog, "answers again")) == 1
        assert len(said(caplog, "is out")) == 1
    finally:
        engine.close()


async def test_a_stopped_redis_is_told_out_then_back_when_it_resumes(
    own_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "failover")
    registry = CollectorRegistry()
    engine = failover.Failover(metrics=registry)
    source = RedisPermits(own_server.url, socket_timeout=0.2, prefix=redis_server.unique_prefix())
    engine.bulkhead_pool("atold", permits=2, source=source)

    @failover.failover("atold-f", engine=engine, bulkhead="atold", policy="never_throw")
    async def f() -> str:
        return "live"

    try:
        assert await f() == "live"
        assert own_server.process is not None
        with stopped([own_server.process.pid]):  # answers nobody, closes nothing
            for _ in range(2):  # refused, served from the store
                assert (await f.referential()).up_to_date is False
            assert permits_health(engine) == "down"
            assert metric(registry, "failover_store_up", store="permits") == 0
        assert len(said(caplog, "is out")) == 1
        assert (await f.referential()).up_to_date  # resumed: answered, and told
        assert permits_health(engine) == "up"
        assert metric(registry, "failover_store_up", store="permits") == 1
        assert len(said(caplog, "answers again")) == 1
    finally:
        engine.close()


def test_a_pool_declared_again_is_watched_once(own_server: RedisServer) -> None:
    engine = failover.Failover(metrics=False)
    source = RedisPermits(own_server.url, socket_timeout=0.2, prefix=redis_server.unique_prefix())
    pool = engine.bulkhead_pool("twice", permits=1, source=source)
    assert engine.bulkhead_pool("twice", permits=1, source=source) is pool
    try:
        assert len(pool.source._watchers) == 1
    finally:
        engine.close()
