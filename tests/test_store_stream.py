"""A store going out and answering again are facts of the engine's stream (``store_state``): its
health, ``failover_store_up``, the logs and the health publisher observe them.

The store is a real SQLite `SqlStore` whose connections are refused while the test says so (a
subclass raising `ConnectionRefusedError` from its reads and its health rows, as a dead server
does); the store breaker, the deadline layer and the publisher's thread are the library's own.
No assertion on time: the publisher publishes every hour, so a publish seen within the hang
guard is the one the store's recovery asked for.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

import failover
from failover import Failover
from failover.stores.backends.sql import SqlStore
from failover.stores.health_rows import ProcessHealth

from .conftest import FakeClock, Upstream

WAIT = 10.0  # hang guard


class Refusing(SqlStore):
    """A SQLite store whose connections are refused while ``out``."""

    out = False

    def _refuse(self) -> None:
        if self.out:
            raise ConnectionRefusedError("connection refused")

    def find(self, name: str, key: str) -> Any:
        self._refuse()
        return super().find(name, key)

    def find_many(self, name: str, keys: Iterable[str]) -> Any:
        self._refuse()
        return super().find_many(name, keys)

    def publish_health(self, row: ProcessHealth) -> None:
        self._refuse()
        super().publish_health(row)


def test_a_store_out_and_back_is_seen_by_health_metrics_logs_and_the_publisher(
    tmp_path: Path, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    registry = CollectorRegistry()
    store = Refusing(f"sqlite:///{tmp_path / 'r.db'}")
    engine = Failover(
        store=store,
        clock=clock,
        metrics=registry,
        publish_health="1h",
        async_writes=False,
        store_breaker_after=1,
    )
    upstream = Upstream()

    @failover.failover("svc.rates", engine=engine)
    def rates(code: int) -> object:
        return upstream(code)

    def up() -> tuple[str, float | None]:
        health = engine.health().stores["refusing"]
        return health.status, registry.get_sample_value("failover_store_up", {"store": "refusing"})

    publisher = engine.publisher
    assert publisher is not None
    try:
        assert publisher.published.wait(WAIT)  # the first publish, at once
        assert rates(1) == 1
        assert up() == ("up", 1)
        upstream.fail()
        store.out = True
        with caplog.at_level(logging.INFO, "failover.health"):
            with pytest.raises(ConnectionError):
                rates(1)  # its read refused: the store is out
            assert up() == ("down", 0)
            assert not publisher.publish()  # the row cannot be written meanwhile
            publisher.published.clear()
            store.out = False
            clock.advance(60)  # past store_breaker_reset: the next read is the trial
            assert rates(1) == 1  # served stale: the store answers again
            assert up() == ("up", 1)
        lines = [
            (r.levelname, r.getMessage())
            for r in caplog.records
            if "store 'refusing'" in r.getMessage()
        ]
        assert [level for level, _ in lines] == ["WARNING", "INFO"]  # one line each way
        assert "store 'refusing' is out" in lines[0][1]
        assert "store 'refusing' answers again" in lines[1][1]
        # Published at once, not an hour later: the row is back.
        assert publisher.published.wait(WAIT)
        assert len(store.health_rows(clock())) == 1
    finally:
        engine.close()


def test_a_tenants_store_opened_later_is_watched_too(tmp_path: Path, clock: FakeClock) -> None:
    stores: dict[str, Refusing] = {}

    def make(tenant: str) -> Refusing:
        stores[tenant] = Refusing(f"sqlite:///{tmp_path / tenant}.db")
        return stores[tenant]

    engine = Failover(
        make,
        tenant_resolver=failover.current_tenant,
        clock=clock,
        metrics=False,
        async_writes=False,
        store_breaker_after=1,
    )
    upstream = Upstream()

    @failover.failover("svc.tenant", engine=engine)
    def rates(code: int) -> object:
        return upstream(code)

    try:
        assert engine.health().stores == {}  # no tenant's store is open yet
        with failover.tenant("acme"):
            assert rates(1) == 1
            upstream.fail()
            stores["acme"].out = True
            with pytest.raises(ConnectionError):
                rates(1)  # the tenant's store is out before the health was ever read
        assert engine.health().stores["refusing"].status == "down"
        stores["acme"].out = False
        clock.advance(60)
        with failover.tenant("acme"):
            assert rates(1) == 1  # the trial answers: served stale
        assert engine.health().stores["refusing"].status == "up"
    finally:
        engine.close()
