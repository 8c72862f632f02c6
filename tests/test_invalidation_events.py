"""The control over entries is a fact of the engine's stream (`Observer.invalidated`): each
``.invalidate()``, ``.invalidate_all()``, ``.expire()`` and ``engine.invalidate_tag()`` is
counted once in ``failover_invalidations_total{name,kind}`` (read back from a real
``CollectorRegistry``'s text output) and logged once (a clear and a tag at info, with what they
removed), both observers of that one fact. Sync and async failovers, on a real SQLite file."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

import failover
from failover import ConfigurationError, Failover, InMemoryStore
from failover.metrics import PrometheusMetrics

from .conftest import FakeClock

FAMILY = "failover_invalidations"


def invalidations(registry: CollectorRegistry) -> dict[tuple[str, str], float]:
    """``(name, kind) -> count`` of ``failover_invalidations_total``, from the text output."""
    text = generate_latest(registry).decode()
    return {
        (s.labels["name"], s.labels["kind"]): s.value
        for family in text_string_to_metric_families(text)
        if family.name == FAMILY
        for s in family.samples
        if s.name == f"{FAMILY}_total"
    }


def lines(caplog: pytest.LogCaptureFixture) -> list[tuple[int, str]]:
    return [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "failover"]


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


@pytest.fixture
def engine(tmp_path: Path, clock: FakeClock, registry: CollectorRegistry) -> Iterator[Failover]:
    eng = Failover(f"sqlite:///{tmp_path / 'f.db'}", clock=clock, metrics=registry)
    yield eng
    eng.close()


def test_each_operation_is_counted_and_logged_once(
    engine: Failover, registry: CollectorRegistry, caplog: pytest.LogCaptureFixture
) -> None:
    @failover.failover("svc.inv", engine=engine, tags=lambda x: [f"x:{x}"])
    def get(x: int) -> int:
        return x

    for x in (1, 2, 3):
        assert get(x) == x
    assert engine.flush(10)
    assert invalidations(registry) == {}
    with caplog.at_level(logging.DEBUG, "failover"):
        get.invalidate(1)
        assert get.expire(2)
        assert engine.invalidate_tag("x:3") == 1
        assert get.invalidate_all() == 1  # the expired entry, kept for failing over
    assert invalidations(registry) == {
        ("svc.inv", "invalidate"): 1,
        ("svc.inv", "expire"): 1,
        ("", "tag"): 1,  # of every failover: no name, and the tag is no label
        ("svc.inv", "invalidate_all"): 1,
    }
    assert lines(caplog) == [
        (logging.DEBUG, "failover 'svc.inv': an entry invalidated"),
        (logging.DEBUG, "failover 'svc.inv': expire found 1 entries"),
        (logging.INFO, "failover: invalidate_tag('x:3') removed 1 entries"),
        (logging.INFO, "failover 'svc.inv': invalidate_all removed 1 entries"),
    ]


def test_an_async_failover_is_counted_under_its_effective_name(
    engine: Failover, registry: CollectorRegistry
) -> None:
    @failover.failover("svc.ainv", domain="prices", engine=engine)
    async def aget(x: int) -> int:
        return x

    async def calls() -> None:
        try:
            assert await aget(1) == 1
            aget.invalidate(1)  # synchronous, as every control method of an async failover
            aget.expire(1)
            aget.invalidate_all()
        finally:
            await engine.aclose()

    asyncio.run(calls())
    assert invalidations(registry) == {
        ("prices", "invalidate"): 1,  # the name its entries are stored under
        ("prices", "expire"): 1,
        ("prices", "invalidate_all"): 1,
    }


def test_engines_on_one_registry_add_up_and_a_refused_operation_is_not_counted(
    tmp_path: Path, clock: FakeClock, registry: CollectorRegistry
) -> None:
    inner = InMemoryStore()

    class Tagless:  # a store of your own that keeps no tags: the protocol's methods only
        does_io = False
        store, store_many, find = inner.store, inner.store_many, inner.find
        find_many, find_all, delete = inner.find_many, inner.find_all, inner.delete
        clean_by_expiry, close = inner.clean_by_expiry, inner.close

    first = Failover(clock=clock, metrics=registry)
    second = Failover(Tagless(), clock=clock, metrics=registry)  # type: ignore[arg-type]
    try:

        @failover.failover("svc.a", engine=first)
        def a() -> int:
            return 1

        @failover.failover("svc.b", engine=second)
        def b() -> int:
            return 2

        a(), b()
        a.invalidate_all()
        b.invalidate_all()
        first.invalidate_tag("t")
        with pytest.raises(ConfigurationError):
            second.invalidate_tag("t")
        assert invalidations(registry) == {
            ("svc.a", "invalidate_all"): 1,
            ("svc.b", "invalidate_all"): 1,
            ("", "tag"): 1,
        }
    finally:
        first.close()
        second.close()


def test_no_metrics_no_family_and_the_log_still_tells(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    engine = Failover(clock=clock, metrics=False)
    try:

        @failover.failover("svc.quiet", engine=engine)
        def get() -> int:
            return 1

        get()
        with caplog.at_level(logging.INFO, "failover"):
            get.invalidate_all()
        assert lines(caplog) == [
            (logging.INFO, "failover 'svc.quiet': invalidate_all removed 1 entries")
        ]
    finally:
        engine.close()


def test_names_past_max_names_fold_and_a_tag_is_never_a_label(
    clock: FakeClock, registry: CollectorRegistry
) -> None:
    engine = Failover(clock=clock, metrics=PrometheusMetrics(registry, max_names=1))
    try:

        @failover.failover("svc.first", engine=engine, tags=lambda: ["secret-customer-42"])
        def first() -> int:
            return 1

        @failover.failover("svc.second", engine=engine)
        def second() -> int:
            return 2

        first(), second()
        first.invalidate_all()
        second.invalidate_all()
        engine.invalidate_tag("secret-customer-42")
        assert invalidations(registry) == {
            ("svc.first", "invalidate_all"): 1,
            ("__other__", "invalidate_all"): 1,
            ("__other__", "tag"): 1,
        }
        assert "secret-customer-42" not in generate_latest(registry).decode()
    finally:
        engine.close()
