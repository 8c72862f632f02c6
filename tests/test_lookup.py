"""Recovery reads (failover/handlers/lookup.py): a layer says what to read and makes the answer
of it; the shell reads, in place (a thread) or off the event loop (a task). The same outcome
either way, on a real SQLite file: expired entries and slices are dropped (after an async read,
on a worker thread, before the caller gets its answer), fresh ones are served, and a call whose
key cannot be had is a recover error."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import failover
from failover import Failover
from failover.call import call_of
from failover.handlers import key_of
from failover.handlers.base import slice_key
from failover.scatter import ListSplitter

from .conftest import FakeClock

KINDS = ["sync", "async"]


@dataclass(frozen=True)
class Country:
    code: str
    name: str


class Upstream:
    """Answers countries by code until it is down."""

    def __init__(self) -> None:
        self.down = False

    def __call__(self, codes: list[str]) -> list[Country]:
        if self.down:
            raise ConnectionError("catalogue down")
        return [Country(c, c.lower()) for c in codes]


@pytest.fixture
def engine(tmp_path: Path, clock: FakeClock) -> Iterator[Failover]:
    eng = Failover(f"sqlite:///{tmp_path}/f.db", clock=clock, metrics=False, async_writes=False)
    yield eng
    eng.close()


def call(kind: str, fn: Any, *args: Any) -> Any:
    """``fn(*args)``: called, or (``async``) awaited on a loop of its own."""
    return fn(*args) if kind == "sync" else asyncio.run(fn(*args))


def decorate(kind: str, engine: Failover, upstream: Upstream, **options: Any) -> Any:
    if kind == "sync":

        def countries(codes: list[str]) -> list[Country]:
            return upstream(codes)

        return failover.failover(f"lookup.{kind}", engine=engine, **options)(countries)

    async def acountries(codes: list[str]) -> list[Country]:
        return upstream(codes)

    return failover.failover(f"lookup.{kind}", engine=engine, **options)(acountries)


@pytest.mark.parametrize("kind", KINDS)
def test_an_expired_entry_is_not_served_and_is_dropped(
    kind: str, engine: Failover, clock: FakeClock
) -> None:
    upstream = Upstream()
    countries = decorate(kind, engine, upstream, ttl="1h")
    call(kind, countries, ["FR"])
    clock.advance(hours=2)
    upstream.down = True
    with pytest.raises(ConnectionError) as raised:
        call(kind, countries, ["FR"])
    assert "the stored entry had expired" in raised.value.__notes__[-1]
    assert countries.peek(["FR"]) is None
    assert engine.store.find(f"lookup.{kind}", _key(countries, ["FR"])) is None  # dropped


@pytest.mark.parametrize("kind", KINDS)
def test_a_stored_entry_is_served_stale_with_its_time(
    kind: str, engine: Failover, clock: FakeClock
) -> None:
    upstream = Upstream()
    countries = decorate(kind, engine, upstream)
    t0 = clock()
    call(kind, countries, ["FR"])
    clock.advance(60)
    upstream.down = True
    env = call(kind, countries.referential, ["FR"])
    assert env.payload == [Country("FR", "fr")]
    assert (env.up_to_date, env.as_of) == (False, t0)
    assert isinstance(env.cause, ConnectionError)
    peeked = countries.peek(["FR"])
    assert peeked is not None
    assert (peeked.up_to_date, peeked.as_of) == (False, t0)


@pytest.mark.parametrize("kind", KINDS)
def test_expired_slices_are_dropped_and_the_others_merged(
    kind: str, engine: Failover, clock: FakeClock
) -> None:
    upstream = Upstream()
    countries = decorate(kind, engine, upstream, ttl="1h", splitter=ListSplitter("code"))
    call(kind, countries, ["FR"])
    clock.advance(minutes=50)
    call(kind, countries, ["DE"])
    clock.advance(minutes=20)  # FR is 70 minutes old: expired; DE 20 minutes: not
    upstream.down = True
    assert call(kind, countries, ["FR", "DE"]) == [Country("DE", "de")]
    name = f"lookup.{kind}"
    assert sorted(p.key for p in engine.store.find_all(name)) == [_slice(countries, "DE")]


@pytest.mark.parametrize("kind", KINDS)
def test_a_failing_key_function_is_a_recover_error(kind: str, engine: Failover) -> None:
    upstream = Upstream()

    def key(codes: list[str]) -> str:
        if upstream.down:
            raise ValueError("no key today")
        return ",".join(codes)

    countries = decorate(kind, engine, upstream, key=key)
    call(kind, countries, ["FR"])
    upstream.down = True
    with pytest.raises(ConnectionError) as raised:
        call(kind, countries, ["FR"])
    assert "the store failed while recovering" in raised.value.__notes__[-1]


def _key(fn: Any, *args: Any) -> str:
    """The stored key of ``fn(*args)``."""
    return key_of(call_of(fn._failover_state.runtime(), args, {}))


def _slice(fn: Any, code: str) -> str:
    """The stored key of one slice of ``fn``'s calls."""
    return slice_key(fn.definition, {"codes": code})
