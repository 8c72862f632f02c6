"""What the library reads back from a persistent store, written there by someone else: hostile
or damaged entries put DIRECTLY into a real store (a SQLite file through ``sqlite3``; the suite's
redis-server through redis-py), then read by a decorated call whose upstream fails, sync and
async, point reads and scatter/gather slices.

The contract (docs/security.md): nothing read back runs code (pickles that would write a file,
JSON naming callables, types off the allowlist or renamed, classes whose fields changed); a row
that cannot be trusted or decoded (truncated, bit-flipped or wrong-key ciphertext, unknown
schemes and codec markers of a later version, NULL or mistyped columns, a payload of a few MB,
bytes that are not UTF-8) is a miss for that entry only: logged, counted, and the caller gets the
policy's answer for the original exception; the good slices of a scatter/gather call still
recover; ``failover inspect`` and the dashboard list such a store instead of failing."""

from __future__ import annotations

import asyncio
import base64
import json
import pickle
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pydantic
import pytest
from prometheus_client import CollectorRegistry

import failover
from failover import Failover, ListSplitter
from failover.cli import main
from failover.keys import make_key
from failover.serialization.base import type_name
from failover.serialization.binding import entry_binding
from failover.serialization.crypto import FernetCipher, seal
from failover.serialization.pickle_codec import PickleCodec
from failover.stores.backends.sql import SqlStore

from . import redis_server
from .conftest import FakeClock

KINDS = ["sync", "async"]
BACKENDS = ["sqlite", "redis"]
FAILED = "the store failed while recovering"
MISSING = "no stored entry"
PICKLE_KEY = b"the signing key of these tests"
OLD_KEY, NEW_KEY, OTHER_KEY = (FernetCipher.generate_key() for _ in range(3))
HOUR_US = 3_600 * 1_000_000
CODES = ["FR", "DE", "IT", "ES", "US"]
NAMES = {"FR": "France", "DE": "Germany", "IT": "Italy", "ES": "Spain", "US": "United States"}


@dataclass(frozen=True)
class Country:
    """The stored type: allowed through the return annotations below."""

    code: str
    name: str


@dataclass
class Trap:
    """Never allowed (no annotation names it): building one writes a file."""

    path: str

    def __post_init__(self) -> None:
        Path(self.path).write_text("pwned")


class Exploit:
    """Unpickling it writes a file: the file missing proves no stored row ran code."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (Path.write_text, (self.path, "pwned"))


class Down(Exception):
    """The upstream's error."""


class Upstream:
    """Countries by code, until ``down``."""

    def __init__(self) -> None:
        self.down = False

    def __call__(self, codes: list[str]) -> list[Country]:
        if self.down:
            raise Down(codes)
        return [Country(c, NAMES[c]) for c in codes]


# -- the stores, and writing into them behind the library's back ----------------------------------


def micros(when: datetime) -> int:
    return (when - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)


class Backend:
    """A real store of one kind, and raw access to what it holds."""

    kind: str
    store: Any

    def put(self, name: str, key: str, payload: str | bytes, payload_type: str) -> None:
        """Replace the entry's payload and type by hand (its times kept or made valid)."""
        raise NotImplementedError

    def payload(self, name: str, key: str) -> str:
        """The payload text as stored."""
        raise NotImplementedError

    def close(self) -> None:
        self.store.close()


class SqliteBackend(Backend):
    kind = "sqlite"

    def __init__(self, path: Path, clock: FakeClock, **options: Any) -> None:
        self.path, self.clock = path, clock
        self.url = f"sqlite:///{path}"
        self.store = SqlStore(self.url, **options)

    def execute(self, sql: str, *params: Any) -> list[Any]:
        conn = sqlite3.connect(self.path)
        try:
            with conn:
                return conn.execute(sql, params).fetchall()
        finally:
            conn.close()

    def put(self, name: str, key: str, payload: str | bytes, payload_type: str) -> None:
        now = micros(self.clock())
        self.execute(
            "INSERT OR REPLACE INTO failover_store (name, key, as_of, expire_on, payload, "
            "payload_type) VALUES (?, ?, ?, ?, ?, ?)",
            *(name, key, now, now + HOUR_US, payload, payload_type),
        )

    def put_text_bytes(self, name: str, key: str, column: str, data: bytes) -> None:
        """``data`` as TEXT in ``column`` (SQLite keeps the bytes as they are: not UTF-8)."""
        self.execute(
            f"UPDATE failover_store SET {column} = CAST(? AS TEXT) WHERE name = ? AND key = ?",
            *(data, name, key),
        )

    def payload(self, name: str, key: str) -> str:
        rows = self.execute(
            "SELECT payload FROM failover_store WHERE name = ? AND key = ?", name, key
        )
        return str(rows[0][0])


class RedisBackend(Backend):
    kind = "redis"

    def __init__(self, clock: FakeClock, **options: Any) -> None:
        from failover.stores.backends.redis import RedisStore

        server = redis_server.server()  # skips the test where redis-server is missing
        self.prefix = redis_server.unique_prefix()
        self.url = f"{server.url}?prefix={self.prefix}"
        self.store = RedisStore(server.url, prefix=self.prefix, clock=clock, **options)
        self.raw = server.client()
        self.clock = clock
        self.keys = self.store.browsing.keys

    def put(self, name: str, key: str, payload: str | bytes, payload_type: str) -> None:
        now = micros(self.clock())
        header = f"{now} {now + HOUR_US} {payload_type}\n".encode()
        body = payload.encode() if isinstance(payload, str) else payload
        self.put_value(name, key, header + body)

    def put_value(self, name: str, key: str | bytes, value: bytes) -> None:
        """A whole value (header and payload) by hand, listed in the name's indexes."""
        entry = self.keys.entries(name).encode() + (key if isinstance(key, bytes) else key.encode())
        self.raw.set(entry, value, px=3_600_000)
        self.raw.zadd(self.keys.index(name), {key: _in_an_hour()})
        self.raw.zadd(self.keys.lex(name), {key: 0})
        self.raw.sadd(self.keys.names, name)

    def payload(self, name: str, key: str) -> str:
        value = self.raw.get(self.keys.entries(name) + key)
        return str(value.decode().partition("\n")[2])

    def close(self) -> None:
        super().close()
        self.raw.close()


def _in_an_hour() -> int:
    return int((datetime.now(UTC) + timedelta(hours=1)).timestamp() * 1000)


def backend_of(kind: str, tmp_path: Path, clock: FakeClock, **options: Any) -> Backend:
    if kind == "redis":
        return RedisBackend(clock, **options)
    return SqliteBackend(tmp_path / "store.db", clock, **options)


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


class Service:
    """An engine on a backend, with a point failover (``country``) and a scatter/gather one
    (``countries``) over one domain, and the upstream they share."""

    def __init__(self, backend: Backend, clock: FakeClock, registry: CollectorRegistry) -> None:
        self.backend = backend
        self.upstream = Upstream()
        self.registry = registry
        # A generous store deadline: stored data is tested, and a loaded host's read past the
        # default 0.5 s would be a miss for another reason than the row's.
        self.engine = Failover(
            backend.store, clock=clock, async_writes=False, metrics=registry, store_timeout=10
        )
        up = self.upstream

        @failover.failover("country", domain="geo", engine=self.engine)
        def country(code: str) -> Country:
            return up([code])[0]

        @failover.failover("acountry", domain="geo", engine=self.engine)
        async def acountry(code: str) -> Country:
            return up([code])[0]

        @failover.failover(
            "countries", domain="geo", splitter=ListSplitter("code"), engine=self.engine
        )
        def countries(codes: list[str]) -> list[Country]:
            return up(codes)

        @failover.failover(
            "acountries", domain="geo", splitter=ListSplitter("code"), engine=self.engine
        )
        async def acountries(codes: list[str]) -> list[Country]:
            return up(codes)

        self.point = {"sync": country, "async": acountry}
        self.scatter = {"sync": countries, "async": acountries}

    def seed(self) -> None:
        """Every country stored, then the upstream down."""
        self.scatter["sync"](CODES)
        self.upstream.down = True

    def close(self) -> None:
        self.engine.close()

    def errors(self, name: str) -> float:
        value = self.registry.get_sample_value(
            "failover_recoveries_total", {"name": name, "outcome": "error"}
        )
        return value or 0.0


def key(code: str) -> str:
    """The stored key of a country: a point call's and a slice's alike (one domain)."""
    return make_key("geo", (code,))


@pytest.fixture
def options() -> dict[str, Any]:
    """The store's options (codec, cipher): none unless a test parametrizes them."""
    return {}


@pytest.fixture
def service(
    backend: str,
    options: dict[str, Any],
    tmp_path: Path,
    clock: FakeClock,
    registry: CollectorRegistry,
) -> Iterator[Service]:
    """A service on ``backend``, its store made with ``options``."""
    made = backend_of(backend, tmp_path, clock, **options)
    svc = Service(made, clock, registry)
    yield svc
    svc.close()
    made.close()


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def run(svc: Service | Backend, kind: str, fn: Any, *args: Any) -> Any:
    """``fn(*args)``: called, or (``async``) awaited on a loop of its own, whose Redis
    connections are closed before it ends."""
    if kind == "sync":
        return fn(*args)
    backend = svc.backend if isinstance(svc, Service) else svc

    async def closing() -> Any:
        try:
            return await fn(*args)
        finally:
            await backend.store.aclose()

    return asyncio.run(closing())


def point_call(svc: Service, kind: str, code: str) -> Any:
    """The point call of ``code``: the value, or the exception raised."""
    try:
        return run(svc, kind, svc.point[kind], code)
    except Exception as exc:
        return exc


def assert_policy_answer(got: Any, note: str = FAILED) -> None:
    """The default policy: the upstream's own exception, with a note saying why nothing was
    recovered."""
    assert isinstance(got, Down), got
    assert any(note in str(n) for n in getattr(got, "__notes__", [])), got.__notes__


def recovered_codes(svc: Service, kind: str, codes: list[str]) -> list[str]:
    got = run(svc, kind, svc.scatter[kind], codes)
    return [c.code for c in got]


def damage_and_check(
    svc: Service,
    kind: str,
    bad: dict[str, tuple[str | bytes, str]],
    marker: Path | None = None,
) -> None:
    """Put ``bad`` (code -> payload, payload type) into the store, then: each bad point read is
    the policy's answer and counted as a recover error; a scatter/gather call of every code
    recovers exactly the good slices; nothing wrote ``marker``."""
    svc.seed()
    for code, (payload, payload_type) in bad.items():
        svc.backend.put("geo", key(code), payload, payload_type)
    name = "country" if kind == "sync" else "acountry"
    for code in bad:
        assert_policy_answer(point_call(svc, kind, code))
    assert svc.errors(name) == len(bad)
    good = [c for c in CODES if c not in bad]
    assert point_call(svc, kind, good[0]) == Country(good[0], NAMES[good[0]])
    assert recovered_codes(svc, kind, CODES) == good
    if marker is not None:
        assert not marker.exists()


# -- pickles that would run code ------------------------------------------------------------------

PICKLING = {"codec": PickleCodec(PICKLE_KEY), "cipher": FernetCipher(NEW_KEY)}
ROTATED = {"cipher": FernetCipher([NEW_KEY, OLD_KEY])}
NEW_ONLY = {"cipher": FernetCipher(NEW_KEY)}


def pickle_row(how: str, marker: Path, code: str) -> str:
    """A pickle row of ``Exploit`` for ``code``'s entry that the store must refuse."""
    exploit = Exploit(marker)
    data = pickle.dumps(exploit)
    binding = entry_binding("geo", key(code))
    if how == "unsigned":
        return "pickle:" + base64.b64encode(data).decode()
    if how == "random signature":
        return "pickle:" + base64.b64encode(b"\x5a" * 32 + data).decode()
    if how == "another key":
        return "pickle:" + PickleCodec(b"not the key").encode(exploit, binding)[0]
    if how == "another entry":
        other = entry_binding("geo", key(code) + "0")
        return "pickle:" + PickleCodec(PICKLE_KEY).encode(exploit, other)[0]
    if how == "unbound (an earlier version's)":
        return "pickle:" + PickleCodec(PICKLE_KEY).encode(exploit)[0]
    assert how == "encrypted for this entry, unsigned"  # decrypts fine; the signature refuses
    unsigned = "pickle:" + base64.b64encode(data).decode()
    return seal(FernetCipher(NEW_KEY), unsigned, binding)


PICKLE_HOWS = [
    "unsigned",
    "random signature",
    "another key",
    "another entry",
    "unbound (an earlier version's)",
    "encrypted for this entry, unsigned",
]


@pytest.mark.parametrize("options", [PICKLING], ids=["pickle+fernet"])
@pytest.mark.parametrize("how", PICKLE_HOWS)
@pytest.mark.parametrize("kind", KINDS)
def test_a_pickle_that_would_run_code_never_runs(
    service: Service, kind: str, how: str, tmp_path: Path
) -> None:
    marker = tmp_path / "pwned"
    bad = {code: (pickle_row(how, marker, code), type_name(Exploit)) for code in ("FR", "IT")}
    damage_and_check(service, kind, bad, marker)


@pytest.mark.parametrize("kind", KINDS)
def test_a_signed_pickle_is_refused_by_a_store_without_the_pickle_key(
    service: Service, kind: str, tmp_path: Path
) -> None:
    marker = tmp_path / "pwned"
    signed = {
        code: (
            "pickle:"
            + PickleCodec(PICKLE_KEY).encode(Exploit(marker), entry_binding("geo", key(code)))[0],
            type_name(Exploit),
        )
        for code in ("DE",)
    }
    damage_and_check(service, kind, signed, marker)


# -- JSON naming what it must not build -----------------------------------------------------------


def tagged(tag: str, value: Any) -> str:
    return "json:" + json.dumps({"__t": tag, "v": value})


COUNTRY = type_name(Country)


def json_rows(marker: Path) -> dict[str, tuple[str, str]]:
    """JSON rows no reader may build, by what they try."""
    trap = {"__t": type_name(Trap), "v": {"path": str(marker)}}
    return {
        "a callable by name": (tagged("os.system", f"touch {marker}"), "builtins.int"),
        "a class that runs a command": (
            tagged("subprocess.Popen", {"args": ["touch", str(marker)]}),
            "subprocess.Popen",
        ),
        "eval": (tagged("builtins.eval", f"open({str(marker)!r}, 'w')"), "builtins.object"),
        "a dataclass off the allowlist": ("json:" + json.dumps(trap), type_name(Trap)),
        "an allowed type holding one that is not": (
            tagged(COUNTRY, {"code": "FR", "name": trap}),
            COUNTRY,
        ),
        "a trap inside a standard tag": (
            "json:" + json.dumps({"__t": "tuple", "v": [trap]}),
            "builtins.tuple",
        ),
        "a renamed type (its old name)": (
            tagged("tests.test_stored_data_edges.Nation", {"code": "FR", "name": "France"}),
            "tests.test_stored_data_edges.Nation",
        ),
        "a field the class no longer has": (
            tagged(COUNTRY, {"code": "FR", "name": "France", "population": 68}),
            COUNTRY,
        ),
        "a field the class now requires, missing": (tagged(COUNTRY, {"code": "FR"}), COUNTRY),
        "fields that are not a mapping": (tagged(COUNTRY, ["FR", "France"]), COUNTRY),
        "a type column naming another type": (
            tagged(COUNTRY, {"code": "FR", "name": "France"}),
            "builtins.list",
        ),
        "an integer past the digit limit": ("json:" + "9" * 5_000, "builtins.int"),
        "a zone path out of the zone database": (
            "json:"
            + json.dumps({"__t": "datetime", "v": "2026-01-01T00:00:00", "z": "../../etc/passwd"}),
            "datetime.datetime",
        ),
    }


JSON_ROWS = list(json_rows(Path("x")))


@pytest.mark.parametrize("row", JSON_ROWS)
@pytest.mark.parametrize("kind", KINDS)
def test_json_naming_what_it_must_not_build_is_a_miss(
    service: Service, kind: str, row: str, tmp_path: Path
) -> None:
    marker = tmp_path / "pwned"
    damage_and_check(service, kind, {"IT": json_rows(marker)[row]}, marker)


# -- ciphertext -----------------------------------------------------------------------------------


def sealed(
    cipher_key: bytes | str, code: str, text: str | None = None, where: Backend | None = None
) -> str:
    """An honest row for ``code``, encrypted with ``cipher_key`` for the store of ``where``
    (rows are bound to their store: see tests/test_row_binding.py)."""
    text = text or tagged(COUNTRY, {"code": code, "name": NAMES[code]})[len("json:") :]
    binding = (
        entry_binding("geo", key(code))
        if where is None
        else where.store.serializer.binding("geo", key(code))
    )
    return seal(FernetCipher(cipher_key), "json:" + text, binding)


def flipped(text: str, at: int) -> str:
    new = "A" if text[at] != "A" else "B"
    return text[:at] + new + text[at + 1 :]


def cipher_rows(where: Backend | None = None) -> dict[str, tuple[str, str]]:
    """Encrypted rows a store (``where``'s) reading with ``[NEW_KEY, OLD_KEY]`` must refuse."""
    good = sealed(NEW_KEY, "IT", where=where)
    token = good[len("ENC(fernet:") : -1]
    return {
        "truncated in the token": (good[: len(good) // 2] + ")", COUNTRY),
        "truncated, no closing parenthesis": (good[:-1], COUNTRY),
        "a bit flipped in the token's body": (flipped(good, len(good) // 2), COUNTRY),
        "a bit flipped in the token's signature": (flipped(good, len(good) - 5), COUNTRY),
        "another key": (sealed(OTHER_KEY, "IT", where=where), COUNTRY),
        "a scheme of a later version": (f"ENC(aesgcm:{token})", COUNTRY),
        "no scheme": (f"ENC({token})", COUNTRY),
        "empty": ("ENC(fernet:)", COUNTRY),
        "sealed for another entry": (sealed(NEW_KEY, "FR", where=where), COUNTRY),
        "a codec marker of a later version inside": (
            seal(FernetCipher(NEW_KEY), 'json2:{"code":"IT"}', entry_binding("geo", key("IT"))),
            COUNTRY,
        ),
    }


CIPHER_ROWS = list(cipher_rows())


@pytest.mark.parametrize("options", [ROTATED], ids=["new+old keys"])
@pytest.mark.parametrize("row", CIPHER_ROWS)
@pytest.mark.parametrize("kind", KINDS)
def test_ciphertext_that_does_not_decrypt_is_a_miss(service: Service, kind: str, row: str) -> None:
    damage_and_check(service, kind, {"IT": cipher_rows(service.backend)[row]})


@pytest.mark.parametrize("options", [ROTATED], ids=["new+old keys"])
def test_peek_raises_for_an_entry_that_cannot_be_read_back(service: Service) -> None:
    """A call recovers from such an entry as from a miss; `peek`, the operator's look at the
    store, says what is wrong with it (docs/how-it-works.md)."""
    service.seed()
    service.backend.put("geo", key("IT"), *cipher_rows(service.backend)[CIPHER_ROWS[0]])
    with pytest.raises(failover.SerializationError):
        service.point["sync"].peek("IT")
    assert service.point["sync"].peek("FR") is not None


@pytest.mark.parametrize("options", [ROTATED], ids=["new+old keys"])
@pytest.mark.parametrize("kind", KINDS)
def test_after_rotation_rows_of_the_old_key_read_while_it_is_listed(
    service: Service, kind: str
) -> None:
    service.seed()
    service.backend.put("geo", key("DE"), sealed(OLD_KEY, "DE", where=service.backend), COUNTRY)
    assert point_call(service, kind, "DE") == Country("DE", "Germany")
    assert recovered_codes(service, kind, CODES) == CODES
    assert service.backend.payload("geo", key("FR")).startswith("ENC(fernet:")


@pytest.mark.parametrize("options", [NEW_ONLY], ids=["new key"])
@pytest.mark.parametrize("kind", KINDS)
def test_after_rotation_rows_of_a_key_no_longer_listed_are_misses(
    service: Service, kind: str
) -> None:
    damage_and_check(service, kind, {"DE": (sealed(OLD_KEY, "DE", where=service.backend), COUNTRY)})


@pytest.mark.parametrize("options", [{**NEW_ONLY, "accept_plain": True}], ids=["new key"])
@pytest.mark.parametrize("kind", KINDS)
def test_with_accept_plain_plain_rows_stay_readable_once_encryption_is_on_and_are_encrypted(
    service: Service, kind: str
) -> None:
    """docs/security.md: turning encryption on with ``accept_plain=True`` (a migration) keeps
    the plain rows already written readable; they are replaced by encrypted ones as the
    upstream answers again. Without it they are misses (tests/test_row_binding.py)."""
    service.seed()
    plain = tagged(COUNTRY, {"code": "ES", "name": "Spain"})
    service.backend.put("geo", key("ES"), plain, COUNTRY)
    assert point_call(service, kind, "ES") == Country("ES", "Spain")
    assert recovered_codes(service, kind, CODES) == CODES
    assert service.backend.payload("geo", key("ES")) == plain
    service.upstream.down = False
    assert point_call(service, kind, "ES") == Country("ES", "Spain")
    assert service.backend.payload("geo", key("ES")).startswith("ENC(fernet:")


# -- enormous payloads ----------------------------------------------------------------------------

BIG = 4 * 1024 * 1024  # characters


@pytest.mark.parametrize("kind", KINDS)
def test_an_enormous_valid_payload_is_served_and_enormous_junk_is_a_miss(
    service: Service, kind: str
) -> None:
    service.seed()
    big_name = "n" * BIG
    service.backend.put(
        "geo", key("US"), tagged(COUNTRY, {"code": "US", "name": big_name}), COUNTRY
    )
    junk = {
        "FR": ("json:" + "[" * BIG, "builtins.list"),  # nested past any recursion limit
        "DE": ("json:" + '{"a":' * (BIG // 5), "builtins.dict"),
        "IT": ('json:"' + "x" * BIG, "builtins.str"),  # a string never closed
        "ES": ("ENC(fernet:" + "A" * BIG + ")", COUNTRY),
    }
    for code, (payload, payload_type) in junk.items():
        service.backend.put("geo", key(code), payload, payload_type)
    got = point_call(service, kind, "US")
    assert got == Country("US", big_name)
    for code in junk:
        assert_policy_answer(point_call(service, kind, code))
    got = run(service, kind, service.scatter[kind], CODES)
    assert got == [Country("US", big_name)]


# -- a table of another version, or made by hand --------------------------------------------------


def hand_made_table(path: Path, extra: str = "") -> None:
    """The store's table as a tool or a later version may make it: every column nullable,
    and maybe one more."""
    conn = sqlite3.connect(path)
    with conn:
        conn.execute(
            "CREATE TABLE failover_store (name VARCHAR(255), key VARCHAR(255), as_of BIGINT, "
            "expire_on BIGINT, payload TEXT, payload_type VARCHAR(255), label VARCHAR(255)"
            f"{extra}, PRIMARY KEY (name, key))"
        )
    conn.close()


MALFORMED: dict[str, dict[str, Any]] = {
    "a NULL payload": {"payload": None},
    "a NULL type": {"payload_type": None},
    "NULL times": {"as_of": None, "expire_on": None},
    "a number for a payload": {"payload": 42},
    "a real for a payload": {"payload": 4.2},
    "a number for a type": {"payload_type": 7},
    "text for a time": {"as_of": "yesterday"},
    "a blob for a time": {"expire_on": b"\x00\x01"},
    "a real time past datetime's range": {"expire_on": 1e300},
    "a blob for a payload": {"payload": b'json:{"code":"IT"}'},
    "a blob for a type": {"payload_type": COUNTRY.encode()},
    "a blob for a label": {"label": b"\xff\xfe"},
    "a number for a label, and an unknown codec": {"label": 5, "payload": 'yaml:{"code": IT}'},
}


@pytest.mark.parametrize("column", list(MALFORMED))
@pytest.mark.parametrize("kind", KINDS)
def test_malformed_sql_rows_are_misses_for_their_entry_only(
    kind: str, column: str, tmp_path: Path, clock: FakeClock, registry: CollectorRegistry
) -> None:
    path = tmp_path / "store.db"
    hand_made_table(path)
    backend = SqliteBackend(path, clock)
    svc = Service(backend, clock, registry)
    try:
        svc.seed()
        values = MALFORMED[column]
        sets = ", ".join(f"{c} = ?" for c in values)
        backend.execute(
            f"UPDATE failover_store SET {sets} WHERE name = 'geo' AND key = ?",
            *values.values(),
            key("IT"),
        )
        if column == "a blob for a label":  # a label is never decoded: the entry is served
            assert point_call(svc, kind, "IT") == Country("IT", "Italy")
            assert recovered_codes(svc, kind, CODES) == CODES
            return
        assert_policy_answer(point_call(svc, kind, "IT"))
        assert svc.errors("country" if kind == "sync" else "acountry") == 1
        assert recovered_codes(svc, kind, CODES) == ["FR", "DE", "ES", "US"]
        assert main(["inspect", "--store", backend.url, "--name", "geo"]) == 0
    finally:
        svc.close()
        backend.close()


@pytest.mark.parametrize("kind", KINDS)
def test_a_table_of_a_later_version_is_read_and_its_write_failures_never_break_a_call(
    kind: str, tmp_path: Path, clock: FakeClock, registry: CollectorRegistry
) -> None:
    """A later version added a column this one does not know (NOT NULL, no default) and
    writes rows of a format this one does not read: the rows this version can read recover,
    the others are misses, and writes failing on the column cost the live answer nothing."""
    path = tmp_path / "store.db"
    hand_made_table(path, ", schema_version INTEGER NOT NULL")
    backend = SqliteBackend(path, clock)
    now = micros(clock())
    backend.execute(
        "INSERT INTO failover_store VALUES (?, ?, ?, ?, ?, ?, NULL, 2), "
        "(?, ?, ?, ?, ?, ?, NULL, 2)",
        *("geo", key("FR"), now, now + HOUR_US, tagged(COUNTRY, {"code": "FR", "name": "France"})),
        COUNTRY,
        *("geo", key("DE"), now, now + HOUR_US, 'json2:{"code":"DE"}', COUNTRY),
    )
    svc = Service(backend, clock, registry)
    try:
        assert point_call(svc, kind, "IT") == Country("IT", "Italy")  # live; its write fails
        written = registry.get_sample_value(
            "failover_writes_total",
            {"name": "country" if kind == "sync" else "acountry", "result": "failed"},
        )
        assert written == 1
        svc.upstream.down = True
        assert point_call(svc, kind, "FR") == Country("FR", "France")
        assert_policy_answer(point_call(svc, kind, "DE"))
        assert_policy_answer(point_call(svc, kind, "IT"), MISSING)
        assert recovered_codes(svc, kind, CODES) == ["FR"]
    finally:
        svc.close()
        backend.close()


@pytest.mark.parametrize("kind", KINDS)
def test_a_table_whose_columns_a_later_version_renamed_is_store_trouble_never_a_failed_call(
    kind: str, tmp_path: Path, clock: FakeClock, registry: CollectorRegistry
) -> None:
    """Neither reads nor writes work on it: the live answer still comes back, and a failing
    call gets the policy's answer for the upstream's own exception."""
    path = tmp_path / "store.db"
    conn = sqlite3.connect(path)
    with conn:
        conn.execute(
            "CREATE TABLE failover_store (name VARCHAR(255), key VARCHAR(255), as_of BIGINT, "
            "expire_on BIGINT, body TEXT, kind VARCHAR(255), PRIMARY KEY (name, key))"
        )
    conn.close()
    backend = SqliteBackend(path, clock)
    svc = Service(backend, clock, registry)
    try:
        assert point_call(svc, kind, "FR") == Country("FR", "France")
        assert recovered_codes(svc, kind, CODES) == CODES  # live
        svc.upstream.down = True
        assert_policy_answer(point_call(svc, kind, "FR"))
        got = point_call(svc, kind, "DE")
        assert_policy_answer(got)
    finally:
        svc.close()
        backend.close()


# -- Redis values of another shape ----------------------------------------------------------------

REDIS_VALUES: dict[str, bytes] = {
    "a header of a later version": b"v2 1 2 tests.Country\njson:{}",
    "a header with one field more": b"1 2 " + COUNTRY.encode() + b" extra\njson:{}",
    "no header": b'json:{"code":"IT","name":"Italy"}',
    "an empty value": b"",
    "times past datetime's range": b"99999999999999999999 1 " + COUNTRY.encode() + b"\njson:1",
    "a header not UTF-8": b"1 2 \xff\xfe\njson:1",
    "a payload not UTF-8": b"1 2 " + COUNTRY.encode() + b"\njson:\xc3\x28",
    "a label not UTF-8": b"1 2 " + COUNTRY.encode() + b"\t\xff\njson:1",
}


@pytest.mark.parametrize("shape", list(REDIS_VALUES))
@pytest.mark.parametrize("kind", KINDS)
def test_redis_values_of_another_shape_are_misses_for_their_entry_only(
    kind: str, shape: str, tmp_path: Path, clock: FakeClock, registry: CollectorRegistry
) -> None:
    backend = RedisBackend(clock)
    svc = Service(backend, clock, registry)
    try:
        svc.seed()
        backend.put_value("geo", key("IT"), REDIS_VALUES[shape])
        assert_policy_answer(point_call(svc, kind, "IT"))
        assert svc.errors("country" if kind == "sync" else "acountry") == 1
        assert recovered_codes(svc, kind, CODES) == ["FR", "DE", "ES", "US"]
        assert main(["inspect", "--store", backend.url]) == 0
    finally:
        svc.close()
        backend.close()


# -- many hostile slices at once ------------------------------------------------------------------


@pytest.mark.parametrize("options", [PICKLING], ids=["pickle+fernet"])
@pytest.mark.parametrize("kind", KINDS)
def test_hostile_slices_of_every_kind_leave_the_good_ones_recovered(
    service: Service, kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """One call's slices: a pickle that would run code, JSON naming a trap, a ciphertext cut
    short, a few MB of junk; the fifth slice is good and is the call's answer. Concurrent
    point reads of one loop turn (one ``find_many``) answer alike."""
    marker = tmp_path / "pwned"
    rows = json_rows(marker)
    bad = {
        "FR": (pickle_row("unsigned", marker, "FR"), type_name(Exploit)),
        "DE": rows["a dataclass off the allowlist"],
        "IT": (sealed(NEW_KEY, "IT")[:-20] + ")", COUNTRY),
        "ES": ("json:" + "[" * BIG, "builtins.list"),
    }
    service.seed()
    for code, (payload, payload_type) in bad.items():
        service.backend.put("geo", key(code), payload, payload_type)
    assert recovered_codes(service, kind, CODES) == ["US"]
    assert recovered_codes(service, kind, CODES[::-1]) == ["US"]
    if kind == "async":

        async def gathered() -> list[Any]:
            calls = (service.point["async"](c) for c in CODES)
            return await asyncio.gather(*calls, return_exceptions=True)

        got = run(service, kind, gathered)
        assert got[-1] == Country("US", "United States")
        for answer in got[:-1]:
            assert isinstance(answer, Down)
    assert not marker.exists()
    assert main(["inspect", "--store", service.backend.url]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[-1].startswith("5 entries, ")  # expired by the wall clock


# -- the command line and the dashboard on a hostile store ----------------------------------------


def dashboard_statuses(store: Any, clock: FakeClock, name: str) -> list[int]:
    from werkzeug.test import Client

    from failover.dashboard import make_store_app

    client = Client(make_store_app(store, clock, show_payloads=True))
    paths = ["/api/failovers", f"/api/entries?name={name}", "/", f"/?name={name}"]
    return [client.get(p).status_code for p in paths]


@pytest.mark.parametrize("options", [PICKLING], ids=["pickle+fernet"])
def test_inspect_and_the_dashboard_list_a_store_full_of_hostile_rows(
    service: Service, backend: str, clock: FakeClock, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    marker = tmp_path / "pwned"
    service.seed()
    rows = [
        (pickle_row("random signature", marker, "FR"), type_name(Exploit)),
        json_rows(marker)["a callable by name"],
        cipher_rows()["truncated in the token"],
        ("json:" + "[" * BIG, "builtins.list"),
    ]
    for code, (payload, payload_type) in zip(CODES, rows, strict=False):
        service.backend.put("geo", key(code), payload, payload_type)
    assert main(["inspect", "--store", service.backend.url]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1].startswith("5 entries, ")
    assert dashboard_statuses(service.backend.store, clock, "geo") == [200] * 4
    assert not marker.exists()


# -- helpers of the tests above, checked ----------------------------------------------------------


def test_the_hostile_rows_are_well_formed_for_their_purpose(tmp_path: Path) -> None:
    """Guards against a test passing for the wrong reason: an honest row built the same way
    decodes, so the hostile ones fail for what they hold, not for how they were written."""
    from failover.serialization.rows import Serializer

    rows = Serializer(
        cipher=FernetCipher([NEW_KEY, OLD_KEY]), allowed_types=[Country], accept_plain=True
    )
    honest = tagged(COUNTRY, {"code": "IT", "name": "Italy"})
    assert rows.load("geo", key("IT"), honest, COUNTRY) == Country("IT", "Italy")
    assert rows.load("geo", key("IT"), sealed(NEW_KEY, "IT"), COUNTRY) == Country("IT", "Italy")
    assert rows.load("geo", key("IT"), sealed(OLD_KEY, "IT"), COUNTRY) == Country("IT", "Italy")
    signed = PickleCodec(PICKLE_KEY).encode(["x"], entry_binding("geo", key("IT")))[0]
    pickling = Serializer(codec=PickleCodec(PICKLE_KEY))
    assert pickling.load("geo", key("IT"), "pickle:" + signed, "builtins.list") == ["x"]


# -- text that is not UTF-8 in a SQLite row -------------------------------------------------------


@pytest.mark.parametrize("column", ["payload", "payload_type", "label"])
@pytest.mark.parametrize("kind", KINDS)
def test_sqlite_text_that_is_not_utf8_is_a_miss_for_its_entry_only(
    kind: str,
    column: str,
    tmp_path: Path,
    clock: FakeClock,
    registry: CollectorRegistry,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """SQLite keeps TEXT as the bytes it was given: a row written by another program may hold
    bytes that are not UTF-8, which the driver refuses to read at all. That row is corrupt (a
    `SerializationError`, as a binary payload is), never a failure of the whole read: the other
    slices of the call recover, and the store is still listed."""
    from failover.errors import SerializationError

    backend = SqliteBackend(tmp_path / "store.db", clock)
    svc = Service(backend, clock, registry)
    try:
        svc.seed()
        honest = backend.payload("geo", key("IT")).encode()
        data = {"payload": honest + b"\xff", "payload_type": b"\xc3\x28", "label": b"\xff"}
        backend.put_text_bytes("geo", key("IT"), column, data[column])
        if column == "label":  # never decoded: the entry is served, without its label
            assert point_call(svc, kind, "IT") == Country("IT", "Italy")
            assert recovered_codes(svc, kind, CODES) == CODES
        else:
            with pytest.raises(SerializationError, match="cannot be decoded"):
                backend.store.find("geo", key("IT"))
            assert_policy_answer(point_call(svc, kind, "IT"))
            assert svc.errors("country" if kind == "sync" else "acountry") == 1
            assert recovered_codes(svc, kind, CODES) == ["FR", "DE", "ES", "US"]
            found = backend.store.find_all("geo")
            assert sorted(p.payload.code for p in found) == ["DE", "ES", "FR", "US"]
        assert main(["inspect", "--store", backend.url, "--name", "geo"]) == 0
        assert capsys.readouterr().out.splitlines()[-1].startswith("5 entries, ")
        assert dashboard_statuses(backend.store, clock, "geo") == [200] * 4
    finally:
        svc.close()
        backend.close()


@pytest.mark.parametrize("kind", KINDS)
def test_sqlite_names_and_keys_that_are_not_text_are_listed_and_harm_no_call(
    kind: str,
    tmp_path: Path,
    clock: FakeClock,
    registry: CollectorRegistry,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Rows another program wrote with a BLOB or non-UTF-8 name or key: the calls recover
    their own entries, and ``failover inspect`` and the dashboard list the table."""
    backend = SqliteBackend(tmp_path / "store.db", clock)
    svc = Service(backend, clock, registry)
    try:
        svc.seed()
        now = micros(clock())
        honest = backend.payload("geo", key("IT"))
        insert = (
            "INSERT INTO failover_store (name, key, as_of, expire_on, payload, payload_type) "
            "VALUES ({name}, {key}, ?, ?, ?, ?)"
        )
        for name, key_sql in [
            ("'geo'", "X'FF00'"),  # a BLOB key
            ("'geo'", "CAST(X'6BFF' AS TEXT)"),  # a key that is not UTF-8
            ("X'FF'", "'k'"),  # a BLOB name
            ("CAST(X'67FF' AS TEXT)", "'k'"),  # a name that is not UTF-8
        ]:
            sql = insert.format(name=name, key=key_sql)
            backend.execute(sql, now, now + HOUR_US, honest, COUNTRY)
        assert point_call(svc, kind, "IT") == Country("IT", "Italy")
        assert recovered_codes(svc, kind, CODES) == CODES
        assert main(["inspect", "--store", backend.url]) == 0
        out = capsys.readouterr().out
        # The rows under a name that is not text are not found by the name shown for it.
        assert out.splitlines()[-1].startswith("7 entries, ")
        assert main(["inspect", "--store", backend.url, "--name", "geo"]) == 0
        assert capsys.readouterr().out.splitlines()[-1].startswith("7 entries, ")
        assert dashboard_statuses(backend.store, clock, "geo") == [200] * 4
    finally:
        svc.close()
        backend.close()


# -- what failover inspect prints -----------------------------------------------------------------


def test_inspect_never_prints_control_characters_a_row_holds(
    backend: str, tmp_path: Path, clock: FakeClock, capsys: pytest.CaptureFixture[str]
) -> None:
    """A name, key or type written by hand with terminal escapes (clear the screen, set the
    window's title) is printed escaped, as a label already is: a listing of a suspect store
    must not drive the terminal that reads it."""
    made = backend_of(backend, tmp_path, clock)
    try:
        name, key_ = "geo\x1b[2J", "k\x1b]0;owned\x07"
        payload_type = "builtins.int\x1b[31m"
        if isinstance(made, RedisBackend):
            now = micros(clock())
            header = f"{now} {now + HOUR_US} {payload_type}\n".encode()
            made.put_value(name, key_, header + b"json:1")
        else:
            made.put(name, key_, "json:1", payload_type)
        assert main(["inspect", "--store", made.url]) == 0
        out = capsys.readouterr().out
        assert "\x1b" not in out
        assert "\x07" not in out
        assert "geo\\x1b[2J" in out
        assert "k\\x1b]0;owned\\x07" in out
        assert "builtins.int\\x1b[31m" in out
    finally:
        made.close()


@pytest.mark.parametrize("kind", KINDS)
def test_redis_index_members_that_are_not_utf8_harm_no_read_nor_listing(
    kind: str, clock: FakeClock, registry: CollectorRegistry, capsys: pytest.CaptureFixture[str]
) -> None:
    """A key in a name's indexes, and a name in the set of names, written by hand as bytes that
    are not UTF-8: reading every entry of the name (`find_all`), ``failover inspect``, the
    dashboard and ``failover clean`` go on with the entries they can read."""
    backend = RedisBackend(clock)
    svc = Service(backend, clock, registry)
    try:
        svc.seed()
        now = micros(clock())
        header = f"{now} {now + HOUR_US} {COUNTRY}\n".encode()
        backend.put_value("geo", b"\xff\xfe", header + b"json:1")
        backend.raw.sadd(backend.keys.names, b"\xc3\x28")
        assert point_call(svc, kind, "IT") == Country("IT", "Italy")
        assert recovered_codes(svc, kind, CODES) == CODES
        assert sorted(p.payload.code for p in backend.store.find_all("geo")) == sorted(CODES)
        assert main(["inspect", "--store", backend.url]) == 0
        # The key that is not UTF-8 names no entry once read as text: not listed.
        assert capsys.readouterr().out.splitlines()[-1].startswith("5 entries, ")
        assert dashboard_statuses(backend.store, clock, "geo") == [200] * 4
        assert main(["clean", "--store", backend.url]) == 0
    finally:
        svc.close()
        backend.close()


# -- pydantic models rebuilt from a row -----------------------------------------------------------


class Quote(pydantic.BaseModel):
    """A stored pydantic model (allowed through the annotation below)."""

    ccy: str
    rate: float


@pytest.mark.parametrize("fields_set", ["ccy", ["ccy"], None, {"__t": "set", "v": ["nope"]}])
@pytest.mark.parametrize("kind", KINDS)
def test_a_row_cannot_set_a_models_private_state(
    kind: str, fields_set: Any, tmp_path: Path, clock: FakeClock, registry: CollectorRegistry
) -> None:
    """`model_construct` takes the set of fields given as its ``_fields_set`` argument: a row
    naming it among the model's fields set pydantic's private state to whatever it held (text, a
    list, a set of fields the model has not), and the caller got a model whose
    ``model_dump(exclude_unset=True)`` or ``model_copy(update=...)`` raised, outside any
    failover. Such a row is corrupt: a miss."""
    backend = SqliteBackend(tmp_path / "store.db", clock)
    engine = Failover(backend.store, clock=clock, async_writes=False, metrics=registry)
    down = False

    @failover.failover("quote", engine=engine)
    def quote(ccy: str) -> Quote:
        if down:
            raise Down(ccy)
        return Quote(ccy=ccy, rate=1.5)

    @failover.failover("aquote", domain="quote", engine=engine)
    async def aquote(ccy: str) -> Quote:
        raise Down(ccy)

    try:
        assert quote("EUR") == Quote(ccy="EUR", rate=1.5)
        down = True
        fields = {"ccy": "EUR", "rate": 1.5, "_fields_set": fields_set}
        row = tagged(type_name(Quote), fields)
        backend.put("quote", make_key("quote", ("EUR",)), row, type_name(Quote))
        try:
            got = run(backend, kind, quote if kind == "sync" else aquote, "EUR")
        except Down as exc:
            got = exc
        assert_policy_answer(got)
    finally:
        engine.close()
        backend.close()
