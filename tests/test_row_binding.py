"""Protected rows (encrypted with `FernetCipher`, or signed by `PickleCodec`) are bound to their
store, and a store that protects its rows trusts nothing else (issue 27, docs/security.md).

Every test writes rows behind the library's back, as a writer of the table (or of the Redis
database) can, on real stores: SQLite files, the suite's PostgreSQL server and its
redis-server. The reads go through decorated calls whose upstream is down, sync and async (on
PostgreSQL and Redis the async calls read on the event loop).

- A row copied from one tenant's store into another's (two SQLite files with the same table
  name, two PostgreSQL tables, two Redis key prefixes), or between two tables or two key
  prefixes of stores without tenants, is a miss there, logged and counted as a recover
  ``error``.
- A plain row (neither encrypted nor signed) put in a protected store is a miss by default,
  and served only with ``accept_plain=True``.
- A row longer than ``max_row_bytes`` is a miss, counted, and never reaches the codec or the
  cipher (codecs and a cipher that record what they are given prove it); a value that encodes
  longer is not written.
"""

from __future__ import annotations

import asyncio
import logging
from contextlib import nullcontext
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from prometheus_client import CollectorRegistry

import failover
from failover import Failover
from failover.errors import ConfigurationError, SerializationError, StoreError
from failover.keys import make_key
from failover.payload import ReferentialPayload
from failover.serialization.crypto import FernetCipher
from failover.serialization.json_codec import JsonCodec
from failover.serialization.pickle_codec import PickleCodec
from failover.stores import MultiTenantStore, per_tenant_tables
from failover.stores.backends.redis import RedisStore
from failover.stores.backends.redis.client import Keys
from failover.stores.backends.sql import SqlStore, per_tenant_databases
from failover.stores.base import walk
from failover.stores.factory import make_store, per_tenant
from failover.stores.opening import open_shared

from . import postgres, redis_server
from .conftest import FakeClock

PICKLE_KEY = b"the signing key of the row binding tests"
FERNET_KEY = FernetCipher.generate_key()
KINDS = ["sync", "async"]
CONFIGS = ["fernet", "pickle"]
DOMAIN = "profile"
ALICE = make_key(DOMAIN, ("alice",))
BOB = make_key(DOMAIN, ("bob",))
HOUR_MS = 3_600_000


def protection(config: str) -> dict[str, Any]:
    """The store options of a protected configuration."""
    if config == "fernet":
        return {"cipher": FernetCipher(FERNET_KEY)}
    return {"codec": PickleCodec(PICKLE_KEY)}


class Down(Exception):
    """The upstream's error."""


class Upstream:
    """Each tenant's profiles, until ``down``."""

    def __init__(self) -> None:
        self.down = False
        self.photo = 0  # characters of a photo added to each profile

    def __call__(self, user: str) -> dict[str, str]:
        if self.down:
            raise Down(user)
        tenant = failover.current_tenant() or "-"
        profile = {"user": user, "iban": f"{tenant.upper()}-{user.upper()}-IBAN"}
        return {**profile, "photo": "x" * self.photo} if self.photo else profile


class Service:
    """An engine on ``store`` with a sync and an async failover over one domain."""

    def __init__(self, store: Any, clock: FakeClock, tenants: bool = False) -> None:
        self.registry = CollectorRegistry()
        self.upstream = Upstream()
        self.engine = Failover(
            store,
            tenant_resolver=failover.current_tenant if tenants else None,
            clock=clock,
            async_writes=False,
            metrics=self.registry,
        )
        up = self.upstream

        @failover.failover("profile", domain=DOMAIN, engine=self.engine)
        def profile(user: str) -> dict[str, str]:
            return up(user)

        @failover.failover("aprofile", domain=DOMAIN, engine=self.engine)
        async def aprofile(user: str) -> dict[str, str]:
            return up(user)

        self.fns: dict[str, Any] = {"sync": profile, "async": aprofile}
        # What holds each event loop's connections (closed before the loop ends).
        self.loop_connections: Any = self.engine.store if tenants else store

    def call(self, kind: str, user: str, tenant: str | None = None) -> Any:
        """The call's value, or the exception it raised (async: on a loop of its own, whose
        connections are closed before it ends)."""
        with failover.tenant(tenant) if tenant else nullcontext():
            if kind == "sync":
                try:
                    return self.fns["sync"](user)
                except Exception as exc:
                    return exc

            async def run() -> Any:
                try:
                    return await self.fns["async"](user)
                except Exception as exc:
                    return exc
                finally:
                    await self.loop_connections.aclose()

            return asyncio.run(run())

    def errors(self, kind: str) -> float:
        name = "profile" if kind == "sync" else "aprofile"
        value = self.registry.get_sample_value(
            "failover_recoveries_total", {"name": name, "outcome": "error"}
        )
        return value or 0.0

    def close(self) -> None:
        self.engine.close()


def raw_store(store: Any) -> Any:
    """The `SqlStore` or `RedisStore` under a tenant's store chain."""
    return next(s for s in walk(store) if isinstance(s, SqlStore | RedisStore))


def tenant_store(service: Service, tenant: str) -> Any:
    router = service.engine.store
    assert isinstance(router, MultiTenantStore)
    return raw_store(router.stores[tenant])


# -- rows as stored, read and written behind the library's back -----------------------------------


def read_row(store: Any, name: str, key: str) -> Any:
    """The entry's row as stored: SQL's columns, or Redis's value."""
    if isinstance(store, SqlStore):
        t = store.table
        query = sa.select(t.c.payload, t.c.payload_type, t.c.as_of, t.c.expire_on).where(
            t.c.name == name, t.c.key == key
        )
        with store.engine.connect() as conn:
            row = conn.execute(query).one()
        return tuple(row)
    return store.client.get(Keys(store.prefix).entries(name) + key)


def write_row(store: Any, name: str, key: str, row: Any) -> None:
    """Put ``row`` (what `read_row` returns) as the entry's row."""
    if isinstance(store, SqlStore):
        t = store.table
        payload, payload_type, as_of, expire_on = row
        with store.engine.begin() as conn:
            conn.execute(t.delete().where(t.c.name == name, t.c.key == key))
            conn.execute(
                t.insert().values(
                    name=name,
                    key=key,
                    payload=payload,
                    payload_type=payload_type,
                    as_of=as_of,
                    expire_on=expire_on,
                )
            )
        return
    store.client.set(Keys(store.prefix).entries(name) + key, row, px=HOUR_MS)


def with_payload(store: Any, row: Any, payload: str, payload_type: str) -> Any:
    """``row`` with another payload and type, its times kept."""
    if isinstance(store, SqlStore):
        return (payload, payload_type, *row[2:])
    as_of, expire_on, _ = row.partition(b"\n")[0].split(b" ", 2)
    return b"%s %s %s\n%s" % (as_of, expire_on, payload_type.encode(), payload.encode())


def assert_miss(got: Any) -> None:
    """The default policy's answer to a miss: the upstream's own exception."""
    assert isinstance(got, Down), got


# -- a row copied to another tenant's store ------------------------------------------------------


def tenant_factory(backend: str, tmp_path: Path, clock: FakeClock, **options: Any) -> Any:
    """A factory ``tenant -> store`` of ``backend``, each tenant's store made with ``options``."""
    if backend == "sqlite-files":
        # One file per tenant, the same table name in each: only the tenant tells them apart.
        return per_tenant_databases(f"sqlite:///{tmp_path}/failover-{{tenant}}.db", **options)
    if backend == "sqlite-own-factory":
        # A factory of the user's, which knows nothing of binding: the router tells each store.
        return lambda tenant: SqlStore(f"sqlite:///{tmp_path}/own-{tenant}.db", **options)
    if backend == "postgresql-tables":
        prefixes = {"acme": postgres.unique_prefix(), "globex": postgres.unique_prefix()}
        return per_tenant_tables(postgres.engine(), prefixes, **options)
    return RedisStore.per_tenant(
        redis_server.server().url, prefix=redis_server.unique_prefix(), clock=clock, **options
    )


@pytest.fixture(
    params=["sqlite-files", "sqlite-own-factory", "postgresql-tables", "redis-prefixes"]
)
def tenant_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("kind", KINDS)
def test_a_protected_row_copied_into_another_tenants_store_is_a_miss_there(
    tenant_backend: str,
    config: str,
    kind: str,
    tmp_path: Path,
    clock: FakeClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    factory = tenant_factory(tenant_backend, tmp_path, clock, **protection(config))
    svc = Service(factory, clock, tenants=True)
    try:
        for tenant in ("acme", "globex"):
            svc.call("sync", "alice", tenant)  # each tenant's alice stored
        acme, globex = tenant_store(svc, "acme"), tenant_store(svc, "globex")
        assert (acme.tenant, globex.tenant) == ("acme", "globex")  # told by the router
        # A writer of globex's store copies acme's row of alice over globex's.
        write_row(globex, DOMAIN, ALICE, read_row(acme, DOMAIN, ALICE))
        svc.upstream.down = True

        with caplog.at_level(logging.WARNING):
            assert_miss(svc.call(kind, "alice", "globex"))
        assert svc.errors(kind) == 1
        assert "recovering failed" in caplog.text
        # The row itself is good: acme's own copy of it is served to acme.
        assert svc.call(kind, "alice", "acme") == {"user": "alice", "iban": "ACME-ALICE-IBAN"}
        assert svc.errors(kind) == 1
    finally:
        svc.close()


def test_the_binding_names_the_tenant_not_only_the_place(tmp_path: Path, clock: FakeClock) -> None:
    """Two tenants' stores on one table (a factory of your own may do that on purpose): a row
    sealed for one is refused by the other, though table, name and key are the same."""
    url = f"sqlite:///{tmp_path}/shared.db"
    acme = SqlStore(url, cipher=FernetCipher(FERNET_KEY), tenant="acme")
    globex = SqlStore(url, cipher=FernetCipher(FERNET_KEY))
    try:
        now = clock()
        acme.store(ReferentialPayload("n", "k", {"v": 1}, now, now + timedelta(hours=1), True))
        assert acme.find("n", "k") is not None
        globex.bind_tenant("globex")
        with pytest.raises(SerializationError, match="another store"):
            globex.find("n", "k")
        assert globex.find_many("n", ["k"]) == {}
    finally:
        acme.close()
        globex.close()


# -- a row copied to another table or key prefix, no tenants --------------------------------------


@pytest.fixture(params=["sqlite", "postgresql", "redis"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def single_store(backend: str, tmp_path: Path, clock: FakeClock, **options: Any) -> Any:
    """A store of ``backend`` without tenants, in a table (or under a key prefix) of its own
    (``table_prefix``/``prefix`` in ``options`` name the one to share)."""
    if backend == "sqlite":
        options.setdefault("table_prefix", "")
        return SqlStore(f"sqlite:///{tmp_path}/store.db", **options)
    if backend == "postgresql":
        options.setdefault("table_prefix", postgres.unique_prefix())
        return SqlStore(postgres.engine(), **options)
    options.setdefault("prefix", redis_server.unique_prefix())
    return RedisStore(redis_server.server().url, clock=clock, **options)


def place_option(backend: str) -> str:
    return "prefix" if backend == "redis" else "table_prefix"


def unique_place(backend: str, n: int) -> str:
    if backend == "redis":
        return redis_server.unique_prefix()
    return f"s{n}_" if backend == "sqlite" else postgres.unique_prefix()


@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("kind", KINDS)
def test_a_protected_row_copied_to_another_table_or_key_prefix_is_a_miss_there(
    backend: str, config: str, kind: str, tmp_path: Path, clock: FakeClock
) -> None:
    option = place_option(backend)
    first = single_store(
        backend, tmp_path, clock, **{option: unique_place(backend, 1)}, **protection(config)
    )
    second = single_store(
        backend, tmp_path, clock, **{option: unique_place(backend, 2)}, **protection(config)
    )
    one, other = Service(first, clock), Service(second, clock)
    try:
        one.call("sync", "alice")
        other.call("sync", "bob")
        write_row(second, DOMAIN, ALICE, read_row(first, DOMAIN, ALICE))
        one.upstream.down = other.upstream.down = True
        assert_miss(other.call(kind, "alice"))
        assert other.errors(kind) == 1
        assert other.call(kind, "bob") == {"user": "bob", "iban": "--BOB-IBAN"}
        assert one.call(kind, "alice") == {"user": "alice", "iban": "--ALICE-IBAN"}
    finally:
        one.close()
        other.close()
        first.close()
        second.close()


def test_a_store_is_never_bound_to_two_tenants(tmp_path: Path, clock: FakeClock) -> None:
    """A factory handing one store to several tenants would mix their entries: the router
    refuses it for the second tenant."""
    shared = SqlStore(f"sqlite:///{tmp_path}/one.db", cipher=FernetCipher(FERNET_KEY))
    router = MultiTenantStore(lambda tenant: shared)
    try:
        assert router.store_for("acme") is shared
        assert shared.tenant == "acme"
        with pytest.raises(StoreError, match="serves tenant 'acme'"):
            router.store_for("globex")
    finally:
        shared.close()


# -- plain rows in a protected store --------------------------------------------------------------

FORGED = '{"user":"alice","iban":"XX00-ATTACKER"}'


@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("kind", KINDS)
def test_a_plain_row_in_a_protected_store_is_a_miss_unless_accept_plain(
    backend: str, config: str, kind: str, tmp_path: Path, clock: FakeClock
) -> None:
    option = place_option(backend)
    place = unique_place(backend, 1)
    store = single_store(backend, tmp_path, clock, **{option: place}, **protection(config))
    svc = Service(store, clock)
    try:
        svc.call("sync", "alice")
        row = read_row(store, DOMAIN, ALICE)
        # A writer of the table puts a plain JSON row of its choosing in alice's row.
        write_row(store, DOMAIN, ALICE, with_payload(store, row, f"json:{FORGED}", "builtins.dict"))
        svc.upstream.down = True
        assert_miss(svc.call(kind, "alice"))
        assert svc.errors(kind) == 1
    finally:
        svc.close()
        store.close()
    # accept_plain (a migration): the plain row is read, whoever wrote it.
    migrating = single_store(
        backend, tmp_path, clock, **{option: place}, **protection(config), accept_plain=True
    )
    lenient = Service(migrating, clock)
    try:
        lenient.upstream.down = True
        assert lenient.call(kind, "alice") == {"user": "alice", "iban": "XX00-ATTACKER"}
        assert lenient.errors(kind) == 0
    finally:
        lenient.close()
        migrating.close()


def test_protected_rows_and_sealed_json_rows_stay_readable_by_default(
    tmp_path: Path, clock: FakeClock
) -> None:
    """Refusing plain rows refuses only those: an encrypting store that turns pickle on still
    reads its sealed JSON rows, and a signing store its signed rows sealed or not."""
    url = f"sqlite:///{tmp_path}/store.db"
    now = clock()

    def entry(key: str, value: object) -> ReferentialPayload[Any]:
        return ReferentialPayload("n", key, value, now, now + timedelta(hours=1), True)

    sealed_json = SqlStore(url, cipher=FernetCipher(FERNET_KEY))
    sealed_json.store(entry("sealed json", {"v": 1}))
    signed = SqlStore(url, codec=PickleCodec(PICKLE_KEY))
    signed.store(entry("signed", {"v": 2}))
    both = SqlStore(url, codec=PickleCodec(PICKLE_KEY), cipher=FernetCipher(FERNET_KEY))
    try:
        assert [p.payload for p in both.find_all("n")] == [{"v": 1}, {"v": 2}]
    finally:
        for store in (sealed_json, signed, both):
            store.close()


# -- rows longer than max_row_bytes ---------------------------------------------------------------

LIMIT = 64 * 1024
BIG = {"user": "alice", "photo": "x" * (2 * LIMIT)}


class RecordingJson(JsonCodec):
    """The JSON codec, noting the length of every text it decodes."""

    def __init__(self) -> None:
        super().__init__()
        self.decoded: list[int] = []

    def decode(self, text: str, payload_type: str, binding: bytes = b"") -> Any:
        self.decoded.append(len(text))
        return super().decode(text, payload_type, binding)


class RecordingPickle(PickleCodec):
    """The signed pickle codec, noting the length of every text it decodes."""

    def __init__(self, key: bytes) -> None:
        super().__init__(key)
        self.decoded: list[int] = []

    def decode(self, text: str, payload_type: str, binding: bytes = b"") -> Any:
        self.decoded.append(len(text))
        return super().decode(text, payload_type, binding)


class RecordingFernet(FernetCipher):
    """Fernet, noting the length of every token it decrypts."""

    def __init__(self, key: bytes | str) -> None:
        super().__init__(key)
        self.decoded: list[int] = []

    def decrypt(self, token: str) -> str:
        self.decoded.append(len(token))
        return super().decrypt(token)


def recording(config: str) -> tuple[dict[str, Any], dict[str, Any], Any]:
    """A writer's options, a reader's (the same rows, through recorders), and the recorder."""
    if config == "json":
        codec = RecordingJson()
        return {}, {"codec": codec}, codec
    if config == "fernet":
        cipher = RecordingFernet(FERNET_KEY)
        return {"cipher": FernetCipher(FERNET_KEY)}, {"cipher": cipher}, cipher
    pickler = RecordingPickle(PICKLE_KEY)
    return {"codec": PickleCodec(PICKLE_KEY)}, {"codec": pickler}, pickler


@pytest.mark.parametrize("config", ["json", *CONFIGS])
@pytest.mark.parametrize("kind", KINDS)
def test_a_row_over_max_row_bytes_is_a_miss_and_never_decoded(
    backend: str, config: str, kind: str, tmp_path: Path, clock: FakeClock
) -> None:
    option = place_option(backend)
    place = unique_place(backend, 1)
    writes, reads, recorder = recording(config)
    # A writer with the default limit (8 MiB) stores a valid row of some 128 KiB...
    writer = single_store(backend, tmp_path, clock, **{option: place}, **writes)
    now = clock()
    expiry = now + timedelta(hours=1)
    writer.store_many(
        [
            ReferentialPayload(DOMAIN, ALICE, BIG, now, expiry, True),
            ReferentialPayload(DOMAIN, BOB, {"user": "bob"}, now, expiry, True),
        ]
    )
    # ...which a reader allowing 64 KiB refuses without decoding or decrypting any of it.
    reader = single_store(backend, tmp_path, clock, **{option: place}, **reads, max_row_bytes=LIMIT)
    svc = Service(reader, clock)
    try:
        svc.upstream.down = True
        assert_miss(svc.call(kind, "alice"))
        assert svc.errors(kind) == 1
        assert recorder.decoded == []
        # The recorder records: the small row is decoded, and served.
        assert svc.call(kind, "bob") == {"user": "bob"}
        assert len(recorder.decoded) == 1
        assert recorder.decoded[0] < LIMIT
        # Batched reads skip it too, undecoded.
        assert reader.find_many(DOMAIN, [ALICE, BOB]).keys() == {BOB}
        assert len(recorder.decoded) == 2
        # The writer's own limit lets it read the row: the row is valid, only too long.
        found = writer.find(DOMAIN, ALICE)
        assert found is not None
        assert found.payload == BIG
    finally:
        svc.close()
        reader.close()
        writer.close()


@pytest.mark.parametrize("backend", ["sqlite", "postgresql", "redis"])
def test_a_value_over_max_row_bytes_is_returned_live_and_not_written(
    backend: str, tmp_path: Path, clock: FakeClock
) -> None:
    """Never read back, such a value is not written either: refused as a value the store
    cannot encode (the caller's own: it does not count against the store's health)."""
    store = single_store(backend, tmp_path, clock, max_row_bytes=LIMIT)
    svc = Service(store, clock)
    try:
        now = clock()
        with pytest.raises(SerializationError, match="max_row_bytes"):
            store.store(ReferentialPayload(DOMAIN, ALICE, BIG, now, now, True))
        svc.upstream.photo = 2 * LIMIT
        got = svc.call("sync", "alice")
        assert got["photo"] == "x" * (2 * LIMIT)  # live
        failed = svc.registry.get_sample_value(
            "failover_writes_total", {"name": "profile", "result": "failed"}
        )
        assert failed == 1
        assert store.find(DOMAIN, ALICE) is None
    finally:
        svc.close()
        store.close()


# -- the settings, and the URL options ------------------------------------------------------------


@pytest.mark.parametrize("bad", [0, -1, 1.5, "8MiB", True, None])
def test_max_row_bytes_must_be_a_positive_int(bad: Any, tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="max_row_bytes"):
        SqlStore(f"sqlite:///{tmp_path}/x.db", max_row_bytes=bad)
    with pytest.raises(ConfigurationError, match="max_row_bytes"):
        RedisStore("redis://127.0.0.1:1/0", max_row_bytes=bad)  # nothing is connected
    # The per-tenant factories refuse it at once, not at the first tenant.
    with pytest.raises(ConfigurationError, match="max_row_bytes"):
        per_tenant_tables(f"sqlite:///{tmp_path}/x.db", max_row_bytes=bad)
    with pytest.raises(ConfigurationError, match="max_row_bytes"):
        per_tenant_databases(f"sqlite:///{tmp_path}/{{tenant}}.db", max_row_bytes=bad)
    with pytest.raises(ConfigurationError, match="max_row_bytes"):
        RedisStore.per_tenant("redis://127.0.0.1:1/0", max_row_bytes=bad)


@pytest.mark.parametrize(
    ("query", "setting"),
    [
        ("max_row_bytes=abc", "max_row_bytes"),
        ("max_row_bytes=0", "max_row_bytes"),
        ("accept_plain=maybe", "accept_plain"),
    ],
)
def test_bad_url_options_are_configuration_errors(query: str, setting: str, tmp_path: Path) -> None:
    for url in (f"sqlite:///{tmp_path}/x.db?{query}", f"redis://127.0.0.1:1/0?{query}"):
        with pytest.raises(ConfigurationError, match=setting):
            make_store(url)


def test_url_options_and_arguments_that_disagree_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="disagree"):
        SqlStore(f"sqlite:///{tmp_path}/x.db?max_row_bytes=100", max_row_bytes=200)
    with pytest.raises(ConfigurationError, match="disagree"):
        RedisStore("redis://127.0.0.1:1/0?accept_plain=false", accept_plain=True)


def test_the_row_options_of_a_sql_url_reach_every_store_made_from_it(
    tmp_path: Path, clock: FakeClock
) -> None:
    options = "max_row_bytes=1000&accept_plain=true"
    made = make_store(f"sqlite:///{tmp_path}/x.db?{options}")
    assert isinstance(made, SqlStore)
    assert (made.max_row_bytes, made.accept_plain, made.tenant) == (1000, True, None)
    now = clock()
    made.store(ReferentialPayload("n", "k", [1], now, now + timedelta(hours=1), True))
    assert made.find("n", "k") is not None  # the options never reached the driver
    made.close()

    shared = open_shared(f"sqlite:///{tmp_path}/x.db?{options}", create=False)
    assert isinstance(shared, SqlStore)
    assert shared.max_row_bytes == 1000
    shared.close()

    for url in (
        f"sqlite:///{tmp_path}/t-{{tenant}}.db?{options}",
        f"sqlite:///{tmp_path}/t.db?{options}",
    ):
        factory = per_tenant(url)
        store = factory("acme")
        assert isinstance(store, SqlStore)
        assert (store.max_row_bytes, store.accept_plain, store.tenant) == (1000, True, "acme")
        store.store(ReferentialPayload("n", "k", [1], now, now + timedelta(hours=1), True))
        store.close()
        factory.close()


def test_the_row_options_of_a_redis_url_reach_every_store_made_from_it(
    clock: FakeClock,
) -> None:
    url = f"{redis_server.server().url}?prefix={redis_server.unique_prefix()}&max_row_bytes=1000"
    made = make_store(f"{url}&accept_plain=true", clock=clock)
    assert isinstance(made, RedisStore)
    assert (made.max_row_bytes, made.accept_plain, made.tenant) == (1000, True, None)
    now = clock()
    made.store(ReferentialPayload("n", "k", [1], now, now + timedelta(hours=1), True))
    assert made.find("n", "k") is not None  # redis-py never saw the options
    made.close()

    factory = per_tenant(url, clock=clock)
    store = factory("acme")
    assert isinstance(store, RedisStore)
    assert (store.max_row_bytes, store.accept_plain, store.tenant) == (1000, False, "acme")
    store.store(ReferentialPayload("n", "k", [1], now, now + timedelta(hours=1), True))
    assert store.find("n", "k") is not None
    store.close()
    factory.close()
