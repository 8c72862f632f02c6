"""`SqlStore` on real SQLite files and a real PostgreSQL server: the schema, the statements it
sends, pooling, rows that must not decode, and processes sharing one store."""

from __future__ import annotations

import base64
import json
import os
import pickle
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta, timezone
from decimal import Decimal
from enum import Enum
from pathlib import Path
from typing import Any, NamedTuple
from uuid import UUID

import pydantic
import pytest
import sqlalchemy as sa
from prometheus_client import CollectorRegistry

import failover
from failover.errors import ConfigurationError, SerializationError, StoreError
from failover.keys import key_tag
from failover.payload import ReferentialPayload, envelope
from failover.serialization.binding import entry_binding
from failover.serialization.crypto import FernetCipher, seal
from failover.serialization.pickle_codec import PickleCodec
from failover.stores import make_store
from failover.stores.backends.sql import SqlStore, make_engine

from . import postgres
from .conftest import FakeClock, Upstream
from .test_store_contract import entry

ROOT = Path(__file__).resolve().parent.parent
PICKLE_KEY = b"test signing key"

BACKENDS = ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]


# Named apart from their functions, so that other modules (test_sql_rows) can import them.
@pytest.fixture(name="backend", params=BACKENDS)
def backend_fixture(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(name="db_engine")
def db_engine_fixture(backend: str, tmp_path: Path) -> Iterator[sa.Engine]:
    """An engine the test's stores share: one SQLite file, or the session's PostgreSQL."""
    if backend == "postgresql":
        yield postgres.engine()
        return
    engine = make_engine(f"sqlite:///{tmp_path / 'failover.db'}")
    yield engine
    engine.dispose()


@pytest.fixture(name="make")
def make_fixture(db_engine: sa.Engine) -> Iterator[Callable[..., SqlStore]]:
    """Makes stores on the test's own table (the same one for every store of the test)."""
    prefix = postgres.unique_prefix() if db_engine.dialect.name == "postgresql" else ""
    made: list[SqlStore] = []

    def factory(**kwargs: Any) -> SqlStore:
        kwargs.setdefault("table_prefix", prefix)
        store = SqlStore(db_engine, **kwargs)
        made.append(store)
        return store

    yield factory
    for store in made:
        store.close()


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


class Statements:
    """The SQL statements an engine sends, as (statement, executemany)."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, bool]] = []

    def __call__(self, conn: Any, cursor: Any, statement: str, *rest: Any) -> None:
        self.seen.append((statement, rest[-1]))


@contextmanager
def listening(engine: sa.Engine, event: str) -> Iterator[list[tuple[Any, ...]]]:
    """The arguments of every ``event`` of the engine (or its pool) while in the block."""
    seen: list[tuple[Any, ...]] = []

    def listener(*args: Any) -> None:
        seen.append(args)

    sa.event.listen(engine, event, listener)
    try:
        yield seen
    finally:
        sa.event.remove(engine, event, listener)


@contextmanager
def statements(engine: sa.Engine) -> Iterator[Statements]:
    """The statements sent while in the block. On PostgreSQL the store sends most of its own
    through psycopg directly, past SQLAlchemy's events: there, psycopg's cursors are watched
    (they still run every statement), and pings of idle connections are left out."""
    seen = Statements()
    if engine.dialect.name != "postgresql":
        sa.event.listen(engine, "before_cursor_execute", seen)
        try:
            yield seen
        finally:
            sa.event.remove(engine, "before_cursor_execute", seen)
        return
    import psycopg

    execute, executemany = psycopg.Cursor.execute, psycopg.Cursor.executemany

    def watched_execute(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        if query != "SELECT 1":
            seen.seen.append((str(query), False))
        return execute(self, query, *args, **kwargs)

    def watched_executemany(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        seen.seen.append((str(query), True))
        return executemany(self, query, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(psycopg.Cursor, "execute", watched_execute)
        patch.setattr(psycopg.Cursor, "executemany", watched_executemany)
        yield seen


def pooled(engine: sa.Engine) -> int:
    """Connections idle in the engine's pool."""
    pool = engine.pool
    assert isinstance(pool, sa.QueuePool)
    return pool.checkedin()


def write_row(store: SqlStore, name: str, key: str, payload: str, ttl: float = 3600) -> None:
    """A row written by hand, bypassing the codec."""
    now = datetime.now(UTC)
    table = store.table
    with store.engine.begin() as conn:
        conn.execute(table.delete().where(table.c.name == name, table.c.key == key))
        conn.execute(
            table.insert(),
            {
                "name": name,
                "key": key,
                "as_of": 0,
                "expire_on": int((now + timedelta(seconds=ttl)).timestamp() * 1e6),
                "payload": payload,
                "payload_type": "builtins.dict",
            },
        )


# -- result types of the decorated functions (module level, as real ones are) ---------------------


class Tier(Enum):
    FREE = "free"
    PAID = "paid"


@dataclass(frozen=True)
class Address:
    city: str
    since: date


@dataclass(frozen=True)
class Customer:
    id: UUID
    tier: Tier
    balance: Decimal
    address: Address
    seen: datetime


class Money(NamedTuple):
    amount: Decimal
    currency: str


class Invoice(pydantic.BaseModel):
    number: int
    total: Money
    customer: Customer


class Exploit:
    """Unpickling it creates a file: proof that a refused row never ran."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (f"touch {self.path}",))


# -- the table ------------------------------------------------------------------------------------


def test_datetimes_come_back_equal_and_aware_utc(make: Callable[..., SqlStore]) -> None:
    store = make()
    cases = {
        "micro": (datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC), timedelta(seconds=1)),
        "offset": (datetime(2026, 6, 1, 23, 59, tzinfo=timezone(timedelta(hours=-7))), timedelta()),
        "min": (datetime(1, 1, 1, tzinfo=UTC), timedelta(days=1)),
        "max": (datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC), timedelta()),
    }
    for key, (as_of, ttl) in cases.items():
        store.store(ReferentialPayload("n", key, 1, as_of, as_of + ttl, True))
    for key, (as_of, ttl) in cases.items():
        found = store.find("n", key)
        assert found is not None
        assert found.as_of == as_of
        assert found.as_of.tzinfo is UTC
        assert found.expire_on == as_of + ttl


def test_naive_datetimes_are_refused(make: Callable[..., SqlStore]) -> None:
    naive = datetime(2026, 1, 1)
    with pytest.raises(StoreError, match="timezone-aware"):
        make().store(ReferentialPayload("n", "k", 1, naive, naive, True))


@pytest.mark.parametrize("times", [(None, "now"), ("now", None), (None, None)])
def test_an_entry_without_times_is_not_stored(
    make: Callable[..., SqlStore], clock: FakeClock, times: tuple[Any, Any]
) -> None:
    store = make()
    as_of, expire_on = (clock() if t == "now" else None for t in times)
    with pytest.raises(SerializationError, match="needs as_of and expire_on"):
        store.store(ReferentialPayload("n", "k", 1, as_of, expire_on, True))
    with pytest.raises(SerializationError, match="needs as_of and expire_on"):
        store.store_many(
            [entry(clock, "ok"), ReferentialPayload("n", "k", 1, as_of, expire_on, True)]
        )
    assert store.find_all("n") == []


def test_schema_columns_and_index(make: Callable[..., SqlStore], db_engine: sa.Engine) -> None:
    store = make()
    inspector = sa.inspect(db_engine)
    name = store.table.name
    columns = {c["name"]: c["nullable"] for c in inspector.get_columns(name)}
    assert set(columns) == {"name", "key", "as_of", "expire_on", "payload", "payload_type", "label"}
    assert columns.pop("label")  # NULL unless the failover opts in to labels
    assert not any(columns.values())  # NULL in no other: a NULL time would be a corrupt row
    assert inspector.get_pk_constraint(name)["constrained_columns"] == ["name", "key"]
    assert [i["column_names"] for i in inspector.get_indexes(name)] == [["expire_on"]]


def test_create_table_is_idempotent(make: Callable[..., SqlStore], clock: FakeClock) -> None:
    first = make()
    first.store(entry(clock, "k"))
    second = make()
    second.create_table()
    assert second.find("n", "k") is not None


@pytest.mark.parametrize(
    "prefix",
    ["x; DROP TABLE y", "a-b", "a b", "a.b.c", "1schema.x", "é", "x" * 33, 'a"', "a\n", None, 3],
)
def test_hostile_table_prefixes_are_refused_before_any_sql(
    db_engine: sa.Engine, prefix: Any
) -> None:
    with (
        listening(db_engine, "connect") as connects,
        statements(db_engine) as seen,
        pytest.raises(ConfigurationError, match="table_prefix"),
    ):
        SqlStore(db_engine, table_prefix=prefix)
    assert seen.seen == []
    assert connects == []
    if db_engine.dialect.name == "sqlite":
        assert sa.inspect(db_engine).get_table_names() == []


def test_a_schema_prefix(backend: str, db_engine: sa.Engine, clock: FakeClock) -> None:
    schema = "main" if backend == "sqlite" else f"s{postgres.unique_prefix()}"
    store = SqlStore(db_engine, table_prefix=f"{schema}.app_")
    store.store(entry(clock, "k"))
    assert store.find("n", "k") is not None
    assert "app_failover_store" in sa.inspect(db_engine).get_table_names(schema=schema)


def test_prefixes_share_an_engine_and_never_dispose_it(
    make: Callable[..., SqlStore], db_engine: sa.Engine, clock: FakeClock
) -> None:
    a = make(table_prefix=f"{postgres.unique_prefix()}a_")
    b = make(table_prefix=f"{postgres.unique_prefix()}b_")
    a.store(entry(clock, "k", {"in": "a"}))
    assert b.find("n", "k") is None
    a.close()
    b.store(entry(clock, "k", {"in": "b"}))
    found = a.find("n", "k")
    assert found is not None
    assert found.payload == {"in": "a"}
    assert pooled(db_engine) >= 1  # the pool kept its connections


def test_closing_a_store_disposes_the_engine_it_made(tmp_path: Path, clock: FakeClock) -> None:
    store = SqlStore(f"sqlite:///{tmp_path / 'own.db'}")
    store.store(entry(clock, "k"))
    assert pooled(store.engine) >= 1
    store.close()
    assert pooled(store.engine) == 0


def test_store_many_keeps_the_last_value_of_a_repeated_key(
    make: Callable[..., SqlStore], clock: FakeClock
) -> None:
    store = make()
    store.store_many([entry(clock, "k", {"v": 1}), entry(clock, "j"), entry(clock, "k", {"v": 2})])
    found = store.find("n", "k")
    assert found is not None
    assert found.payload == {"v": 2}
    store.store_many([])
    assert len(store.find_all("n")) == 2


def test_names(make: Callable[..., SqlStore], clock: FakeClock) -> None:
    store = make()
    for name in ("b", "a", "b"):
        store.store(entry(clock, f"k{name}", name=name))
    assert store.names() == ["a", "b"]


def test_the_portable_upsert_of_other_databases(tmp_path: Path, clock: FakeClock) -> None:
    store = SqlStore(f"sqlite:///{tmp_path / 'portable.db'}")
    store._core._upsert = None  # what a database without INSERT ... ON CONFLICT gets
    store._core._driver_upsert = None
    with statements(store.engine) as seen:
        store.store(entry(clock, "a", {"v": 1}))
        store.store(entry(clock, "a", {"v": 2}))
        store.store_many([entry(clock, "a", {"v": 3}), entry(clock, "b", {"v": 4})])
    assert [p.payload for p in store.find_all("n")] == [{"v": 3}, {"v": 4}]
    verbs = [s.split()[0] for s, _ in seen.seen]
    # Not updated: a new key (inserted), or a newer row (left as it is): one SELECT tells.
    assert verbs == ["UPDATE", "SELECT", "INSERT", "UPDATE", "UPDATE", "UPDATE", "SELECT", "INSERT"]
    # Entries only move forward there too: an older write leaves the row.
    clock.advance(-1)
    assert store.store(entry(clock, "a", {"v": 0})) == 1
    assert store.find("n", "a").payload == {"v": 3}  # type: ignore[union-attr]
    store.close()


# -- statements and pooling -----------------------------------------------------------------------


ODD_TEXT = ["a\x00b", "é ü 日本 \U0001f600", 'quote" back\\slash \n\t', "\ud800 lone", ']},{"n":']


def test_a_batch_carries_any_text_exactly(make: Callable[..., SqlStore], clock: FakeClock) -> None:
    """NUL, non-ASCII, quotes and backslashes, lone surrogates, JSON look-alikes: what the
    batch's own encoding (one JSON document on PostgreSQL) must carry through unchanged."""
    store = make()
    now = clock()
    entries = [
        ReferentialPayload("odd", f"k{i}", {"v": text}, now, now + timedelta(hours=1), True)
        for i, text in enumerate(ODD_TEXT)
    ]
    store.store_many(entries)
    for i, text in enumerate(ODD_TEXT):
        found = store.find("odd", f"k{i}")
        assert found is not None
        assert found.payload == {"v": text}


def test_batches_are_one_statement_each(make: Callable[..., SqlStore], clock: FakeClock) -> None:
    store = make()
    keys = [f"k{i}" for i in range(1_000)]
    with statements(store.engine) as seen:
        store.store_many([entry(clock, k, {"k": k}) for k in keys])
    ((sql, many),) = seen.seen
    assert "ON CONFLICT" in sql
    if store.engine.dialect.name == "postgresql":  # the rows as one JSON array, unpacked
        assert "json_to_recordset(%s::json)" in sql
    else:  # the rows as the driver takes them, in one executemany
        assert many
        assert "?" in sql
    with statements(store.engine) as seen:
        found = store.find_many("n", [*keys, "absent"])
    assert len(found) == 1_000
    assert found["k999"].payload == {"k": "k999"}
    ((sql, _),) = seen.seen
    if store.engine.dialect.name == "postgresql":
        assert "unnest(%b::text[])" in sql  # the keys travel as one array parameter
        assert sql.count("%s") == 1  # with the name
        assert "LIMIT 1" in sql
    else:
        assert " IN (" in sql


def test_clean_by_expiry_is_an_indexed_delete(
    make: Callable[..., SqlStore], clock: FakeClock
) -> None:
    store = make()
    store.store_many([entry(clock, f"s{i}", ttl=10) for i in range(5)])
    store.store(entry(clock, "long", ttl=1000))
    with statements(store.engine) as seen:
        assert store.clean_by_expiry(clock.advance(10)) == 5
    # The tags table's rows whose entry is gone go too, in a statement of their own.
    deletes = [
        sql for sql, _ in seen.seen if sql.startswith("DELETE") and "failover_tags" not in sql[:80]
    ]
    assert len(deletes) == 2  # the expired range; NULL expiries (tables of earlier versions)
    if store.engine.dialect.name == "sqlite":
        with store.engine.connect() as conn:
            plan = conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {deletes[0]}", (0,)).all()
        assert "failover_store_expire_on" in str(plan)


def test_point_finds_reuse_pooled_connections(
    make: Callable[..., SqlStore], clock: FakeClock
) -> None:
    store = make()
    store.store(entry(clock, "k"))
    with (
        listening(store.engine, "connect") as connects,
        listening(store.engine, "checkout") as checkouts,
        statements(store.engine) as seen,
    ):
        for _ in range(200):
            assert store.find("n", "k") is not None
    assert len(connects) <= 1
    if store.engine.dialect.name == "postgresql":
        assert len(checkouts) <= 1  # a spare connection, kept between calls
    else:
        assert len(checkouts) == 200
    assert len(seen.seen) == 200


def test_threads_share_a_pool(make: Callable[..., SqlStore], clock: FakeClock) -> None:
    store = make()
    errors: list[BaseException] = []

    def work(t: int) -> None:
        try:
            for i in range(20):
                store.store(entry(clock, f"{t}-{i}"))
                store.find_many("n", [f"{t}-{j}" for j in range(i + 1)])
        except BaseException as exc:  # re-raised on the main thread below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(12)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert errors == []
    assert len(store.find_all("n")) == 240


def test_sqlite_runs_in_wal_mode_with_a_busy_timeout(tmp_path: Path) -> None:
    path = tmp_path / "wal.db"
    store = SqlStore(f"sqlite:///{path}")
    with store.engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == 5000
    store.close()
    with sqlite3.connect(path) as other:  # the file itself is in WAL mode, for every process
        assert other.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    other.close()


def test_in_memory_sqlite_is_one_database_for_every_thread(clock: FakeClock) -> None:
    store = SqlStore("sqlite://")
    thread = threading.Thread(target=store.store, args=(entry(clock, "k"),))
    thread.start()
    thread.join()
    assert store.find("n", "k") is not None
    store.close()


def test_an_unreachable_database_does_not_stop_construction(
    caplog: pytest.LogCaptureFixture, clock: FakeClock
) -> None:
    port = postgres._free_port()  # nothing listens there
    store = SqlStore(f"postgresql+psycopg://nobody@127.0.0.1:{port}/none")
    assert "retried on first use" in caplog.text
    with pytest.raises(StoreError, match="cannot create the table"):
        store.find("n", "k")
    store.close()


# -- URLs -----------------------------------------------------------------------------------------


def test_make_store_makes_sql_stores(tmp_path: Path) -> None:
    store = make_store(f"sqlite:///{tmp_path / 'f.db'}")
    assert isinstance(store, SqlStore)
    assert store.does_io is True
    store.close()


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("nosuchdb://host/db", "unknown scheme 'nosuchdb'; supported: memory://, cachetools://"),
        ("mysql://user:hunter2@host/db", "driver of 'mysql' is not installed"),
        (
            "postgresql+psycopg2://u:hunter2@127.0.0.1:1/db",
            r"not installed: No module named 'psycopg2' \(use postgresql\+psycopg://",
        ),
        ("postgresql+psycopg://u:hunter2@h:port/db", "is not a SQLAlchemy URL"),
        ("sqlite:////no/such/folder/f.db", "folder '/no/such/folder' does not exist"),
    ],
)
def test_bad_urls_are_one_line_configuration_errors(url: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message) as raised:
        make_store(url)
    text = str(raised.value)
    assert "\n" not in text
    assert "hunter2" not in text


@pytest.mark.parametrize("allowed", [[1], int, "Country"])
def test_bad_allowed_types_name_the_store_and_the_setting(allowed: Any) -> None:
    with pytest.raises(ConfigurationError, match=r"^SqlStore.*allowed_types"):
        SqlStore("sqlite://", allowed_types=allowed)


@pytest.mark.parametrize(
    ("url", "nearest"),
    [
        ("memroy://", "memory://"),
        ("cachetool://?maxsize=5", "cachetools://"),
        ("postgres://svc:hunter2@db.internal/failover", "postgresql+psycopg://"),
        ("postgress://db.internal/failover", "postgresql+psycopg://"),
        ("sqlite3:///failover.db", "sqlite://"),
        ("sqllite:///failover.db", "sqlite://"),
    ],
)
def test_an_unknown_scheme_lists_the_supported_ones_and_suggests_the_nearest(
    url: str, nearest: str
) -> None:
    with pytest.raises(ConfigurationError) as raised:
        make_store(url)
    text = str(raised.value)
    scheme = url.split("://", maxsplit=1)[0]
    assert f"unknown scheme {scheme!r} (did you mean {nearest}?)" in text
    assert (
        "supported: memory://, cachetools://, redis://, rediss://, unix://, redis+sentinel://, "
        "redis+cluster://, tiered+<url>, or a SQLAlchemy URL"
    ) in text
    assert "hunter2" not in text
    assert "\n" not in text


def test_direct_sqlstore_urls_name_the_unknown_driver() -> None:
    with pytest.raises(ConfigurationError, match="unknown database or driver 'nosuchdb'"):
        SqlStore("nosuchdb://host/db")


# -- serialization through the decorator ----------------------------------------------------------


def decorated(
    store: SqlStore, clock: FakeClock, upstream: Upstream, **kwargs: Any
) -> tuple[failover.Failover, Any]:
    engine = failover.Failover(store, clock=clock, async_writes=False, **kwargs)

    @failover.failover("billing.invoice", engine=engine)
    def invoice(number: int) -> Invoice | None:
        return upstream(make_invoice(number))  # type: ignore[return-value]

    return engine, invoice


def make_invoice(number: int) -> Invoice:
    customer = Customer(
        UUID(int=number),
        Tier.PAID,
        Decimal("-12.50"),
        Address("Lyon", date(2020, 2, 29)),
        datetime(2026, 1, 1, 8, 30, 0, 1, tzinfo=UTC),
    )
    return Invoice(number=number, total=Money(Decimal("99.90"), "EUR"), customer=customer)


def test_annotated_result_types_round_trip_exactly(
    make: Callable[..., SqlStore], clock: FakeClock, upstream: Upstream
) -> None:
    engine, invoice = decorated(make(), clock, upstream, metrics=False)
    with engine:
        live = invoice(7)
        upstream.fail()
        clock.advance(60)
        stale = invoice.referential(7)
    assert stale.up_to_date is False
    assert stale.as_of == clock() - timedelta(seconds=60)
    assert stale.payload == live
    assert type(stale.payload.customer.address) is Address
    assert type(stale.payload.total) is Money
    assert stale.payload.customer.tier is Tier.PAID


def test_an_unencodable_result_is_returned_and_not_stored(
    make: Callable[..., SqlStore],
    clock: FakeClock,
    upstream: Upstream,
    registry: CollectorRegistry,
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = make()
    engine = failover.Failover(store, clock=clock, async_writes=False, metrics=registry)

    @failover.failover("opaque", engine=engine)
    def fetch() -> object:
        return upstream(1 + 2j)  # JSON holds no complex numbers

    with engine:
        assert fetch() == 1 + 2j
        assert fetch.peek() is None
    assert store.find_all("opaque") == []
    assert "the store cannot encode builtins.complex" in caplog.text  # once, with the reason
    stored = {"name": "opaque", "result": "failed"}
    assert registry.get_sample_value("failover_writes_total", stored) == 1
    with pytest.raises(SerializationError, match="cannot store"):
        store.store(envelope("n", "k", 1 + 2j, clock(), clock(), True))


def _hostile_rows(tmp_path: Path) -> dict[str, tuple[str, str]]:
    """Rows that must never decode: (payload text, the reading store's codec)."""
    marker = tmp_path / "pwned"
    data = pickle.dumps(Exploit(marker))
    signed, _ = PickleCodec(PICKLE_KEY).encode({"honest": 1})
    other_key = seal(
        FernetCipher(FernetCipher.generate_key()), 'json:{"a":1}', entry_binding("n", "k")
    )
    return {
        "type off the allowlist": (
            'json:{"__t":"tests.test_sql_store.Exploit","v":{"path":"x"}}',
            "json",
        ),
        "a callable by name": ('json:{"__t":"posix.system","v":"touch x"}', "json"),
        "corrupt JSON": ('json:{"broken', "json"),
        "unknown codec marker": (
            f"yaml:!!python/object/apply:os.system ['touch {marker}']",
            "json",
        ),
        "no marker": ('{"a": 1}', "json"),
        "pickle row, no pickle key": ("pickle:" + base64.b64encode(data).decode(), "json"),
        "unsigned pickle": ("pickle:" + base64.b64encode(data).decode(), "pickle"),
        "tampered pickle": (
            "pickle:" + base64.b64encode(base64.b64decode(signed)[:32] + data).decode(),
            "pickle",
        ),
        "ENC row, wrong key": (other_key, "fernet"),
        "ENC row, no key": (other_key, "json"),
    }


HOSTILE = list(_hostile_rows(Path("x")))


@pytest.mark.parametrize("row", HOSTILE)
def test_a_row_that_cannot_be_decoded_is_a_miss_never_code(
    row: str,
    make: Callable[..., SqlStore],
    clock: FakeClock,
    upstream: Upstream,
    registry: CollectorRegistry,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    text, reader = _hostile_rows(tmp_path)[row]
    options: dict[str, dict[str, Any]] = {
        "json": {},
        "pickle": {"codec": PickleCodec(PICKLE_KEY)},
        "fernet": {"cipher": FernetCipher(FernetCipher.generate_key())},
    }
    store = make(**options[reader])
    engine, invoice = decorated(store, clock, upstream, metrics=registry)
    with engine:
        key = invoice.referential(1).key
        write_row(store, "billing.invoice", key, text)
        with pytest.raises(SerializationError, match="cannot be decoded"):
            store.find("billing.invoice", key)
        assert store.find_many("billing.invoice", [key]) == {}
        assert store.find_all("billing.invoice") == []
        assert "skipped" in caplog.text
        upstream.fail()
        with pytest.raises(ConnectionError) as raised:
            invoice(1)
        assert raised.value is upstream.error
        assert "the store failed while recovering" in raised.value.__notes__[-1]

        # The same entries (one domain), another policy: the caller gets the policy's value.
        @failover.failover("lenient", domain="billing.invoice", engine=engine, policy="never_throw")
        def lenient(number: int) -> Invoice | None:
            return upstream(make_invoice(number))  # type: ignore[return-value]

        assert lenient(1) is None
    assert not (tmp_path / "pwned").exists()
    for name in ("billing.invoice", "lenient"):
        outcome = {"name": name, "outcome": "error"}
        assert registry.get_sample_value("failover_recoveries_total", outcome) == 1


def test_a_pickle_store_reads_json_rows_with_accept_plain_only(
    make: Callable[..., SqlStore], clock: FakeClock
) -> None:
    make().store(entry(clock, "json", {"v": 1}))
    pickling = make(codec=PickleCodec(PICKLE_KEY), accept_plain=True)
    pickling.store(entry(clock, "pickle", {"v": 2}))
    assert [p.payload for p in pickling.find_all("n")] == [{"v": 1}, {"v": 2}]
    refusing = make(codec=PickleCodec(PICKLE_KEY))  # the default: unsigned rows refused
    assert [p.payload for p in refusing.find_all("n")] == [{"v": 2}]


def test_a_row_with_corrupt_times_is_a_decode_error_and_skipped(
    make: Callable[..., SqlStore], clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    store = make()
    store.store(entry(clock, "good", {"v": 1}))
    write_row(store, "n", "bad", "json:1")
    table = store.table
    with store.engine.begin() as conn:  # microseconds past datetime.max
        conn.execute(table.update().where(table.c.key == "bad").values(as_of=2**62))
    with pytest.raises(SerializationError, match=rf"\('n', {key_tag('bad')}\)"):
        store.find("n", "bad")
    assert list(store.find_many("n", ["bad", "good"])) == ["good"]
    assert [p.key for p in store.find_all("n")] == ["good"]
    assert "skipped" in caplog.text


def test_a_string_utf8_cannot_hold_does_not_fail_its_batch(
    make: Callable[..., SqlStore], clock: FakeClock
) -> None:
    store = make()
    lone = "file-\udcff.txt"  # a lone surrogate, as os.fsdecode makes of undecodable bytes
    store.store_many([entry(clock, "plain", {"v": 1}), entry(clock, "lone", {lone: [lone]})])
    found = store.find_many("n", ["plain", "lone"])
    assert found["lone"].payload == {lone: [lone]}
    assert found["plain"].payload == {"v": 1}


def test_async_functions_recover_from_a_sql_store(
    make: Callable[..., SqlStore], clock: FakeClock, upstream: Upstream
) -> None:
    import asyncio

    engine = failover.Failover(make(), clock=clock, async_writes=False, metrics=False)

    @failover.failover("async.rates", engine=engine)
    async def rate(ccy: str) -> dict[str, Decimal]:
        return upstream({ccy: Decimal("1.0850")})  # type: ignore[return-value]

    async def scenario() -> tuple[Any, Any]:
        live = await rate("EUR")
        upstream.fail()
        return live, await rate.referential("EUR")

    with engine:
        live, stale = asyncio.run(scenario())
    assert stale.payload == live
    assert stale.up_to_date is False


# -- several processes, one store -----------------------------------------------------------------

WORKER = r"""
import json, sys, time
import failover
from failover.stores.backends.sql import SqlStore

url, prefix, mine, theirs = sys.argv[1:5]  # prefix: a SQL table prefix ("" for other stores)
store = SqlStore(url, table_prefix=prefix) if prefix else url
engine = failover.Failover(store, metrics=False, async_writes=False)
down = False

@failover.failover("mp.rates", engine=engine)
def rate(ccy: str) -> dict:
    if down:
        raise ConnectionError("upstream down")
    return {"ccy": ccy, "written_by": mine}

rate(mine)
deadline = time.monotonic() + 30
while rate.peek(theirs) is None:  # the other process writes its entry meanwhile
    if time.monotonic() > deadline:
        sys.exit(f"{mine}: no entry from the other process")
    time.sleep(0.02)
down = True
found = rate.referential(theirs)
print(json.dumps({"payload": found.payload, "up_to_date": found.up_to_date}))
engine.close()
"""


def test_processes_see_each_others_entries(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    if backend == "postgresql":
        url, prefix = request.getfixturevalue("postgres_url"), postgres.unique_prefix()
    else:
        url, prefix = f"sqlite:///{tmp_path / 'shared.db'}", ""
    two_processes_share(url, prefix)


def two_processes_share(url: str, prefix: str) -> None:
    """Two processes on one store (``prefix``: a SQL table prefix, "" for other stores) each
    write an entry, then recover the other's while their upstream is down."""
    workers = {
        mine: subprocess.Popen(
            [sys.executable, "-c", WORKER, url, prefix, mine, theirs],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for mine, theirs in (("EUR", "USD"), ("USD", "EUR"))
    }
    for mine, worker in workers.items():
        out, err = worker.communicate(timeout=60)
        assert worker.returncode == 0, err
        theirs = "USD" if mine == "EUR" else "EUR"
        assert json.loads(out) == {
            "payload": {"ccy": theirs, "written_by": theirs},
            "up_to_date": False,
        }


def test_a_batch_read_decodes_each_row_with_its_own_times_type_and_label(
    make: Callable[..., SqlStore], clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    store = make()
    now = clock()
    later = now + timedelta(seconds=5)
    store.store_many(
        [
            ReferentialPayload("n", "a", {"v": 1}, now, now + timedelta(hours=1), True, label="A"),
            ReferentialPayload("n", "b", [1, 2], now, now + timedelta(hours=1), True),
            ReferentialPayload("n", "c", "text", later, later + timedelta(hours=2), True),
        ]
    )
    write_row(store, "n", "mistyped", "json:[1]")  # says builtins.dict, holds a list
    found = store.find_many("n", ["a", "mistyped", "b", "c"])
    assert sorted(found) == ["a", "b", "c"]  # the mistyped row skipped, the others decoded
    assert (found["a"].payload, found["a"].label, found["a"].as_of) == ({"v": 1}, "A", now)
    assert (found["b"].payload, found["b"].label) == ([1, 2], None)
    assert (found["c"].payload, found["c"].as_of) == ("text", later)
    assert found["c"].expire_on == later + timedelta(hours=2)
    assert "skipped" in caplog.text
