"""Reads copied only where they could share: a recovered value the caller mutates never changes
what a later recovery returns, whether the read came from process memory, a write still queued,
or rows decoded anew (which the copying layer hands on without a copy)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

import pytest

import failover
from failover import Failover
from failover.scatter import ListSplitter
from failover.stores import InMemoryStore, TieredStore
from failover.stores.backends.sql import SqlStore
from failover.stores.base import reads_fresh, walk
from failover.stores.layers.async_write import AsyncWriteStore
from failover.stores.layers.copying import CopyingStore

from .conftest import FakeClock, Upstream

# memory; SQLite with writes queued and still pending; queued and written; written in place.
CASES = ["memory", "sqlite-pending", "sqlite-queued", "sqlite-direct"]


def _engine(case: str, clock: FakeClock, tmp_path: Path) -> Failover:
    if case == "memory":
        return Failover(InMemoryStore(), clock=clock, metrics=False)
    store = SqlStore(f"sqlite:///{tmp_path / 'store.db'}")
    return Failover(store, async_writes=case != "sqlite-direct", clock=clock, metrics=False)


@contextmanager
def _writes(case: str, engine: Failover) -> Iterator[None]:
    """Around the calls that store: for ``sqlite-pending`` the queue's worker is held (every
    write to the store is made under its ``io_lock``), so the entries stay queued and the
    recoveries read them from the queue; for ``sqlite-queued`` the queue is flushed first."""
    queues = [s for s in walk(engine.store) if isinstance(s, AsyncWriteStore)]
    held = queues[0]._q.io_lock if case == "sqlite-pending" else nullcontext()
    with held:
        yield
        if case == "sqlite-pending":
            raw = next(s for s in walk(engine.store) if isinstance(s, SqlStore))
            assert raw.find_all("cc") == raw.find_all("many") == []  # nothing written yet
    if case == "sqlite-queued":
        assert engine.flush(10)


def _mutate(value: dict[str, Any]) -> None:
    value["currencies"].append("XXX")
    value["name"] = "changed"
    value["nested"]["list"].clear()


def _country(code: str) -> dict[str, Any]:
    return {"code": code, "name": f"name {code}", "currencies": ["EUR"], "nested": {"list": [1]}}


@pytest.mark.parametrize("case", CASES)
def test_a_mutated_recovery_never_changes_the_next_one(
    case: str, clock: FakeClock, tmp_path: Path
) -> None:
    engine = _engine(case, clock, tmp_path)
    upstream = Upstream()

    @failover.failover("cc", engine=engine)
    def country(code: str) -> Any:
        return upstream(_country(code))

    @failover.failover("many", splitter=ListSplitter("code"), engine=engine)
    def countries(codes: str) -> Any:
        return upstream([_country(c) for c in codes.split(",")])

    try:
        with _writes(case, engine):
            country("FR")
            countries("FR,DE")
            upstream.fail()
            for _ in range(2):  # twice: a mutated recovery, then the one after it
                _mutate(country("FR"))
                for item in countries("FR,DE"):
                    _mutate(item)
            assert country("FR") == _country("FR")
            assert countries("DE,FR") == [_country("DE"), _country("FR")]
    finally:
        engine.close()


@pytest.mark.parametrize("case", CASES)
def test_a_mutated_async_recovery_never_changes_the_next_one(
    case: str, clock: FakeClock, tmp_path: Path
) -> None:
    engine = _engine(case, clock, tmp_path)
    upstream = Upstream()

    @failover.failover("cc", engine=engine)
    async def country(code: str) -> Any:
        return upstream(_country(code))

    @failover.failover("many", splitter=ListSplitter("code"), engine=engine)
    async def countries(codes: str) -> Any:
        return upstream([_country(c) for c in codes.split(",")])

    async def scenario() -> None:
        await country("FR")
        await countries("FR,DE")
        upstream.fail()
        for _ in range(2):
            # Concurrent recoveries of the same entries (one batched read) get their own.
            found = await asyncio.gather(country("FR"), country("FR"), countries("FR,DE"))
            _mutate(found[0])
            _mutate(found[1])
            for item in found[2]:
                _mutate(item)
        assert await country("FR") == _country("FR")
        assert await countries("DE,FR") == [_country("DE"), _country("FR")]

    try:
        with _writes(case, engine):
            asyncio.run(scenario())
    finally:
        engine.close()


def test_only_reads_that_could_share_are_copied(clock: FakeClock, tmp_path: Path) -> None:
    """Over SQLite the copying layer copies writes only (its queue copies what it hands back);
    over process memory, and over a tiered store's near copies, it copies reads too."""
    url = f"sqlite:///{tmp_path / 'store.db'}"
    chains = {
        "queued": Failover(SqlStore(url), async_writes=True, clock=clock, metrics=False),
        "memory": Failover(InMemoryStore(), clock=clock, metrics=False),
        "tiered": Failover(
            TieredStore(InMemoryStore(), SqlStore(url, table_prefix="t_")),
            clock=clock,
            metrics=False,
        ),
    }
    try:
        copying = {
            name: next(s for s in walk(e.store) if isinstance(s, CopyingStore))
            for name, e in chains.items()
        }
        assert reads_fresh(copying["queued"].inner)
        assert not reads_fresh(copying["memory"].inner)
        assert not reads_fresh(copying["tiered"].inner)
        assert all(reads_fresh(c) for c in copying.values())  # what they hand back is fresh
    finally:
        for e in chains.values():
            e.close()
