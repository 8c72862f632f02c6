"""Scatter / gather: collection results stored and recovered per entity, through every store,
and shared with single-entity failovers through a domain."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from prometheus_client import CollectorRegistry

import failover
from failover import ConfigurationError, Failover, Referential, SplitterError
from failover.scatter import (
    DictSplitter,
    ListSplitter,
    PayloadSplitter,
    StoreContext,
)
from failover.stores import InMemoryStore
from failover.stores.backends.sql import SqlStore, make_engine

from . import postgres, redis_server
from .conftest import FakeClock
from .test_async_write import WAIT, GatedStore
from .test_metrics import value


@dataclass(frozen=True)
class Country:
    code: str
    name: str


NAMES = {"FR": "France", "DE": "Germany", "US": "United States", "IT": "Italy", "ES": "Spain"}


class Catalogue:
    """The upstream: answers with the countries asked for, or raises while ``down``."""

    def __init__(self) -> None:
        self.down = False
        self.calls = 0

    def __call__(self, codes: list[str]) -> list[Country]:
        self.calls += 1
        if self.down:
            raise ConnectionError("catalogue down")
        return [Country(c, NAMES.get(c, c)) for c in codes]


@pytest.fixture
def catalogue() -> Catalogue:
    return Catalogue()


def split(codes: str) -> list[str]:
    return codes.split(",")


# -- every store --------------------------------------------------------------------------------


# The store deadline of the engines on stores that do I/O: scatter/gather is tested, and a loaded
# host's read or write of many slices past the default 0.5 s would be a miss or given up.
STORE_TIMEOUT = 10.0


def _engine(kind: str, clock: FakeClock, tmp: Path) -> Failover:
    if kind == "memory":
        return Failover(clock=clock, metrics=False)
    if kind == "cachetools":
        return Failover("cachetools://", clock=clock, metrics=False)
    io: dict[str, Any] = {"clock": clock, "metrics": False, "store_timeout": STORE_TIMEOUT}
    if kind == "sqlite":  # async writes on: reads see slices still queued
        return Failover(f"sqlite:///{tmp / 'f.db'}", **io)
    if kind == "sqlite, sync writes":
        return Failover(f"sqlite:///{tmp / 'f.db'}", async_writes=False, **io)
    if kind == "postgresql":
        return Failover(postgres.pg_store(), **io)
    if kind in ("redis", "tiered(redis)"):  # skipped where redis-server is missing
        url = f"{redis_server.server().url}?prefix={redis_server.unique_prefix()}"
        url = url if kind == "redis" else f"tiered+{url}"
        return Failover(url, **io)
    assert kind == "tenants(sqlite)"
    return Failover(f"sqlite:///{tmp}/t_{{tenant}}.db", tenant_resolver=lambda: "acme", **io)


KINDS = [
    "memory",
    "cachetools",
    "sqlite",
    "sqlite, sync writes",
    pytest.param("postgresql", marks=pytest.mark.postgres),
    "tenants(sqlite)",
    "redis",
    "tiered(redis)",
]


@pytest.fixture(params=KINDS)
def any_engine(
    request: pytest.FixtureRequest, clock: FakeClock, tmp_path: Path
) -> Iterator[Failover]:
    eng = _engine(request.param, clock, tmp_path)
    yield eng
    eng.close()


@pytest.fixture(
    params=["memory", "sqlite", pytest.param("postgresql", marks=pytest.mark.postgres), "redis"]
)
def store_engine(
    request: pytest.FixtureRequest, clock: FakeClock, tmp_path: Path
) -> Iterator[Failover]:
    """An engine on memory, a SQLite file (async writes on), PostgreSQL or Redis."""
    eng = _engine(request.param, clock, tmp_path)
    yield eng
    eng.close()


def test_full_partial_and_cross_domain_recovery_on_every_store(
    any_engine: Failover, catalogue: Catalogue, clock: FakeClock
) -> None:
    @failover.failover(
        "countries", domain="country", splitter=ListSplitter("code"), engine=any_engine
    )
    def find_countries(codes: str | list[str]) -> list[Country]:
        return catalogue(split(codes) if isinstance(codes, str) else codes)

    @failover.failover("country", domain="country", engine=any_engine)
    def find_country(code: str) -> Country:
        return catalogue([code])[0]

    t0 = clock()
    assert find_countries("FR,DE") == [Country("FR", "France"), Country("DE", "Germany")]
    clock.advance(60)
    find_country("US")  # stored whole by the single-entity failover, in the same domain
    catalogue.down = True

    env = find_countries.referential("US,FR,DE")  # the order of the request, not of storage
    assert env.payload == [Country(c, NAMES[c]) for c in ("US", "FR", "DE")]
    assert (env.up_to_date, env.name) == (False, "country")
    assert isinstance(env.cause, ConnectionError)
    assert env.as_of == t0  # the oldest slice
    assert env.expire_on == t0 + timedelta(hours=1)  # the earliest expiry
    assert find_country("DE") == Country("DE", "Germany")  # a slice, found by the other one
    assert find_countries(["IT", "FR"]) == [Country("FR", "France")]  # partial
    with pytest.raises(ConnectionError) as raised:
        find_countries("IT,ES")  # every slice missing: a miss, never an empty list
    assert "no stored entry" in raised.value.__notes__[-1]


def test_1000_slices_on_every_store(any_engine: Failover, catalogue: Catalogue) -> None:
    codes = [f"C{i:04d}" for i in range(1_000)]

    @failover.failover("many", splitter=ListSplitter("code"), engine=any_engine)
    def find_countries(codes: Sequence[str]) -> list[Country]:
        return catalogue(list(codes))

    find_countries(codes)
    catalogue.down = True
    wanted = codes[::-1]  # another order, the same entities
    assert [c.code for c in find_countries(wanted)] == wanted
    with pytest.raises(ConnectionError):
        find_countries(())  # asks for no entity: nothing to recover


@pytest.mark.parametrize(
    "kind", ["memory", "sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]
)
def test_async_functions(kind: str, catalogue: Catalogue, clock: FakeClock, tmp_path: Path) -> None:
    eng = _engine(kind, clock, tmp_path)

    @failover.failover("acountries", splitter=ListSplitter("code"), engine=eng)
    async def find_countries(codes: str) -> list[Country]:
        return catalogue(split(codes))

    async def scenario() -> None:
        await find_countries("FR,DE")
        catalogue.down = True
        assert await find_countries("DE,FR") == [Country("DE", "Germany"), Country("FR", "France")]
        env = await find_countries.referential("DE")
        assert env.payload == [Country("DE", "Germany")]
        assert not env.up_to_date

    with eng:
        asyncio.run(scenario())
        peeked = find_countries.peek("FR")  # synchronous, like for every async function
        assert peeked is not None
        assert peeked.payload == [Country("FR", "France")]


def test_slices_still_queued_are_read(clock: FakeClock, catalogue: Catalogue) -> None:
    gated = GatedStore()
    eng = Failover(gated, async_writes=True, clock=clock, metrics=False)
    try:

        @failover.failover("queued", splitter=ListSplitter("code"), engine=eng)
        def find_countries(codes: str) -> list[Country]:
            return catalogue(split(codes))

        gated.hold()  # the worker parks inside the batch of the slices
        find_countries("FR,DE")
        assert gated.entered.wait(WAIT)
        assert gated.find_all("queued") == []  # nothing written yet
        catalogue.down = True
        assert find_countries("DE,FR") == [Country("DE", "Germany"), Country("FR", "France")]
        gated.gate.set()
        assert eng.flush(WAIT)
        assert len(gated.find_all("queued")) == 2
    finally:
        gated.gate.set()
        eng.close()


def test_tenants_keep_their_own_slices(clock: FakeClock, catalogue: Catalogue) -> None:
    eng = Failover(lambda tenant: InMemoryStore(), clock=clock, metrics=False)

    @failover.failover("t", splitter=ListSplitter("code"), engine=eng, policy="never_throw")
    def find_countries(codes: str) -> list[Country] | None:
        return catalogue(split(codes))

    with eng:
        with failover.tenant("acme"):
            find_countries("FR")
        catalogue.down = True
        with failover.tenant("globex"):
            assert find_countries("FR") is None
        with failover.tenant("acme"):
            assert find_countries("FR") == [Country("FR", "France")]


# -- one round trip -----------------------------------------------------------------------------


def test_1000_slices_are_one_statement_each_way_on_sqlite(
    tmp_path: Path, clock: FakeClock, catalogue: Catalogue
) -> None:
    db = make_engine(f"sqlite:///{tmp_path / 'f.db'}")
    statements: list[str] = []

    @sa.event.listens_for(db, "before_cursor_execute")
    def count(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        statements.append(statement.split(None, 1)[0].upper())

    store = SqlStore(db)
    store.find("warm", "up")  # the table is made on first use: not part of what is counted
    # No store deadline: on a loaded machine a write of 1,000 rows may outlast the default
    # 0.5 s, and the statements counted here are the store's, not the deadline's.
    eng = Failover(store, async_writes=False, clock=clock, metrics=False, store_timeout=None)
    codes = [f"C{i:04d}" for i in range(1_000)]

    @failover.failover("counted", splitter=ListSplitter("code"), engine=eng)
    def find_countries(codes: list[str]) -> list[Country]:
        return catalogue(codes)

    with eng:
        statements.clear()
        find_countries(codes)
        assert statements == ["INSERT"]  # one store_many
        catalogue.down = True
        statements.clear()
        assert len(find_countries(codes)) == 1_000
        assert statements == ["SELECT"]  # one find_many
        clock.advance(hours=2)
        statements.clear()
        with pytest.raises(ConnectionError):
            find_countries(codes)  # every slice expired: a miss, and each one deleted
        # Read, read again, then the expired slices deleted in one statement (delete_many).
        assert statements == ["SELECT", "SELECT", "DELETE"]
        assert store.find_all("counted") == []
    db.dispose()


# -- the merged envelope ------------------------------------------------------------------------


@dataclass
class City(Referential):
    code: str
    name: str


def test_expired_slices_are_misses_and_deleted(
    store_engine: Failover, catalogue: Catalogue, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    @failover.failover("exp", ttl="1h", splitter=ListSplitter("code"), engine=store_engine)
    def find_countries(codes: str) -> list[Country]:
        return catalogue(split(codes))

    find_countries("FR")
    clock.advance(minutes=30)
    t1 = clock()
    find_countries("DE")
    clock.advance(minutes=31)  # FR expired, DE not
    catalogue.down = True
    caplog.set_level(logging.WARNING, "failover")
    env = find_countries.referential("FR,DE")
    assert env.payload == [Country("DE", "Germany")]
    assert (env.as_of, env.expire_on) == (t1, t1 + timedelta(hours=1))
    assert "1 of 2 slices missing" in caplog.text
    assert [p.payload.code for p in store_engine.store.find_all("exp")] == ["DE"]  # FR deleted
    clock.advance(minutes=30)
    with pytest.raises(ConnectionError) as raised:
        find_countries("DE")
    assert "expired" in raised.value.__notes__[-1]
    assert store_engine.store.find_all("exp") == []


def test_items_are_enriched_per_slice_and_on_recovered_sees_the_merge(
    engine: Failover, clock: FakeClock
) -> None:
    down = False
    seen: list[Any] = []

    def hook(ctx: failover.RecoverContext[Any], value: Any) -> Any:
        seen.append((ctx.recovered, value))
        return value

    @failover.failover("cities", splitter=ListSplitter("code"), engine=engine, on_recovered=hook)
    def find_cities(codes: str) -> list[City]:
        if down:
            raise ConnectionError("down")
        return [City(c, c.lower()) for c in split(codes)]

    t0 = clock()
    find_cities("PAR")
    t1 = clock.advance(10)
    find_cities("BER")
    down = True
    cities = find_cities("PAR,BER")
    assert [(c.up_to_date, c.as_of) for c in cities] == [(False, t0), (False, t1)]
    [(recovered, value)] = seen
    assert recovered.payload == value == cities
    assert (recovered.up_to_date, recovered.as_of) == (False, t0)


def test_strict_turns_a_partial_recovery_into_a_miss(
    store_engine: Failover, catalogue: Catalogue
) -> None:
    @failover.failover(
        "strict",
        splitter=ListSplitter("code", strict=True),
        engine=store_engine,
        policy="never_throw",
    )
    def find_countries(codes: str) -> list[Country] | None:
        return catalogue(split(codes))

    find_countries("FR,DE")
    catalogue.down = True
    assert find_countries("DE,FR") == [Country("DE", "Germany"), Country("FR", "France")]
    assert find_countries("FR,IT") is None


class Spy(ListSplitter[Country]):
    """Counts merges."""

    __slots__ = ("merges",)

    def __init__(self) -> None:
        super().__init__("code")
        self.merges = 0

    def merge(self, ctx: Any, slices: Any) -> Any:
        self.merges += 1
        return super().merge(ctx, slices)


def test_merge_is_not_called_when_every_slice_misses(
    engine: Failover, catalogue: Catalogue
) -> None:
    spy = Spy()

    @failover.failover("spied", splitter=spy, engine=engine, policy="return_default")
    def find_countries(codes: str) -> list[Country]:
        return catalogue(split(codes))

    find_countries("FR")
    catalogue.down = True
    assert find_countries("IT") == []  # the policy's default, not a merge of nothing
    assert spy.merges == 0
    assert find_countries("FR,IT") == [Country("FR", "France")]
    assert spy.merges == 1


def test_partial_recoveries_are_counted(
    clock: FakeClock, catalogue: Catalogue, caplog: pytest.LogCaptureFixture
) -> None:
    registry = CollectorRegistry()
    eng = Failover(clock=clock, metrics=registry)

    @failover.failover("counted", splitter=ListSplitter("code"), engine=eng)
    def find_countries(codes: str) -> list[Country]:
        return catalogue(split(codes))

    with eng:
        find_countries("FR,DE")
        clock.advance(30)
        catalogue.down = True
        caplog.set_level(logging.WARNING, "failover")
        find_countries("FR,IT,ES")
        find_countries("FR,DE")  # complete: not partial
    assert "failover 'counted': partial recovery, 2 of 3 slices missing" in caplog.text
    assert value(registry, "failover_recoveries_partial_total", name="counted") == 1
    assert value(registry, "failover_recoveries_total", name="counted", outcome="recovered") == 2
    assert value(registry, "failover_stale_age_seconds_sum", name="counted") == 60
    assert value(registry, "failover_writes_total", name="counted", result="written") == 1


# -- recovering every slice ---------------------------------------------------------------------


def test_a_call_without_arguments_recovers_every_live_slice(
    store_engine: Failover, catalogue: Catalogue, clock: FakeClock
) -> None:
    @failover.failover("all", domain="country", splitter=ListSplitter("code"), engine=store_engine)
    def find_all() -> list[Country]:
        return catalogue(["US", "FR"])

    @failover.failover("some", domain="country", splitter=ListSplitter("code"), engine=store_engine)
    def find_countries(codes: str) -> list[Country]:
        return catalogue(split(codes))

    find_all()
    clock.advance(minutes=59)
    find_countries("DE")
    clock.advance(minutes=2)  # US and FR expired
    catalogue.down = True
    assert find_all() == [Country("DE", "Germany")]  # every live slice of the domain
    clock.advance(hours=1)
    with pytest.raises(ConnectionError) as raised:
        find_all()
    assert "expired" in raised.value.__notes__[-1]


def test_recover_all_ignores_the_arguments(store_engine: Failover, catalogue: Catalogue) -> None:
    @failover.failover("ra", splitter=ListSplitter("code"), recover_all=True, engine=store_engine)
    def find_countries(codes: str) -> list[Country]:
        return catalogue(split(codes))

    find_countries("US,FR")
    find_countries("DE")
    catalogue.down = True
    # Every slice, ordered by entity key (nothing was requested).
    assert [c.code for c in find_countries("IT")] == ["DE", "FR", "US"]
    peeked = find_countries.peek("whatever")
    assert peeked is not None
    assert len(peeked.payload) == 3
    find_countries.invalidate("anything")  # what it would recover: every slice
    assert find_countries.peek("x") is None


# -- peek, invalidate, splitters ----------------------------------------------------------------


def test_peek_and_invalidate_work_per_slice(store_engine: Failover, catalogue: Catalogue) -> None:
    @failover.failover("pi", domain="country", splitter=ListSplitter("code"), engine=store_engine)
    def find_countries(codes: str) -> list[Country]:
        return catalogue(split(codes))

    @failover.failover("one", domain="country", engine=store_engine)
    def find_country(code: str) -> Country:
        return catalogue([code])[0]

    find_countries("FR,DE,US")
    peeked = find_countries.peek("DE,FR")
    assert peeked is not None
    assert peeked.payload == [Country("DE", "Germany"), Country("FR", "France")]
    assert catalogue.calls == 1
    find_countries.invalidate("FR, DE")
    assert find_countries.peek("FR,DE") is None
    assert find_country.peek("FR") is None  # the same entry
    single = find_country.peek("US")
    assert single is not None
    assert single.payload == Country("US", "United States")


def test_a_slice_a_single_entity_failover_stored_as_none_is_left_out(
    store_engine: Failover, catalogue: Catalogue
) -> None:
    """The domain's single-entity failover stored ``None`` for a code that does not exist: a
    list recovered by key leaves it out, in request order otherwise (the recovery's bulk path,
    `ListSplitter.merge_values`, and the splitter's own `merge` agree)."""
    down = False

    @failover.failover("many", domain="country", splitter=ListSplitter("code"), engine=store_engine)
    def find_countries(codes: str) -> list[Country]:
        if down:
            raise ConnectionError("down")
        return catalogue(split(codes))

    @failover.failover("one", domain="country", engine=store_engine)
    def find_country(code: str) -> Country | None:
        return None if code == "XX" else catalogue([code])[0]

    find_countries("FR,DE")
    assert find_country("XX") is None
    down = True
    assert find_countries("DE,XX,FR") == [Country("DE", "Germany"), Country("FR", "France")]
    splitter: ListSplitter[Country] = ListSplitter("code")
    assert splitter.merge_values([Country("DE", "Germany"), None]) == [Country("DE", "Germany")]
    assert splitter.merge_values([None]) is None


@dataclass(frozen=True)
class Rate:
    currency: str
    value: float


def test_dict_splitter(store_engine: Failover) -> None:
    down = False

    @failover.failover("rates", splitter=DictSplitter(item_key="currency"), engine=store_engine)
    def rates(*currencies: str) -> dict[str, Rate]:
        if down:
            raise ConnectionError("down")
        return {c: Rate(c, 1.5) for c in currencies}

    rates("EUR", "USD")
    down = True
    assert rates("USD", "GBP", "EUR") == {"USD": Rate("USD", 1.5), "EUR": Rate("EUR", 1.5)}
    assert list(rates()) == ["EUR", "USD"]  # every slice, the keys rebuilt with item_key


def test_dict_splitter_without_item_key_cannot_recover_everything(
    engine: Failover, caplog: pytest.LogCaptureFixture
) -> None:
    down = False

    @failover.failover("fx", splitter=DictSplitter(), engine=engine, policy="never_throw")
    def rates(currencies: tuple[str, ...] = ()) -> dict[str, float] | None:
        if down:
            raise ConnectionError("down")
        return dict.fromkeys(currencies or ("EUR", "USD"), 1.5)

    rates()
    down = True
    assert rates(("USD",)) == {"USD": 1.5}
    caplog.set_level(logging.WARNING, "failover")
    assert rates() is None
    assert "merge of splitter DictSplitter(item_key=None, strict=False)" in caplog.text
    assert "needs item_key=" in caplog.text


@pytest.mark.parametrize(
    ("call", "expected"),
    [
        (("FR,DE",), ["FR", "DE"]),
        ((" FR , DE ,",), ["FR", "DE"]),
        ((["FR", "DE"],), ["FR", "DE"]),
        ((("DE", "FR", "DE"),), ["DE", "FR", "DE"]),  # as asked: the live shape
    ],
)
def test_requested_keys_from_the_first_argument(
    engine: Failover, catalogue: Catalogue, call: tuple[Any, ...], expected: list[str]
) -> None:
    @failover.failover("args", splitter=ListSplitter("code"), engine=engine)
    def find_countries(codes: Any) -> list[Country]:
        return catalogue(["FR", "DE"])

    find_countries("x")
    catalogue.down = True
    assert [c.code for c in find_countries(*call)] == expected


def test_keys_from_args_and_a_callable_item_key(engine: Failover) -> None:
    down = False

    class Client:
        @failover.failover(
            "users",
            engine=engine,
            splitter=ListSplitter(
                item_key=lambda user: user["id"],
                keys_from_args=lambda region, *, ids: [int(i) for i in ids.split("|")],
            ),
        )
        def users(self, region: str, *, ids: str) -> list[dict[str, Any]]:
            if down:
                raise ConnectionError("down")
            return [{"id": int(i), "region": region} for i in ids.split("|")]

    client = Client()
    client.users("eu", ids="1|2")
    down = True
    assert client.users("us", ids="2|3") == [{"id": 2, "region": "eu"}]


# -- splitter errors ----------------------------------------------------------------------------


class Broken(ListSplitter[Country]):
    """Raises in one operation."""

    __slots__ = ("operation",)

    def __init__(self, operation: str) -> None:
        super().__init__("code")
        self.operation = operation

    def __repr__(self) -> str:
        return f"Broken({self.operation})"

    def split_on_store(self, ctx: Any) -> Any:
        if self.operation == "split_on_store":
            raise ValueError("bad split")
        return super().split_on_store(ctx)

    def split_on_recover(self, ctx: Any) -> Any:
        if self.operation == "split_on_recover":
            raise ValueError("bad split")
        return super().split_on_recover(ctx)

    def merge(self, ctx: Any, slices: Any) -> Any:
        if self.operation == "merge":
            raise ValueError("bad merge")
        return super().merge(ctx, slices)


def test_a_splitter_error_on_store_never_breaks_the_live_result(
    clock: FakeClock, catalogue: Catalogue, caplog: pytest.LogCaptureFixture
) -> None:
    registry = CollectorRegistry()
    eng = Failover(clock=clock, metrics=registry)

    @failover.failover("bs", splitter=Broken("split_on_store"), engine=eng)
    def find_countries(codes: str) -> list[Country]:
        return catalogue(split(codes))

    caplog.set_level(logging.WARNING, "failover")
    with eng:
        assert find_countries("FR") == [Country("FR", "France")]
    assert "storing the live result failed" in caplog.text
    # The recover failure's record (the failover's state change is logged after it).
    error = next(r.exc_info[1] for r in reversed(caplog.records) if r.exc_info)
    assert isinstance(error, SplitterError)
    assert str(error).startswith("failover 'bs': split_on_store of splitter Broken(split_on_store)")
    assert isinstance(error.__cause__, ValueError)
    assert value(registry, "failover_writes_total", name="bs", result="failed") == 1


@pytest.mark.parametrize("operation", ["split_on_recover", "merge"])
def test_a_splitter_error_on_recover_is_a_recover_error(
    engine: Failover, catalogue: Catalogue, caplog: pytest.LogCaptureFixture, operation: str
) -> None:
    @failover.failover("br", splitter=Broken(operation), engine=engine)
    def find_countries(codes: str) -> list[Country]:
        return catalogue(split(codes))

    find_countries("FR")
    catalogue.down = True
    caplog.set_level(logging.WARNING, "failover")
    with pytest.raises(ConnectionError) as raised:
        find_countries("FR")
    assert "nothing recovered" in raised.value.__notes__[-1]
    # The recover failure's record (the failover's state change is logged after it).
    error = next(r.exc_info[1] for r in reversed(caplog.records) if r.exc_info)
    assert isinstance(error, SplitterError)
    assert f"failover 'br': {operation} of splitter Broken({operation})" in str(error)
    with pytest.raises(SplitterError, match=operation):
        find_countries.peek("FR")  # peek has no policy: the caller sees the error


def test_splitters_that_cannot_split_the_result(
    engine: Failover, caplog: pytest.LogCaptureFixture
) -> None:
    @failover.failover("gen", splitter=ListSplitter("code"), engine=engine)
    def lazy(codes: str) -> Any:
        return (Country(c, c) for c in split(codes))

    caplog.set_level(logging.WARNING, "failover")
    assert [c.code for c in lazy("FR,DE")] == ["FR", "DE"]  # not consumed by the store
    assert "ListSplitter splits lists, got generator" in caplog.text


# -- configuration ------------------------------------------------------------------------------


def test_a_splitter_must_have_the_three_methods() -> None:
    with pytest.raises(ConfigurationError, match="failover 'x': splitter= must have"):

        @failover.failover("x", splitter=object())
        def f() -> None: ...


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: ListSplitter(""), "ListSplitter: item_key must be a non-empty"),
        (lambda: ListSplitter(5), "ListSplitter: item_key must be an attribute name"),  # type: ignore[arg-type]
        (lambda: ListSplitter(None), "ListSplitter: item_key is required"),  # type: ignore[arg-type]
        (lambda: ListSplitter("c", keys_from_args=1), "keys_from_args must be callable"),  # type: ignore[arg-type]
        (lambda: DictSplitter(strict=1), "DictSplitter: strict must be True or False"),  # type: ignore[arg-type]
    ],
)
def test_splitter_settings_are_validated(make: Callable[[], object], match: str) -> None:
    with pytest.raises(ConfigurationError, match=match):
        make()


def test_the_built_in_splitters_are_payload_splitters() -> None:
    assert isinstance(ListSplitter("code"), PayloadSplitter)
    assert isinstance(DictSplitter(), PayloadSplitter)
    assert repr(ListSplitter("code")) == "ListSplitter(item_key='code', strict=False)"


def test_a_hand_made_splitter(engine: Failover) -> None:
    """Slices with two arguments: keyed as a two-argument call of the domain."""

    class ByRegion:
        def split_on_store(self, ctx: StoreContext[Any]) -> list[StoreContext[Any]]:
            region = ctx.arguments["region"]
            return [
                StoreContext(ctx.definition, {"region": region, "code": c}, n)
                for c, n in ctx.payload.items()
            ]

        def split_on_recover(self, ctx: Any) -> list[Any]:
            return [
                failover.RecoverContext(
                    ctx.definition, {"region": ctx.arguments["region"], "code": c}, None, None, str
                )
                for c in ctx.arguments["codes"]
            ]

        def merge(self, ctx: Any, slices: list[Any]) -> Mapping[str, str]:
            return {s.arguments["code"]: s.recovered.payload for s in slices if s.recovered}

    down = False

    @failover.failover("names", domain="names", splitter=ByRegion(), engine=engine)
    def names(region: str, codes: tuple[str, ...]) -> dict[str, str]:
        if down:
            raise ConnectionError("down")
        return {c: f"{c}@{region}" for c in codes}

    @failover.failover("name", domain="names", engine=engine)
    def name(region: str, code: str) -> str:
        raise ConnectionError("down")

    names("eu", ("FR", "DE"))
    down = True
    assert names("eu", ("DE", "IT")) == {"DE": "DE@eu"}
    assert name("eu", "FR") == "FR@eu"


# -- domain sharing warnings --------------------------------------------------------------------


def test_a_domain_shared_by_types_that_do_not_match_warns(engine: Failover) -> None:
    @failover.failover("by-code", domain="places", engine=engine)
    def by_code(code: str) -> Country:
        raise NotImplementedError

    @failover.failover("by-codes", domain="places", splitter=ListSplitter("code"), engine=engine)
    def by_codes(codes: str) -> list[Country]:
        raise NotImplementedError  # the slices are countries: no warning

    @failover.failover("optional", domain="places", engine=engine)
    def optional(code: str) -> Country | None:
        raise NotImplementedError  # nor here

    with pytest.warns(UserWarning, match="'cities'.*'places'.*another type.*City.*Country"):

        @failover.failover("cities", domain="places", splitter=ListSplitter("code"), engine=engine)
        def cities(codes: str) -> list[City]:
            raise NotImplementedError

    with pytest.warns(UserWarning, match="another type"):

        @failover.failover("whole", domain="places", engine=engine)
        def whole(codes: str) -> list[Country]:
            raise NotImplementedError  # holds lists, the others countries


def test_failovers_without_a_splitter_skip_the_layer(engine: Failover) -> None:
    @failover.failover("plain", engine=engine)
    def plain(code: str) -> str:
        return code

    @failover.failover("split", splitter=ListSplitter("code"), engine=engine)
    def split_(codes: str) -> list[Country]:
        return []

    assert engine.runtime(plain._failover_state).handler is engine.handler  # type: ignore[attr-defined]
    assert engine.runtime(split_._failover_state).handler is engine.scatter_handler  # type: ignore[attr-defined]
    assert "ScatterGather" not in repr(engine.handler)
    split_("")  # nothing to store: no slice, no write
    assert engine.raw_store.find_all("split") == []


def test_slice_contexts_are_ordinary_recover_contexts() -> None:
    from failover.scatter import slice_context

    built: failover.RecoverContext[int] = slice_context(None, {"key": 1}, None, None, int)  # type: ignore[arg-type]
    assert type(built) is failover.RecoverContext
    assert built == failover.RecoverContext(None, {"key": 1}, None, None, int)  # type: ignore[arg-type]
    with pytest.raises(AttributeError):
        built.cause = ValueError()  # type: ignore[misc]  # frozen


class CountingStore(InMemoryStore):
    def __init__(self) -> None:
        super().__init__()
        self.batches: list[int] = []

    def store_many(self, payloads: Any) -> None:
        self.batches.append(len(payloads))
        super().store_many(payloads)


def test_write_coalescing_applies_to_the_whole_call(clock: FakeClock, catalogue: Catalogue) -> None:
    store = CountingStore()
    eng = Failover(store, clock=clock, metrics=False)

    @failover.failover("co", splitter=ListSplitter("code"), store_interval="10s", engine=eng)
    def find_countries(codes: str) -> list[Country]:
        return catalogue(split(codes))

    with eng:
        find_countries("FR,DE")
        clock.advance(5)
        find_countries("FR,DE")  # within the interval: live, not stored again
        find_countries("US")  # another call: stored
        clock.advance(6)
        find_countries("FR,DE")
        find_countries.invalidate("FR,DE")
        find_countries("FR,DE")  # within the interval, but invalidated: stored
    assert store.batches == [2, 1, 2, 2]


class Racing(InMemoryStore):
    """Runs ``on_find_many`` once, right after a batch read: a concurrent success."""

    on_find_many: Callable[[], object] | None = None

    def find_many(self, name: str, keys: Any) -> Any:
        found = super().find_many(name, keys)
        hook, self.on_find_many = self.on_find_many, None
        if hook is not None:
            hook()
        return found


def test_an_expired_slice_stored_again_meanwhile_is_kept(
    clock: FakeClock, catalogue: Catalogue
) -> None:
    store = Racing()
    eng = Failover(store, clock=clock, metrics=False)

    @failover.failover("race", ttl=10, splitter=ListSplitter("code"), engine=eng)
    def find_countries(codes: str) -> list[Country]:
        return catalogue(split(codes))

    with eng:
        find_countries("FR,DE")
        clock.advance(20)  # both expired
        catalogue.down = True
        store.on_find_many = lambda: _fresh(find_countries, catalogue, "FR")
        with pytest.raises(ConnectionError):
            find_countries("FR,DE")  # reads both expired; FR is stored again right after
        assert [p.payload.code for p in store.find_all("race")] == ["FR"]  # only DE deleted


def _fresh(fn: Callable[[str], object], catalogue: Catalogue, codes: str) -> None:
    catalogue.down = False
    try:
        fn(codes)
    finally:
        catalogue.down = True


def test_a_splitter_error_names_the_subclass_not_its_base(
    engine: Failover, catalogue: Catalogue, caplog: pytest.LogCaptureFixture
) -> None:
    class BoomOnStore(ListSplitter[Country]):
        def split_on_store(self, ctx: StoreContext[list[Country]]) -> list[StoreContext[Country]]:
            raise ValueError("boom")

    @failover.failover("boom", splitter=BoomOnStore("code"), engine=engine)
    def find_countries(codes: str) -> list[Country]:
        return catalogue(split(codes))

    caplog.set_level(logging.WARNING, "failover")
    assert find_countries("FR") == [Country("FR", "France")]
    error = next(r.exc_info[1] for r in caplog.records if r.exc_info)
    assert isinstance(error, SplitterError)
    assert "splitter BoomOnStore(item_key='code', strict=False)" in str(error)
    assert "ListSplitter" not in str(error)


# -- keys of another type --------------------------------------------------------------------------


@dataclass(frozen=True)
class Account:
    id: int
    owner: str


def _accounts_failover(engine: Failover, down: list[bool]) -> Any:
    @failover.failover("accounts", engine=engine, splitter=ListSplitter("id"))
    def accounts(ids: str) -> list[Account]:
        if down:
            raise ConnectionError("accounts down")
        return [Account(int(i), f"owner {i}") for i in ids.split(",")]

    return accounts


def test_slices_stored_under_int_keys_but_asked_for_by_str_are_warned_once(
    engine: Failover, caplog: pytest.LogCaptureFixture
) -> None:
    down: list[bool] = []
    accounts = _accounts_failover(engine, down)
    assert len(accounts("1,2,3")) == 3  # stored under 1, 2, 3 (ints: item_key "id")
    down.append(True)
    with caplog.at_level(logging.WARNING, "failover"):
        for _ in range(3):
            with pytest.raises(ConnectionError) as refused:
                accounts("1,2,3")  # asks for "1", "2", "3"
            assert "no stored entry" in str(refused.value.__notes__)
    warnings = [r.getMessage() for r in caplog.records if "differ in type" in r.getMessage()]
    assert len(warnings) == 1  # once per failover
    assert "'accounts'" in warnings[0]
    assert "asked for by str keys" in warnings[0]
    assert "stored under int keys" in warnings[0]
    assert "keys_from_args" in warnings[0]


async def test_an_async_all_miss_of_mistyped_keys_is_warned_too(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    engine = Failover(f"sqlite:///{tmp_path}/f.db", metrics=False, async_writes=False)
    down: list[bool] = []

    @failover.failover("aaccounts", engine=engine, splitter=ListSplitter("id"))
    async def accounts(ids: str) -> list[Account]:
        if down:
            raise ConnectionError("accounts down")
        return [Account(int(i), f"owner {i}") for i in ids.split(",")]

    assert len(await accounts("1,2")) == 2
    down.append(True)
    with caplog.at_level(logging.WARNING, "failover"), pytest.raises(ConnectionError):
        await accounts("1,2")
    assert [r for r in caplog.records if "differ in type" in r.getMessage()]
    engine.close()


def test_a_real_miss_of_matching_types_is_not_warned(
    engine: Failover, caplog: pytest.LogCaptureFixture
) -> None:
    down: list[bool] = []
    accounts = _accounts_failover(engine, down)
    down.append(True)
    with caplog.at_level(logging.WARNING, "failover"), pytest.raises(ConnectionError):
        accounts("7,8")  # nothing stored at all
    assert not [r for r in caplog.records if "differ in type" in r.getMessage()]
