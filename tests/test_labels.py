"""Readable labels of stored entries (``@failover(..., label=...)``): off by default, the call's
arguments rendered (bounded, printable), per slice for scatter/gather; kept by every store (the
contract suite's ``test_labels_are_kept_and_listed``), in tables and values of earlier versions
too; shown by ``failover inspect`` (the dashboard's page: tests/test_browser.py)."""

from __future__ import annotations

import dataclasses
import logging
import sqlite3
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import sqlalchemy as sa

import failover
from failover import ConfigurationError, Failover, ListSplitter
from failover.cli import main
from failover.labels import LABEL_MAX
from failover.stores.backends.sql import SqlStore, make_engine
from failover.stores.backends.sql.table import make_table

from . import postgres, redis_server
from .conftest import FakeClock


@pytest.fixture
def sqlite(tmp_path: Path) -> Iterator[SqlStore]:
    store = SqlStore(f"sqlite:///{tmp_path / 'store.db'}")
    yield store
    store.close()


def labels(store: Any, name: str) -> dict[str, str | None]:
    """The labels of ``name``'s entries as the store lists them, by key."""
    return {e.key: e.label for e in store.page(name, None, 100).entries}


# -- the setting ----------------------------------------------------------------------------------


def test_off_by_default_nothing_is_stored(sqlite: SqlStore, clock: FakeClock) -> None:
    engine = Failover(sqlite, clock=clock, metrics=False, async_writes=False, store_timeout=None)

    @failover.failover("accounts", engine=engine)
    def account(email: str) -> dict[str, str]:
        return {"plan": "pro"}

    account("ada@example.com")
    assert account.peek("ada@example.com").label is None  # type: ignore[union-attr]
    assert list(labels(sqlite, "accounts").values()) == [None]
    with sqlite.engine.connect() as conn:  # the row itself: no argument kept anywhere
        row = conn.execute(sa.text("SELECT * FROM failover_store")).one()
    assert row.label is None
    assert "ada" not in repr(tuple(row))
    engine.close()


def test_label_true_renders_the_call(sqlite: SqlStore, clock: FakeClock) -> None:
    engine = Failover(sqlite, clock=clock, metrics=False, async_writes=False, store_timeout=None)

    @failover.failover("countries", engine=engine, label=True)
    def country(code: str, lang: str = "en") -> dict[str, str]:
        return {"code": code}

    class Client:
        @failover.failover("rates", engine=engine, label=True)
        def rate(self, base: str, *, to: str) -> float:
            return 1.08

    country("FR")
    country(code="DE", lang="de")
    Client().rate("EUR", to="USD")
    assert sorted(labels(sqlite, "countries").values()) == [  # type: ignore[type-var]
        "country(code='DE', lang='de')",
        "country(code='FR', lang='en')",
    ]
    assert list(labels(sqlite, "rates").values()) == ["rate(base='EUR', to='USD')"]  # no self
    found = country.peek("FR")
    assert found is not None
    assert found.label == "country(code='FR', lang='en')"
    engine.close()


def test_a_label_callable_chooses_what_is_shown(engine: Failover) -> None:
    @failover.failover("sessions", engine=engine, label=lambda user, token: user)
    def session(user: str, token: str) -> int:
        return 1

    @failover.failover("orders", engine=engine, label=lambda order_id: ("order", order_id))
    def order(order_id: int) -> int:
        return 2

    session("ada", "s3cr3t-t0ken")
    order(42)
    assert list(labels(engine.raw_store, "sessions").values()) == ["ada"]  # the token is not
    assert list(labels(engine.raw_store, "orders").values()) == ["('order', 42)"]


@dataclasses.dataclass(frozen=True, repr=False)
class Opaque:  # object's repr: an address
    id: int


@dataclasses.dataclass(frozen=True)
class Broken:  # keyed by its fields, as dataclasses are; its repr fails
    id: int

    def __repr__(self) -> str:
        raise RuntimeError("no repr today")


def test_labels_are_bounded_printable_and_never_fail(engine: Failover) -> None:
    @failover.failover("anything", engine=engine, label=True)
    def anything(value: object) -> int:
        return 1

    for value in ("x" * 10_000, "line\nbreak\x1b[2J", Opaque(1), Broken(2), list(range(1000))):
        anything(value)
    shown = sorted(v or "" for v in labels(engine.raw_store, "anything").values())
    assert all(len(label) <= LABEL_MAX and label.isprintable() for label in shown)
    assert "anything(value=<Broken>)" in shown
    assert "anything(value=<Opaque>)" in shown  # no address
    assert "anything(value=[0, 1, 2, 3, 4, 5, ...])" in shown
    assert "anything(value='line\\nbreak\\x1b[2J')" in shown
    assert any(label.startswith("anything(value='xxx") and "..." in label for label in shown)


def test_a_failing_label_callable_stores_the_entry_without_a_label(
    engine: Failover, caplog: pytest.LogCaptureFixture
) -> None:
    @failover.failover("flaky-label", engine=engine, label=lambda code: 1 / 0)
    def country(code: str) -> str:
        return code

    with caplog.at_level(logging.WARNING, "failover.labels"):
        assert country("FR") == "FR"
        assert country("DE") == "DE"
    assert sorted(labels(engine.raw_store, "flaky-label").values(), key=str) == [None, None]
    warned = [r.getMessage() for r in caplog.records if r.name == "failover.labels"]
    assert len(warned) == 1  # once per failover
    assert "'flaky-label'" in warned[0]
    assert "ZeroDivisionError" in warned[0]


@pytest.mark.parametrize("bad", ["yes", 1, 0.5, Opaque])
def test_a_bad_label_setting_is_refused_at_decoration(bad: object) -> None:
    with pytest.raises(ConfigurationError, match=r"failover 'named': label= must be True"):
        failover.failover("named", label=bad)(lambda code: code)


def test_slices_are_labelled_by_their_item_key(engine: Failover) -> None:
    @failover.failover("countries", engine=engine, splitter=ListSplitter("code"), label=True)
    def countries(codes: str) -> list[dict[str, str]]:
        return [{"code": c} for c in codes.split(",")]

    @failover.failover(
        "cities", engine=engine, splitter=ListSplitter("id"), label=lambda id: f"city #{id}"
    )
    def cities(ids: list[int]) -> list[dict[str, int]]:
        return [{"id": i} for i in ids]

    countries("FR,DE")
    cities([7, 8])
    assert sorted(labels(engine.raw_store, "countries").values()) == [  # type: ignore[type-var]
        "countries['DE']",
        "countries['FR']",
    ]
    assert sorted(labels(engine.raw_store, "cities").values()) == [  # type: ignore[type-var]
        "city #7",
        "city #8",
    ]


# -- SQL tables made by earlier versions ----------------------------------------------------------


def earlier_table(engine: sa.Engine, prefix: str) -> None:
    """The table as the versions before labels made it: no ``label`` column."""
    make_table(None, prefix, label=False).metadata.create_all(engine)
    assert columns(engine, prefix) == {
        *("name", "key", "as_of", "expire_on", "payload", "payload_type")
    }


def columns(engine: sa.Engine, prefix: str) -> set[str]:
    return {c["name"] for c in sa.inspect(engine).get_columns(f"{prefix}failover_store")}


@pytest.fixture(params=["sqlite", "postgresql"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[sa.Engine, str]]:
    """A database holding a table of an earlier version: a SQLite file, or a table of the
    session's PostgreSQL; and the table's prefix."""
    if request.param == "postgresql":
        engine, prefix = postgres.engine(), postgres.unique_prefix()
    else:
        engine, prefix = make_engine(f"sqlite:///{tmp_path / 'earlier.db'}"), ""
    earlier_table(engine, prefix)
    yield engine, prefix
    if request.param == "sqlite":
        engine.dispose()


def a_labelled_failover(store: SqlStore, clock: FakeClock) -> tuple[Failover, Any]:
    engine = Failover(store, clock=clock, metrics=False, async_writes=False, store_timeout=None)

    @failover.failover("countries", engine=engine, label=True)
    def country(code: str) -> dict[str, str]:
        return {"code": code}

    return engine, country


def test_a_table_of_an_earlier_version_gets_the_label_column(
    db: tuple[sa.Engine, str], clock: FakeClock
) -> None:
    engine, prefix = db
    old = SqlStore(engine, table_prefix=prefix, create_table=False)  # rows of the old schema
    old_engine, old_country = a_labelled_failover(old, clock)
    old_country("DE")
    assert labels(old, "countries") == {next(iter(labels(old, "countries"))): None}
    assert "label" not in columns(engine, prefix)

    store = SqlStore(engine, table_prefix=prefix)  # creates its table: adds the column
    assert "label" in columns(engine, prefix)
    app, country = a_labelled_failover(store, clock)
    country("FR")
    shown = labels(store, "countries")
    assert sorted(shown.values(), key=lambda label: label or "") == [
        None,  # stored before: no label, read as it is
        "country(code='FR')",
    ]
    assert country.peek("DE") == old_country.peek("DE")
    old_country("IT")  # a process of the earlier kind still writes (its columns by name)
    assert old_country.peek("IT") is not None
    app.close()
    old_engine.close()


def test_a_table_left_as_it_is_works_without_labels(
    db: tuple[sa.Engine, str], clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    engine, prefix = db
    with caplog.at_level(logging.WARNING, "failover.stores.backends.sql.table"):
        store = SqlStore(engine, table_prefix=prefix, create_table=False)
    assert any("has no column 'label'" in r.getMessage() for r in caplog.records)
    app, country = a_labelled_failover(store, clock)
    assert country("FR") == {"code": "FR"}
    found = country.peek("FR")
    assert found is not None
    assert found.label is None
    assert store.find_many("countries", [found.key])[found.key].payload == {"code": "FR"}
    assert list(labels(store, "countries").values()) == [None]
    assert "label" not in columns(engine, prefix)
    app.close()


@pytest.fixture
def refusing_database() -> Iterator[sa.Engine]:
    """A PostgreSQL database of its own where an event trigger refuses ``ALTER TABLE`` (as a
    database whose schema only migrations may change)."""
    server = postgres.server()
    name = f"refusing_{uuid.uuid4().hex[:8]}"
    admin = sa.create_engine(
        server.url.rsplit("/", 1)[0] + "/postgres", isolation_level="AUTOCOMMIT"
    )
    with admin.connect() as conn:
        conn.exec_driver_sql(f"CREATE DATABASE {name}")
    engine = make_engine(server.url.rsplit("/", 1)[0] + f"/{name}")
    with engine.begin() as conn:
        conn.exec_driver_sql(
            "CREATE FUNCTION refuse() RETURNS event_trigger LANGUAGE plpgsql AS "
            "$$ BEGIN RAISE EXCEPTION 'schema changes go through migrations'; END $$"
        )
        conn.exec_driver_sql(
            "CREATE EVENT TRIGGER refuse_alter ON ddl_command_start "
            "WHEN TAG IN ('ALTER TABLE') EXECUTE FUNCTION refuse()"
        )
    try:
        yield engine
    finally:
        engine.dispose()
        with admin.connect() as conn:
            conn.exec_driver_sql(f"DROP DATABASE {name} WITH (FORCE)")
        admin.dispose()


def test_a_database_refusing_the_column_works_without_labels(
    refusing_database: sa.Engine, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    earlier_table(refusing_database, "")
    with caplog.at_level(logging.WARNING, "failover.stores.backends.sql.table"):
        store = SqlStore(refusing_database)
    (warning,) = [r.getMessage() for r in caplog.records if "label" in r.getMessage()]
    assert "refused to add it" in warning
    assert "schema changes go through migrations" in warning
    app, country = a_labelled_failover(store, clock)
    country("FR")
    found = country.peek("FR")
    assert found is not None
    assert (found.payload, found.label) == ({"code": "FR"}, None)
    assert list(labels(store, "countries").values()) == [None]
    app.close()


# -- Redis values of earlier versions -------------------------------------------------------------


def test_redis_values_without_a_label_are_as_earlier_versions_wrote_them(
    clock: FakeClock,
) -> None:
    from failover.stores.backends.redis import RedisStore

    prefix = redis_server.unique_prefix()
    store = RedisStore(redis_server.server().url, prefix=prefix, clock=clock)
    engine = Failover(store, clock=clock, metrics=False, async_writes=False, store_timeout=None)

    @failover.failover("countries", engine=engine, label=True)
    def labelled(code: str) -> str:
        return code

    @failover.failover("plain", engine=engine)
    def plain(code: str) -> str:
        return code

    labelled("FR")
    plain("FR")
    client = redis_server.server().client()
    raw = {
        name: client.get(f"{prefix}e:{quote(name, safe='')}:{e.key}")
        for name in ("countries", "plain")
        for e in store.page(name, None, 10).entries
    }
    header, _, body = raw["plain"].partition(b"\n")
    assert b"\t" not in header
    assert len(header.split(b" ")) == 3
    assert raw["countries"].startswith(header.replace(b"builtins.str", b"builtins.str\t"))
    assert raw["countries"].partition(b"\n")[0].endswith(b"\tlabelled(code='FR')")

    # A value an earlier version wrote (the header's three fields) reads, without a label.
    key = f"{prefix}e:plain:earlier"
    client.set(key, header + b"\n" + body)
    found = store.find("plain", "earlier")
    assert found is not None
    assert (found.payload, found.label) == ("FR", None)
    client.close()
    engine.close()


# -- the command line -----------------------------------------------------------------------------


def test_inspect_prints_the_labels(
    tmp_path: Path, clock: FakeClock, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    engine = Failover(url, metrics=False, async_writes=False, store_timeout=None)

    @failover.failover("countries", engine=engine, label=True)
    def country(code: str) -> str:
        return code

    @failover.failover("plain", engine=engine)
    def plain(code: str) -> str:
        return code

    country("FR")
    plain("secret")
    engine.close()
    assert main(["inspect", "--store", url]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].split()[:3] == ["name", "key", "label"]
    (fr,) = [line for line in lines if line.startswith("countries")]
    assert "country(code='FR')" in fr
    assert "secret" not in out  # an unlabelled entry shows its digest only
    with sqlite3.connect(tmp_path / "store.db") as conn:
        assert (
            conn.execute("SELECT count(*) FROM failover_store WHERE label IS NULL").fetchone()[0]
            == 1
        )
    conn.close()
    assert main(["inspect", "--store", url, "--name", "plain"]) == 0
    assert "label" not in capsys.readouterr().out.splitlines()[0]  # no labels: no column
