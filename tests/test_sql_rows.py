"""Rows a `SqlStore` must not trust: NULL times, rows moved between entries, rows of earlier
versions, and a thousand random corrupt rows written through the store's own table."""

from __future__ import annotations

import base64
import json
import logging
import os
import pickle
import random
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

import failover
from failover.errors import SerializationError
from failover.keys import make_key
from failover.serialization.base import type_name
from failover.serialization.binding import entry_binding
from failover.serialization.crypto import FernetCipher
from failover.serialization.pickle_codec import PickleCodec
from failover.serialization.rows import Serializer
from failover.stores.backends.sql import SqlStore

from . import postgres
from .conftest import FakeClock, Upstream
from .test_sql_store import (  # noqa: F401 - the fixtures backend, db_engine and make
    backend_fixture,
    db_engine_fixture,
    make_fixture,
)

PICKLE_KEY = b"test signing key"
FERNET_KEY = FernetCipher.generate_key()


def options(config: str) -> dict[str, Any]:
    """The store options of a configuration: its codec and cipher."""
    out: dict[str, Any] = {}
    if "pickle" in config:
        out["codec"] = PickleCodec(PICKLE_KEY)
    if "fernet" in config:
        out["cipher"] = FernetCipher(FERNET_KEY)
    return out


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


def errors(registry: CollectorRegistry, name: str) -> float:
    value = registry.get_sample_value(
        "failover_recoveries_total", {"name": name, "outcome": "error"}
    )
    return value or 0.0


class Exploit:
    """Unpickling it writes a file: proof, when the file is missing, that no row ran code."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (Path.write_text, (self.path, "pwned"))


class ShellExploit(Exploit):
    """Unpickling it runs a shell command that creates the file."""

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (f"touch {self.path}",))


def profiles(
    store: SqlStore, clock: FakeClock, upstream: Upstream, registry: CollectorRegistry
) -> tuple[failover.Failover, Any]:
    engine = failover.Failover(store, clock=clock, async_writes=False, metrics=registry)

    @failover.failover("crm.profile", engine=engine, policy="never_throw")
    def profile(customer: int) -> dict[str, Any]:
        return upstream({"customer": customer, "email": f"c{customer}@example.com"})  # type: ignore[return-value]

    return engine, profile


def key_of(customer: int) -> str:
    return make_key("crm.profile", (customer,))


# -- NULL times -----------------------------------------------------------------------------------


def earlier_table(engine: sa.Engine, prefix: str) -> None:
    """The table as earlier versions created it: ``as_of`` and ``expire_on`` may be NULL."""
    name = f"{prefix}failover_store"
    table = sa.Table(
        name,
        sa.MetaData(),
        sa.Column("name", sa.String(255), primary_key=True),
        sa.Column("key", sa.String(255), primary_key=True),
        sa.Column("as_of", sa.BigInteger),
        sa.Column("expire_on", sa.BigInteger),
        sa.Column("payload", sa.Text, nullable=False),
        sa.Column("payload_type", sa.String(255), nullable=False),
        sa.Index(f"{name}_expire_on", "expire_on"),
    )
    table.metadata.create_all(engine)


def test_a_table_of_an_earlier_version_works_and_its_null_times_are_misses(
    make: Callable[..., SqlStore],
    db_engine: sa.Engine,
    clock: FakeClock,
    upstream: Upstream,
    registry: CollectorRegistry,
    caplog: pytest.LogCaptureFixture,
) -> None:
    prefix = postgres.unique_prefix()
    earlier_table(db_engine, prefix)
    store = make(table_prefix=prefix)
    engine, profile = profiles(store, clock, upstream, registry)
    table = store.table
    with engine:
        for customer in (1, 2, 3):
            profile(customer)
        with store.engine.begin() as conn:
            for customer, column in ((2, "as_of"), (3, "expire_on")):
                conn.execute(
                    table.update().where(table.c.key == key_of(customer)).values({column: None})
                )
        upstream.fail()
        assert profile.referential(1).payload == {"customer": 1, "email": "c1@example.com"}
        assert profile(2) is None
        assert profile(3) is None
        assert errors(registry, "crm.profile") == 2
        for customer in (2, 3):
            with pytest.raises(
                SerializationError, match="corrupt times: as_of or expire_on is NULL"
            ):
                store.find("crm.profile", key_of(customer))
        keys = [key_of(c) for c in (1, 2, 3)]
        assert list(store.find_many("crm.profile", keys)) == [key_of(1)]
        assert [p.key for p in store.find_all("crm.profile")] == [key_of(1)]
        assert caplog.text.count("is NULL; skipped") == 4
        # Cleanup removes the row that has no expiry; the others have not expired yet.
        assert store.clean_by_expiry(clock()) == 1
        with store.engine.connect() as conn:
            left = set(conn.execute(sa.select(table.c.key)).scalars())
        assert left == {key_of(1), key_of(2)}


# -- rows moved between entries -------------------------------------------------------------------

AUTHENTICATED = ["pickle", "fernet", "pickle+fernet"]


@pytest.mark.parametrize("config", AUTHENTICATED)
def test_a_row_moved_under_another_entrys_key_is_a_miss(
    config: str,
    make: Callable[..., SqlStore],
    clock: FakeClock,
    upstream: Upstream,
    registry: CollectorRegistry,
) -> None:
    store = make(**options(config))
    engine, profile = profiles(store, clock, upstream, registry)
    table, c = store.table, store.table.c
    with engine:
        profile(1)
        profile(2)
        with store.engine.begin() as conn:
            one = conn.execute(
                sa.select(c.payload, c.payload_type, c.as_of, c.expire_on).where(c.key == key_of(1))
            ).one()
            row = dict(one._mapping)
            # 1's row over 2's, under a key never stored (3), and under another name.
            conn.execute(table.update().where(c.key == key_of(2)).values(row))
            conn.execute(table.insert().values(name="crm.profile", key=key_of(3), **row))
            conn.execute(table.insert().values(name="crm.other", key=key_of(1), **row))
        upstream.fail()
        assert profile(1) == {"customer": 1, "email": "c1@example.com"}
        assert profile(2) is None
        assert profile(3) is None
        assert errors(registry, "crm.profile") == 2
        moved = "moved from another entry" if config == "pickle" else "belongs to another entry"
        for name, customer in (("crm.profile", 2), ("crm.profile", 3), ("crm.other", 1)):
            with pytest.raises(SerializationError, match=moved):
                store.find(name, key_of(customer))
        keys = [key_of(c) for c in (1, 2, 3)]
        assert list(store.find_many("crm.profile", keys)) == [key_of(1)]
        assert [p.key for p in store.find_all("crm.profile")] == [key_of(1)]
        assert store.find_all("crm.other") == []


@pytest.mark.parametrize("config", AUTHENTICATED)
def test_rows_written_before_entry_binding_are_misses(
    config: str, make: Callable[..., SqlStore], clock: FakeClock
) -> None:
    """Signed and encrypted rows of earlier versions cover no entry: a miss until stored again.
    (Plain JSON rows carry no signature, and stay readable.)"""
    store = make(**options(config))
    text, payload_type = json.dumps({"v": 1}), "builtins.dict"
    text = "json:" + text
    if "pickle" in config:
        text = "pickle:" + PickleCodec(PICKLE_KEY).encode({"v": 1})[0]  # signed, no binding
    if "fernet" in config:
        text = f"ENC(fernet:{FernetCipher(FERNET_KEY).encrypt(text)})"  # encrypted, no binding
    write(store, "n", "old", text, payload_type, clock)
    with pytest.raises(SerializationError, match="an earlier version wrote it"):
        store.find("n", "old")
    store.store(failover.ReferentialPayload("n", "old", {"v": 2}, clock(), clock() + HOUR, True))
    found = store.find("n", "old")
    assert found is not None
    assert found.payload == {"v": 2}


# -- a thousand random corrupt rows ---------------------------------------------------------------

HOUR = timedelta(hours=1)
Row = dict[str, Any]


def micros(when: datetime) -> int:
    return (when - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)


def row(name: str, key: str, payload: Any, payload_type: Any, clock: FakeClock) -> Row:
    now = micros(clock())
    return {
        "name": name,
        "key": key,
        "as_of": now,
        "expire_on": now + HOUR // timedelta(microseconds=1),
        "payload": payload,
        "payload_type": payload_type,
    }


def write(
    store: SqlStore, name: str, key: str, payload: Any, payload_type: Any, clock: FakeClock
) -> None:
    """One row written by hand, bypassing the store's codec."""
    with store.engine.begin() as conn:
        conn.execute(store.table.insert(), row(name, key, payload, payload_type, clock))


FOREIGN = [
    "os.system",
    "posix.system",
    "subprocess.Popen",
    "builtins.eval",
    "builtins.exec",
    "pickle.loads",
    "tests.test_sql_rows.Exploit",
    "tests.test_sql_rows.ShellExploit",
    "failover.stores.backends.sql.SqlStore",
]


class CorruptRows:
    """Random rows that must never decode, for the entries of one store (seeded: repeatable)."""

    def __init__(self, config: str, marker: Path, clock: FakeClock, blobs: bool) -> None:
        self.rng = random.Random(f"{config} 10")
        self.config = config
        self.rows = Serializer(**options(config))
        self.sealer = Serializer(cipher=FernetCipher(FERNET_KEY))
        self.marker = marker
        self.clock = clock
        self.blobs = blobs  # SQLite keeps bytes in a TEXT column; PostgreSQL takes text only
        self.kinds = [
            self.random_bytes,
            self.marker_then_bytes,
            self.foreign_type,
            self.truncated_ciphertext,
            self.wrong_type_column,
            self.pickle_exploit,
            self.corrupt_times,
        ]
        if config != "json":  # plain JSON rows carry no signature: edits and moves go unseen
            self.kinds += [self.moved, self.flipped]

    def __call__(self, name: str, key: str) -> Row:
        return self.rng.choice(self.kinds)(name, key)

    def text(self, size: int = 120) -> str:
        raw = self.rng.randbytes(self.rng.randrange(size))
        return raw.decode("latin-1").replace("\0", "")

    def honest(self, name: str, key: str) -> tuple[str, str]:
        value = {"customer": self.rng.randrange(10**6), "tags": [self.text(8)]}
        return self.rows.dump(name, key, value)

    def random_bytes(self, name: str, key: str) -> Row:
        payload: Any = self.rng.randbytes(self.rng.randrange(200))
        if not self.blobs or self.rng.random() < 0.5:
            payload = payload.decode("latin-1").replace("\0", "")
        return row(name, key, payload, self.text(40), self.clock)

    def marker_then_bytes(self, name: str, key: str) -> Row:
        start = self.rng.choice(["json:", "pickle:", "ENC(fernet:", "ENC(", 'json:{"__t":'])
        end = self.rng.choice(["", ")", "}", '"}'])
        return row(name, key, start + self.text() + end, "builtins.dict", self.clock)

    def foreign_type(self, name: str, key: str) -> Row:
        tagged = {"__t": self.rng.choice(FOREIGN), "v": [self.text(20), {"path": str(self.marker)}]}
        value = self.rng.choice([tagged, [tagged], {"a": tagged}])
        text = "json:" + json.dumps(value)
        if self.rng.random() < 0.5:  # sealed for this very entry: the allowlist still refuses
            text = seal_for(name, key, text)
        return row(name, key, text, "builtins.dict", self.clock)

    def truncated_ciphertext(self, name: str, key: str) -> Row:
        text, payload_type = self.sealer.dump(name, key, {"v": 1})
        cut = text[: self.rng.randrange(len("ENC(fernet:"), len(text) - 1)]
        return row(name, key, cut + self.rng.choice(["", ")"]), payload_type, self.clock)

    def wrong_type_column(self, name: str, key: str) -> Row:
        text, _ = self.honest(name, key)  # a row good for this entry, but for its type column
        payload_type: Any = self.rng.choice(["builtins.list", "builtins.str", self.text(40)])
        if self.blobs and self.rng.random() < 0.3:
            payload_type = self.rng.randbytes(20)
        return row(name, key, text, payload_type, self.clock)

    def pickle_exploit(self, name: str, key: str) -> Row:
        exploit = self.rng.choice([Exploit, ShellExploit])(self.marker)
        data = pickle.dumps(exploit)
        how = self.rng.choice(["unsigned", "random mac", "other key", "other entry"])
        if how == "other entry":  # signed with the right key, for another entry
            text = PickleCodec(PICKLE_KEY).encode(exploit, entry_binding(name, key + "x"))[0]
        elif how == "other key":
            text = PickleCodec(b"another key").encode(exploit, entry_binding(name, key))[0]
        else:
            mac = self.rng.randbytes(32) if how == "random mac" else b""
            text = base64.b64encode(mac + data).decode()
        text = "pickle:" + text
        if "fernet" in self.config and self.rng.random() < 0.5:
            text = seal_for(name, key, text)  # decrypts fine: the signature still refuses
        return row(name, key, text, type_name(type(exploit)), self.clock)

    def corrupt_times(self, name: str, key: str) -> Row:
        out = row(name, key, *self.honest(name, key), self.clock)
        out[self.rng.choice(["as_of", "expire_on"])] = self.rng.choice([2**62, -(2**62)])
        return out

    def moved(self, name: str, key: str) -> Row:
        other = self.rng.choice([(name, key + "0"), (name + ".other", key), ("", name + key)])
        return row(name, key, *self.honest(*other), self.clock)

    def flipped(self, name: str, key: str) -> Row:
        text, payload_type = self.honest(name, key)
        body = text.index(":") + 1 if text.startswith("pickle:") else len("ENC(fernet:")
        at = body + self.rng.randrange(40)  # within the signature or the token's head
        alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
        new = self.rng.choice([c for c in alphabet if c != text[at]])
        return row(name, key, text[:at] + new + text[at + 1 :], payload_type, self.clock)


def seal_for(name: str, key: str, text: str) -> str:
    from failover.serialization.crypto import seal

    return seal(FernetCipher(FERNET_KEY), text, entry_binding(name, key))


class Counted(logging.Handler):
    """Counts the library's warnings without formatting them (a thousand tracebacks, formatted
    by pytest's capture, would take seconds)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@contextmanager
def counted_warnings() -> Iterator[Counted]:
    logger = logging.getLogger("failover")
    handler, propagate = Counted(), logger.propagate
    logger.addHandler(handler)
    logger.propagate = False
    try:
        yield handler
    finally:
        logger.propagate = propagate
        logger.removeHandler(handler)


CONFIGS = ["json", "fernet", "pickle", "pickle+fernet"]
PER_CONFIG = 250  # x 4 configurations: 1,000 rows


def test_a_thousand_random_corrupt_rows_are_misses_and_never_run_code(
    make: Callable[..., SqlStore],
    backend: str,
    clock: FakeClock,
    upstream: Upstream,
    registry: CollectorRegistry,
    tmp_path: Path,
) -> None:
    marker = tmp_path / "pwned"
    base = postgres.unique_prefix()
    for config in CONFIGS:
        store = make(table_prefix=f"{base}{config.replace('+', '_')}_", **options(config))
        engine = failover.Failover(store, clock=clock, async_writes=False, metrics=registry)
        name = f"fuzz.{config}"

        @failover.failover(name, engine=engine, policy="never_throw")
        def fetch(i: int) -> dict[str, Any]:
            return upstream({"i": i})  # type: ignore[return-value]

        corrupt = CorruptRows(config, marker, clock, blobs=backend == "sqlite")
        keys = [make_key(name, (i,)) for i in range(PER_CONFIG)]
        with store.engine.begin() as conn:
            conn.execute(store.table.insert(), [corrupt(name, key) for key in keys])
        for key in keys:
            with pytest.raises(SerializationError):
                store.find(name, key)
        with counted_warnings() as logged:
            assert store.find_many(name, keys) == {}
            assert store.find_all(name) == []
            upstream.fail()
            with engine:
                assert [fetch(i) for i in range(PER_CONFIG)] == [None] * PER_CONFIG
            upstream.recover()
        assert errors(registry, name) == PER_CONFIG
        skipped = [m for m in logged.messages if m.endswith("; skipped")]
        assert len(skipped) == 2 * PER_CONFIG  # by find_many, then find_all
        # and the failed recoveries, once (then once a minute: failover.logs), with the
        # failover's state change
        assert 1 <= len(logged.messages) - len(skipped) <= 3
        assert not marker.exists()


# -- property: arbitrary bytes in the payload or the type column ----------------------------------


def test_arbitrary_payload_and_type_columns_are_misses(tmp_path: Path, clock: FakeClock) -> None:
    stores = {
        c: SqlStore(f"sqlite:///{tmp_path / 'f.db'}", table_prefix=c, **options(c))
        for c in ("json", "pickle_fernet")
    }
    text = st.text(st.characters(exclude_categories=["Cs"]))
    cells = (
        st.binary()
        | text
        | text.map(lambda t: "json:" + t)
        | text.map(lambda t: f"ENC(fernet:{t})")
    )

    @settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(cells, st.binary(max_size=300) | text)
    def check(payload: Any, payload_type: Any) -> None:
        for store in stores.values():
            with store.engine.begin() as conn:
                conn.execute(store.table.delete())
            write(store, "n", "k", payload, payload_type, clock)
            try:
                found = store.find("n", "k")
            except SerializationError:
                continue
            # Only a well-formed plain JSON row of the type its column names is served.
            assert isinstance(payload, str)
            assert found is not None
            assert type_name(type(found.payload)) == payload_type
            assert payload.startswith("json:")

    check()
    for store in stores.values():
        store.close()
