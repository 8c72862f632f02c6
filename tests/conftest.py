"""Fixtures shared by the whole suite: a fake clock and fresh engines."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

import failover
from failover.engine import default as engine_module

from .support_entries import STORES, make_engine

# Hypothesis fails an example that takes longer than 200 ms by default: a wall-clock assertion,
# which a loaded machine (several suites at once) breaks. Examples are bounded by their count.
settings.register_profile("failover", deadline=None)
settings.load_profile("failover")


class FakeClock:
    """A clock that only moves when told to."""

    def __init__(self, start: datetime = datetime(2026, 1, 1, tzinfo=UTC)) -> None:
        self.now = start

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float = 0, **delta: float) -> datetime:
        self.now += timedelta(seconds=seconds, **delta)
        return self.now


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def engine(clock: FakeClock) -> Iterator[failover.Failover]:
    """An in-memory engine on the fake clock, closed at the end."""
    eng = failover.Failover(clock=clock, metrics=False)
    yield eng
    eng.close()


@pytest.fixture(autouse=True)
def _fresh_default_engine() -> Iterator[None]:
    """Each test starts without a default engine and without default registrations."""
    saved_default, saved_pending = engine_module.installed, dict(engine_module._pending)
    engine_module.installed = None
    engine_module._pending.clear()
    yield
    if engine_module.installed is not None:
        engine_module.installed.close()
    engine_module.installed = saved_default
    engine_module._pending.clear()
    engine_module._pending.update(saved_pending)


class Upstream:
    """A controllable upstream: returns values, or raises while ``down`` is set."""

    def __init__(self) -> None:
        self.calls = 0
        self.error: Exception | None = None

    def fail(self, error: Exception | None = None) -> None:
        self.error = error or ConnectionError("upstream down")

    def recover(self) -> None:
        self.error = None

    def __call__(self, value: object) -> object:
        self.calls += 1
        if self.error is not None:
            raise self.error
        return value


class BrokenStore(failover.InMemoryStore):
    """A real store whose disk is gone: every store and find raises ``OSError``."""

    def store(self, payload: Any) -> None:
        raise OSError("disk full")

    def find(self, name: str, key: str) -> Any:
        raise OSError("disk gone")


@pytest.fixture
def upstream() -> Upstream:
    return Upstream()


# -- PostgreSQL (tests/postgres.py) ---------------------------------------------------------------


@pytest.fixture(scope="session", autouse=True)
def _postgres_stopped() -> Iterator[None]:
    """Stops the session's PostgreSQL server at the end, failed tests or not, if one started."""
    from . import postgres

    yield
    postgres.stop()


@pytest.fixture(scope="session", autouse=True)
def _scale_out_stopped() -> Iterator[None]:
    """Stops the session's Redis Cluster, Sentinel set and PgBouncer at the end, if started."""
    from . import pgbouncer, redis_ha

    yield
    redis_ha.stop()
    pgbouncer.stop()


@pytest.fixture(scope="session", autouse=True)
def _redis_stopped() -> Iterator[None]:
    """Stops the session's redis-server at the end, failed tests or not, if one started."""
    from . import redis_server

    yield
    redis_server.stop()


@pytest.fixture(scope="session")
def postgres_url() -> str:
    """The URL of the session's PostgreSQL database (the server starts on first use); skips
    the test when the server binaries are missing."""
    from . import postgres

    return postgres.server().url


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Parametrised items that run on PostgreSQL (e.g. ``store[sql(postgresql)]``) carry the
    ``postgres`` marker too, so ``-m "not postgres"`` leaves out every PostgreSQL test."""
    for item in items:
        if "postgresql" in item.name:
            item.add_marker(pytest.mark.postgres)


@pytest.fixture(params=STORES)
def real(
    request: pytest.FixtureRequest, clock: FakeClock, tmp_path: Path
) -> Iterator[failover.Failover]:
    """An engine on each real store in turn (`tests.support_entries.STORES`), on the fake
    clock, with synchronous writes."""
    engine = make_engine(request.param, clock, tmp_path)
    yield engine
    engine.close()


ROOT = Path(__file__).resolve().parent.parent


def in_a_new_interpreter(script: str) -> list[str]:
    """What ``script`` prints, run by a Python process of its own (nothing imported yet: the
    state a module sets up at first use starts from nothing), split into words."""
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT)},
    )
    return done.stdout.split()
