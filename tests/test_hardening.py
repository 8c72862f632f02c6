"""Defects found in a new user's first hour (issue 10): each test failed before its fix."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

import failover
from failover import ConfigurationError, Failover
from failover.metrics import Metrics

from .conftest import BrokenStore, FakeClock
from .test_metrics import value


class FailingClock(FakeClock):
    """A clock that raises once told to (the success path reads it after the upstream)."""

    broken = False

    def __call__(self) -> datetime:
        if self.broken:
            raise OSError("clock source gone")
        return self.now


class RaisingMetrics(Metrics):
    def stored(self, name: str, ok: bool, seconds: float) -> None:
        raise RuntimeError("metrics backend down")


def _engines(
    kind: str, registry: CollectorRegistry
) -> tuple[Failover, FailingClock, dict[str, Any]]:
    clock = FailingClock()
    settings: dict[str, Any] = {}
    if kind == "clock":
        clock.broken = True
        engine = Failover(clock=clock, metrics=registry)
    elif kind == "key":

        def key(x: int) -> object:
            raise ValueError("bad key function")

        settings["key"] = key
        engine = Failover(clock=clock, metrics=registry)
    elif kind == "store":
        engine = Failover(BrokenStore(), clock=clock, metrics=registry)
    else:
        engine = Failover(clock=clock, metrics=RaisingMetrics())
    return engine, clock, settings


TROUBLE = ["clock", "key", "store", "metrics"]


@pytest.mark.parametrize("kind", TROUBLE)
def test_trouble_after_the_upstream_answered_never_breaks_a_sync_call(
    kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    registry = CollectorRegistry()
    engine, _, settings = _engines(kind, registry)

    @failover.failover(f"live-{kind}", engine=engine, **settings)
    def get(x: int) -> dict[str, int]:
        return {"x": x}

    with caplog.at_level(logging.WARNING, logger="failover"):
        assert get(1) == {"x": 1}
        envelope = get.referential(2)
    assert envelope.payload == {"x": 2}
    assert envelope.up_to_date
    if kind != "metrics":
        assert "storing the live result failed" in caplog.text
        assert value(registry, "failover_writes_total", name=f"live-{kind}", result="failed") == 2
    engine.close()


@pytest.mark.parametrize("kind", TROUBLE)
async def test_trouble_after_the_upstream_answered_never_breaks_an_async_call(
    kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    registry = CollectorRegistry()
    engine, _, settings = _engines(kind, registry)

    @failover.failover(f"alive-{kind}", engine=engine, **settings)
    async def get(x: int) -> dict[str, int]:
        return {"x": x}

    with caplog.at_level(logging.WARNING, logger="failover"):
        assert await get(1) == {"x": 1}
        assert (await get.referential(2)).up_to_date
    if kind != "metrics":
        assert "storing the live result failed" in caplog.text
        assert value(registry, "failover_writes_total", name=f"alive-{kind}", result="failed") == 2
    engine.close()


def test_a_clock_failing_only_after_the_store_still_returns_live() -> None:
    clock = FailingClock()
    eng = Failover(clock=clock, metrics=False)

    @failover.failover("late-clock", engine=eng, store_if=lambda v: False)
    def get(x: int) -> int:
        return x

    clock.broken = True
    assert get(3) == 3
    eng.close()


# -- generators and results the store cannot encode -------------------------------------------


def test_generator_functions_are_refused_at_decoration() -> None:
    with pytest.raises(ConfigurationError, match=r"'gen'.*generator.*return a list"):

        @failover.failover("gen")
        def numbers() -> Iterator[int]:
            yield 1

    with pytest.raises(ConfigurationError, match=r"'agen'.*generator"):

        @failover.failover("agen")
        async def anumbers() -> AsyncIterator[int]:
            yield 1


class Response:
    """Like an HTTP client's response object: no codec can store it."""

    def __init__(self, status: int) -> None:
        self.status = status


def test_a_return_type_the_store_cannot_encode_is_warned_and_named_when_nothing_recovers(
    tmp_path: Any, clock: FakeClock
) -> None:
    eng = Failover(f"sqlite:///{tmp_path}/f.db", clock=clock, metrics=False, async_writes=False)
    with pytest.warns(UserWarning, match=r"'fetch': returns .*Response.*cannot encode"):

        @failover.failover("fetch", engine=eng)
        def fetch(url: str) -> Response:
            if fetch.down:  # type: ignore[attr-defined]
                raise ConnectionError("down")
            return Response(200)

    fetch.down = False  # type: ignore[attr-defined]
    logging.disable(logging.WARNING)  # the failing store is logged on every call
    try:
        assert fetch("/a").status == 200
    finally:
        logging.disable(logging.NOTSET)
    fetch.down = True  # type: ignore[attr-defined]
    with pytest.raises(ConnectionError) as info:
        fetch("/a")
    assert "the store cannot encode" in "".join(info.value.__notes__)
    eng.close()


@dataclass
class Country:
    code: str


def test_storable_return_types_are_not_warned(tmp_path: Any) -> None:
    eng = Failover(f"sqlite:///{tmp_path}/f.db", metrics=False)

    @failover.failover("ok-types", engine=eng)
    def get(code: str) -> list[Country] | dict[str, Any] | None:
        return None

    failover.failover("no-annotation", engine=eng)(lambda code: code)

    eng.close()


@pytest.mark.parametrize("kind", ["clock", "key"])
def test_trouble_never_breaks_a_call_on_a_disabled_engine(kind: str) -> None:
    # A disabled engine passes calls through; its envelope must not be the one thing that can
    # turn an answered call into an exception.
    clock = FailingClock()
    clock.broken = kind == "clock"
    eng = Failover(clock=clock, metrics=False, enabled=False)

    def key(x: int) -> object:
        raise ValueError("bad key function")

    @failover.failover(f"off-{kind}", engine=eng, key=key if kind == "key" else None)
    def get(x: int) -> int:
        return x

    @failover.failover(f"aoff-{kind}", engine=eng, key=key if kind == "key" else None)
    async def aget(x: int) -> int:
        return x

    envelope = get.referential(1)
    assert (envelope.payload, envelope.up_to_date) == (1, True)
    assert asyncio.run(aget.referential(2)).payload == 2
    eng.close()
