"""Stale scatter/gather answers keep the live answer's shape and say when they are partial: a key
asked twice is answered twice (`ListSplitter`; a `DictSplitter` answer is a dict, as live), and a
recovery that found only some slices is marked `partial` on its envelope, counted in
``failover_recoveries_partial_total``, set on the OpenTelemetry recover span and sent as
``X-Failover-Partial: 1`` by `StaleHeaders`. Sync and async, in memory and on a SQLite file, on a
fake clock; a real FastAPI app, a real `CollectorRegistry`, the real OpenTelemetry SDK."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry, generate_latest

import failover
from failover import DictSplitter, Failover, ListSplitter
from failover.asgi import StaleHeaders
from failover.otel import OpenTelemetry

from .conftest import FakeClock


@pytest.fixture(params=["memory", "sqlite"])
def eng(request: pytest.FixtureRequest, clock: FakeClock, tmp_path: Path) -> Iterator[Failover]:
    store = "memory://" if request.param == "memory" else f"sqlite:///{tmp_path / 'shape.db'}"
    e = Failover(store, clock=clock, metrics=False)
    yield e
    e.close()


class Items:
    """``[{"id": i}]`` for the ids asked, in the order and as often as asked; raises while
    ``down``."""

    def __init__(self) -> None:
        self.down = False

    def __call__(self, ids: list[str]) -> list[dict[str, str]]:
        if self.down:
            raise ConnectionError("upstream down")
        return [{"id": i} for i in ids]


def test_a_stale_list_has_the_live_shape_repeats_included(eng: Failover) -> None:
    up = Items()

    @failover.failover("items", splitter=ListSplitter("id"), engine=eng)
    def items(ids: list[str]) -> list[dict[str, str]]:
        return up(ids)

    @failover.failover("aitems", splitter=ListSplitter("id"), engine=eng)
    async def aitems(ids: list[str]) -> list[dict[str, str]]:
        return up(ids)

    asked = ["i1", "i1", "i2", "i1"]
    live, alive = items(asked), asyncio.run(aitems(asked))
    eng.flush(5)
    up.down = True
    stale = items.referential(asked)
    astale = asyncio.run(aitems.referential(asked))
    assert stale.payload == live == [{"id": "i1"}, {"id": "i1"}, {"id": "i2"}, {"id": "i1"}]
    assert astale.payload == alive == live
    assert not stale.up_to_date
    assert not stale.partial
    assert not astale.partial


def test_a_stale_dict_has_the_live_shape(eng: Failover) -> None:
    down: list[bool] = []

    @failover.failover("prices", splitter=DictSplitter(), engine=eng)
    def prices(skus: list[str]) -> dict[str, int]:
        if down:
            raise ConnectionError("down")
        return {s: len(s) for s in skus}

    asked = ["bb", "a", "bb"]
    live = prices(asked)
    eng.flush(5)
    down.append(True)
    stale = prices.referential(asked)
    assert stale.payload == live == {"bb": 2, "a": 1}
    assert list(stale.payload) == list(live)  # the same order


def test_partial_is_on_the_envelope_of_a_partial_recovery_only(eng: Failover) -> None:
    up = Items()

    @failover.failover("part", splitter=ListSplitter("id"), engine=eng)
    def items(ids: list[str]) -> list[dict[str, str]]:
        return up(ids)

    @failover.failover("apart", splitter=ListSplitter("id"), engine=eng)
    async def aitems(ids: list[str]) -> list[dict[str, str]]:
        return up(ids)

    assert items.referential(["i1", "i2"]).partial is False  # live
    asyncio.run(aitems(["i1", "i2"]))
    eng.flush(5)
    up.down = True
    whole = items.referential(["i2", "i1"])
    assert not whole.up_to_date
    assert whole.partial is False
    some = items.referential(["i1", "i2", "nope"])
    assert some.partial is True
    assert some.payload == [{"id": "i1"}, {"id": "i2"}]
    assert "partial=True" in repr(some)
    assert "partial" not in repr(whole)
    asome = asyncio.run(aitems.referential(["nope", "i2"]))
    assert asome.partial is True
    assert asome.payload == [{"id": "i2"}]
    assert asyncio.run(aitems.referential(["i2"])).partial is False


def _partial_count(registry: CollectorRegistry, name: str) -> float:
    for line in generate_latest(registry).decode().splitlines():
        if line.startswith(f'failover_recoveries_partial_total{{name="{name}"}}'):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_the_partial_counter_and_the_otel_span_agree_with_the_envelope(
    clock: FakeClock,
) -> None:
    registry = CollectorRegistry()
    spans = InMemorySpanExporter()
    tracer = TracerProvider()
    tracer.add_span_processor(SimpleSpanProcessor(spans))
    otel = OpenTelemetry(tracer, MeterProvider(metric_readers=[InMemoryMetricReader()]))
    up = Items()
    with Failover(clock=clock, metrics=registry, opentelemetry=otel) as eng:

        @failover.failover("counted", splitter=ListSplitter("id"), engine=eng)
        def items(ids: list[str]) -> list[dict[str, str]]:
            return up(ids)

        items(["i1", "i2"])
        up.down = True
        assert not items.referential(["i1", "i2"]).partial
        assert _partial_count(registry, "counted") == 0
        assert items.referential(["i1", "gone"]).partial
        assert items.referential(["gone", "i2", "i2"]).partial
        assert _partial_count(registry, "counted") == 2
    reads = [s for s in spans.get_finished_spans() if s.name == "failover.recover"]
    assert [(s.attributes or {}).get("failover.partial", False) for s in reads] == [
        False,
        True,
        True,
    ]


def test_stale_headers_say_partial_on_a_partial_answer_only(clock: FakeClock) -> None:
    up = Items()
    with Failover(clock=clock, metrics=False) as eng:

        @failover.failover("catalogue", splitter=ListSplitter("id"), engine=eng)
        def items(ids: list[str]) -> list[dict[str, str]]:
            return up(ids)

        @failover.failover("acatalogue", splitter=ListSplitter("id"), engine=eng)
        async def aitems(ids: list[str]) -> list[dict[str, str]]:
            return up(ids)

        app = FastAPI()
        app.add_middleware(StaleHeaders)

        @app.get("/items")
        def get_items(ids: str) -> list[dict[str, str]]:  # Starlette's threadpool
            return items(ids.split(","))

        @app.get("/aitems")
        async def get_aitems(ids: str) -> list[dict[str, str]]:
            return await aitems(ids.split(","))

        with TestClient(app) as client:
            for path in ("/items", "/aitems"):
                assert "x-failover-partial" not in client.get(f"{path}?ids=i1,i2").headers
                up.down = True
                whole = client.get(f"{path}?ids=i1,i2")
                assert whole.headers["x-failover-stale"]
                assert "x-failover-partial" not in whole.headers
                some = client.get(f"{path}?ids=i1,i2,nope")
                assert some.status_code == 200
                assert some.json() == [{"id": "i1"}, {"id": "i2"}]
                assert some.headers["x-failover-partial"] == "1"
                up.down = False


def test_the_partial_header_can_be_renamed_or_left_out(clock: FakeClock) -> None:
    with pytest.raises(failover.ConfigurationError, match="partial 'bad header'"):
        StaleHeaders(FastAPI(), partial="bad header")
    up = Items()
    with Failover(clock=clock, metrics=False) as eng:

        @failover.failover("named", splitter=ListSplitter("id"), engine=eng)
        def items(ids: list[str]) -> list[dict[str, str]]:
            return up(ids)

        def app(**options: Any) -> FastAPI:
            made = FastAPI()
            made.add_middleware(StaleHeaders, **options)
            made.get("/items")(lambda: items(["i1", "nope"]))
            return made

        items(["i1"])
        up.down = True
        with TestClient(app(partial="X-Partial")) as client:
            assert client.get("/items").headers["x-partial"] == "1"
        with TestClient(app(partial=None)) as client:
            headers = client.get("/items").headers
            assert "x-failover-partial" not in headers
            assert headers["x-failover-stale"]
