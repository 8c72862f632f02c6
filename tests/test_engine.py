"""The engine: construction, the default engine, environment configuration, maintenance."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import failover
from failover import CachetoolsStore, ConfigurationError, Failover, InMemoryStore

from .conftest import FakeClock, Upstream


def test_default_engine_is_lazy_and_shared() -> None:
    from failover.engine import default as engine_module

    assert engine_module.installed is None
    first = failover.get_engine()
    assert failover.get_engine() is first
    assert isinstance(first.raw_store, InMemoryStore)


def test_configure_closes_the_previous_engine(clock: FakeClock) -> None:
    first = failover.get_engine()
    second = failover.configure(store="cachetools://?maxsize=5", clock=clock, metrics=False)
    assert first.closed
    assert isinstance(second.raw_store, CachetoolsStore)
    assert second.raw_store.maxsize == 5


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"store": "nosuch://x"}, "nosuch://x"),
        ({"store": "memory://?max_entries=lots"}, "max_entries"),
        ({"store": "memory://?color=red"}, "unknown option 'color'"),
        ({"store": 42}, "store must be a URL or a FailoverStore"),
        ({"policy": "maybe"}, "policy 'maybe' is unknown"),
        ({"clock": "now"}, "clock must be callable"),
        ({"async_writes": "yes"}, "async_writes must be"),
    ],
)
def test_bad_engine_settings(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigurationError, match=match):
        Failover(**kwargs)


def test_from_env() -> None:
    env = {
        "APP_STORE": "cachetools://?maxsize=7",
        "APP_ENABLED": "false",
        "APP_POLICY": "never_throw",
    }
    eng = Failover.from_env("APP_", environ=env)
    assert isinstance(eng.raw_store, CachetoolsStore)
    assert eng.enabled is False
    assert eng.policy is failover.ExceptionPolicy.NEVER_THROW
    with pytest.raises(ConfigurationError, match="APP_ENABLED"):
        Failover.from_env("APP_", environ={"APP_ENABLED": "perhaps"})
    assert Failover.from_env(environ={}, enabled=False).enabled is False


def test_from_env_reads_the_store_settings_as_durations(tmp_path: Path) -> None:
    env = {
        "APP_STORE": f"sqlite:///{tmp_path / 'f.db'}",
        "APP_STORE_TIMEOUT": "250ms",
        "APP_STORE_BREAKER_RESET": "30s",
        "APP_PUBLISH_HEALTH": "false",
    }
    eng = Failover.from_env("APP_", environ=env)
    assert (eng.store_timeout, eng.store_breaker_reset, eng.publisher) == (0.25, 30.0, None)
    eng.close()
    with pytest.raises(ConfigurationError, match="store_timeout"):
        Failover.from_env("APP_", environ={"APP_STORE_TIMEOUT": "soon"})
    with Failover.from_env("APP_", environ={**env, "APP_PUBLISH_HEALTH": "1m"}) as published:
        assert published.publisher is not None


def test_definitions_lists_every_failover(engine: Failover) -> None:
    @failover.failover("b", engine=engine)
    def b() -> None: ...

    @failover.failover("a", engine=engine)
    def a() -> None: ...

    assert [d.name for d in engine.definitions()] == ["a", "b"]


def test_clean_removes_expired_entries(
    engine: Failover, clock: FakeClock, upstream: Upstream
) -> None:
    @failover.failover("short", ttl=10, engine=engine)
    def short(x: int) -> object:
        return upstream(x)

    @failover.failover("long", ttl=100, engine=engine)
    def long(x: int) -> object:
        return upstream(x)

    for i in range(3):
        short(i)
        long(i)
    clock.advance(50)
    assert engine.clean() == 3
    assert engine.clean() == 0
    assert len(engine.raw_store.find_all("long")) == 3


def test_close_is_idempotent_and_a_context_manager(clock: FakeClock) -> None:
    with Failover(clock=clock, metrics=False) as eng:
        pass
    assert eng.closed
    eng.close()


def test_cachetools_store_expires_on_the_engine_clock(clock: FakeClock, upstream: Upstream) -> None:
    eng = Failover("cachetools://", clock=clock, metrics=False)

    @failover.failover("tlru", ttl=10, engine=eng)
    def f(x: int) -> object:
        return upstream(x)

    f(1)
    clock.advance(10)
    assert eng.raw_store.find_all("tlru") == []  # gone without any cleanup


def test_from_env_treats_a_blank_store_as_unset() -> None:
    eng = Failover.from_env("APP_", environ={"APP_STORE": " ", "APP_METRICS": "false"})
    assert isinstance(eng.raw_store, InMemoryStore)
    eng = Failover.from_env("APP_", environ={"APP_STORE": " cachetools:// ", "APP_METRICS": "0"})
    assert isinstance(eng.raw_store, CachetoolsStore)
