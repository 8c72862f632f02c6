"""`RedisStore` on real ``redis-server`` processes (tests/redis_server.py): the keys it writes,
expiry by Redis itself, round trips counted on the real client, entries that must not decode,
outages (a server down at start, killed mid-load, hung), asyncio callers, tenants, two
processes, and the command line."""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import redis
from prometheus_client import CollectorRegistry

import failover
from failover.cli import main
from failover.errors import ConfigurationError, SerializationError, StoreError
from failover.payload import ReferentialPayload
from failover.serialization.crypto import FernetCipher
from failover.serialization.pickle_codec import PickleCodec
from failover.stores import MultiTenantStore, make_store
from failover.stores.backends.redis import RedisStore

from . import redis_ha, redis_server
from .conftest import FakeClock, Upstream
from .redis_server import RedisServer
from .test_sql_store import (
    PICKLE_KEY,
    Address,
    Invoice,
    Money,
    Tier,
    _hostile_rows,
    decorated,
    two_processes_share,
)
from .test_store_contract import entry

ROOT = Path(__file__).resolve().parent.parent
_MS = timedelta(milliseconds=1)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@pytest.fixture
def server() -> RedisServer:
    """The session's server (started on first use; the test is skipped without the binary)."""
    return redis_server.server()


@pytest.fixture
def raw(server: RedisServer) -> Iterator[Any]:
    """A plain redis-py client, for looking at what the store wrote."""
    client = server.client()
    yield client
    client.close()


@pytest.fixture
def make(server: RedisServer, clock: FakeClock) -> Iterator[Callable[..., RedisStore]]:
    """Makes stores on the session's server, each test under a key prefix of its own."""
    prefix = redis_server.unique_prefix()
    made: list[RedisStore] = []

    def factory(**kwargs: Any) -> RedisStore:
        kwargs.setdefault("prefix", prefix)
        kwargs.setdefault("clock", clock)
        store = RedisStore(kwargs.pop("url", server.url), **kwargs)
        made.append(store)
        return store

    yield factory
    for store in made:
        store.close()


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


@pytest.fixture
def own_server() -> Iterator[RedisServer]:
    """A server of the test's own, not started: the test starts, kills and restarts it."""
    server = RedisServer()
    yield server
    server.stop()


def ms(value: datetime) -> int:
    return (value - _EPOCH) // _MS


def now_ms() -> int:
    return int(time.time() * 1000)


# -- the keys and their expiry --------------------------------------------------------------------


def test_the_keys_it_writes(make: Callable[..., RedisStore], raw: Any, clock: FakeClock) -> None:
    store = make()
    before = now_ms()
    store.store(entry(clock, "k1", {"v": 1}, ttl=60))
    after = now_ms()
    key, index = f"{store.prefix}e:n:k1", f"{store.prefix}i:n"
    value = raw.get(key)
    header, _, payload = value.partition(b"\n")
    as_of, expire_on, payload_type = header.split(b" ")
    assert (int(as_of), int(expire_on)) == (ms(clock()) * 1000, ms(clock()) * 1000 + 60_000_000)
    assert (payload_type, payload) == (b"builtins.dict", b'json:{"v":1}')
    # The fake clock is months behind: the entry lives its 60 s on Redis's clock.
    expires = raw.execute_command("PEXPIRETIME", key)
    assert before + 60_000 - 2 <= expires <= after + 60_000 + 2
    assert raw.zrange(index, 0, -1, withscores=True) == [(b"k1", float(expires))]
    assert raw.execute_command("PEXPIRETIME", index) == expires
    assert raw.smembers(f"{store.prefix}names") == {b"n"}


def test_without_a_clock_an_entry_expires_at_its_expire_on(
    make: Callable[..., RedisStore], raw: Any
) -> None:
    store = make(clock=None)
    now = datetime.now(UTC)
    expire_on = now + timedelta(seconds=90, microseconds=123_456)
    store.store(ReferentialPayload("n", "k", 1, now, expire_on, True))
    assert raw.execute_command("PEXPIRETIME", f"{store.prefix}e:n:k") == ms(expire_on)
    found = store.find("n", "k")
    assert found is not None
    assert (found.as_of, found.expire_on) == (now, expire_on)


@pytest.mark.parametrize("where", ["server", "cluster"])
def test_delete_all_leaves_no_key_of_the_name(where: str, clock: FakeClock) -> None:
    url = redis_server.server().url if where == "server" else redis_ha.cluster().url
    store = RedisStore(url, prefix=redis_server.unique_prefix(), clock=clock)
    try:
        store.store_many(
            [entry(clock, "k1", 1, "a"), entry(clock, "k2", 2, "a"), entry(clock, "k1", 3, "b")]
        )
        assert store.delete_all("a") == 2
        raw: Any = store.client
        p = store.prefix
        # The name leaves the names index with its entries (a cluster too, where the index
        # is read first and its entries deleted per node), and its indexes go.
        assert raw.smembers(f"{p}names") == {b"b"}
        for key in (f"{p}e:a:k1", f"{p}e:a:k2", f"{p}i:a", f"{p}k:a"):
            assert not raw.exists(key), key
        assert store.names() == ["b"]
        assert [e.key for e in store.find_all("b")] == ["k1"]
        assert store.delete_all("a") == 0  # nothing left: still no name
        assert raw.smembers(f"{p}names") == {b"b"}
        store.store(entry(clock, "k3", 4, "a"))  # written again: listed again
        assert raw.smembers(f"{p}names") == {b"a", b"b"}
    finally:
        store.close()


def test_redis_expires_entries_and_the_index_forgets_them(
    make: Callable[..., RedisStore], raw: Any, clock: FakeClock
) -> None:
    store = make()
    store.store(entry(clock, "gone", ttl=-1))  # expired already: Redis drops it at once
    store.store(entry(clock, "kept", ttl=60))
    assert store.find("n", "gone") is None
    assert raw.zrange(f"{store.prefix}i:n", 0, -1) == [b"kept"]  # every write trims the index
    assert [p.key for p in store.find_all("n")] == ["kept"]
    assert store.clean_by_expiry(clock()) == 0  # nothing to do: Redis did it


def test_the_index_lives_as_long_as_its_longest_lived_entry(
    make: Callable[..., RedisStore], raw: Any, clock: FakeClock
) -> None:
    store = make()
    index = f"{store.prefix}i:n"
    store.store(entry(clock, "a", ttl=100))
    first = raw.execute_command("PEXPIRETIME", index)
    store.store(entry(clock, "b", ttl=10))  # a shorter-lived entry does not shorten it
    assert raw.execute_command("PEXPIRETIME", index) == first
    store.store(entry(clock, "c", ttl=1000))
    assert raw.execute_command("PEXPIRETIME", index) >= first + 899_000


def test_names_with_colons_never_share_a_key(
    make: Callable[..., RedisStore], clock: FakeClock
) -> None:
    store = make()
    store.store(entry(clock, "b:c", {"v": 1}, name="a"))
    store.store(entry(clock, "c", {"v": 2}, name="a:b"))
    one, two = store.find("a", "b:c"), store.find("a:b", "c")
    assert one is not None
    assert two is not None
    assert (one.payload, two.payload) == ({"v": 1}, {"v": 2})
    assert store.names() == ["a", "a:b"]
    assert [p.key for p in store.find_all("a:b")] == ["c"]


def test_prefixes_share_a_database_without_seeing_each_other(
    make: Callable[..., RedisStore], clock: FakeClock
) -> None:
    one, two = make(prefix="one:"), make(prefix="two:")
    one.store(entry(clock, "k", {"v": 1}))
    assert two.find("n", "k") is None
    assert two.find_all("n") == []
    assert two.names() == []


def test_annotated_result_types_round_trip_exactly(
    make: Callable[..., RedisStore], clock: FakeClock, upstream: Upstream
) -> None:
    engine, invoice = decorated(make(), clock, upstream, metrics=False)
    with engine:
        live = invoice(7)
        upstream.fail()
        clock.advance(60)
        stale = invoice.referential(7)
    assert stale.up_to_date is False
    assert stale.payload == live
    assert type(stale.payload) is Invoice
    assert type(stale.payload.customer.address) is Address
    assert type(stale.payload.total) is Money
    assert stale.payload.customer.tier is Tier.PAID


def test_signed_pickle_and_encryption(make: Callable[..., RedisStore], clock: FakeClock) -> None:
    key = FernetCipher.generate_key()
    sealed = make(codec=PickleCodec(PICKLE_KEY), cipher=FernetCipher(key))
    sealed.store(entry(clock, "k", {1: {"set"}}))
    found = make(codec=PickleCodec(PICKLE_KEY), cipher=FernetCipher(key)).find("n", "k")
    assert found is not None
    assert found.payload == {1: {"set"}}
    with pytest.raises(SerializationError, match="no cipher"):
        make().find("n", "k")


# -- one round trip -------------------------------------------------------------------------------


class CountingConnection(redis.Connection):
    """A real connection that counts what it sends: one send is one round trip."""

    sends = 0

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        CountingConnection.sends += 1
        super().send_packed_command(command, check_health)


def command_calls(raw: Any, command: str) -> int:
    stats = raw.info("commandstats").get(f"cmdstat_{command}", {})
    return int(stats.get("calls", 0))


def test_batches_are_one_round_trip(
    server: RedisServer, raw: Any, clock: FakeClock, make: Callable[..., RedisStore]
) -> None:
    pool = redis.ConnectionPool.from_url(server.url, connection_class=CountingConnection)
    client = redis.Redis(connection_pool=pool)
    store = make(url=client)
    client.ping()  # connected: the handshake is not counted below
    keys = [f"k{i}" for i in range(1000)]

    def round_trips(operation: Callable[[], Any]) -> tuple[int, Any]:
        CountingConnection.sends = 0
        result = operation()
        return CountingConnection.sends, result

    sent, _ = round_trips(lambda: store.store_many([entry(clock, k, {"k": k}) for k in keys]))
    assert sent == 1
    mgets, gets = command_calls(raw, "mget"), command_calls(raw, "get")
    sent, found = round_trips(lambda: store.find_many("n", [*keys, "absent"]))
    assert sent == 1
    assert (command_calls(raw, "mget"), command_calls(raw, "get")) == (mgets + 1, gets)
    assert len(found) == 1000
    assert found["k999"].payload == {"k": "k999"}
    assert round_trips(lambda: store.find("n", "k1"))[0] == 1
    assert round_trips(lambda: store.delete("n", "k1"))[0] == 1
    sent, listed = round_trips(lambda: store.find_all("n"))
    assert sent == 2  # the index, then its entries
    assert len(listed) == 999
    client.close()
    store.close()
    assert client.ping()  # a client given to the store is never closed by it


# -- entries that must not decode -----------------------------------------------------------------


def write_value(raw: Any, store: RedisStore, name: str, key: str, value: str | bytes) -> None:
    """An entry written by hand, bypassing the codec, listed in the name's index."""
    raw.set(f"{store.prefix}e:{name}:{key}", value, px=3_600_000)
    raw.zadd(f"{store.prefix}i:{name}", {key: now_ms() + 3_600_000})
    raw.sadd(f"{store.prefix}names", name)


def header(payload_type: str = "builtins.dict") -> str:
    now = int(time.time() * 1e6)
    return f"{now} {now + 3_600_000_000} {payload_type}\n"


HOSTILE = [
    *(pytest.param(row, id=row) for row in _hostile_rows(Path("x"))),
    pytest.param("no header", id="not a failover entry"),
    pytest.param("times are text", id="corrupt times"),
    pytest.param("not UTF-8", id="not UTF-8"),
]


def hostile_value(row: str, tmp_path: Path) -> tuple[str | bytes, str]:
    if row == "no header":
        return 'json:{"a":1}', "json"
    if row == "times are text":
        return 'soon later builtins.dict\njson:{"a":1}', "json"
    if row == "not UTF-8":
        return header().encode() + b"json:\xff\xfe", "json"
    text, reader = _hostile_rows(tmp_path)[row]
    return header() + text, reader


@pytest.mark.parametrize("row", HOSTILE)
def test_an_entry_that_cannot_be_decoded_is_a_miss_never_code(
    row: str,
    make: Callable[..., RedisStore],
    raw: Any,
    clock: FakeClock,
    upstream: Upstream,
    registry: CollectorRegistry,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    value, reader = hostile_value(row, tmp_path)
    options: dict[str, dict[str, Any]] = {
        "json": {},
        "pickle": {"codec": PickleCodec(PICKLE_KEY)},
        "fernet": {"cipher": FernetCipher(FernetCipher.generate_key())},
    }
    store = make(**options[reader])
    engine, invoice = decorated(store, clock, upstream, metrics=registry)
    with engine:
        key = invoice.referential(1).key
        write_value(raw, store, "billing.invoice", key, value)
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
    assert not (tmp_path / "pwned").exists()
    outcome = {"name": "billing.invoice", "outcome": "error"}
    assert registry.get_sample_value("failover_recoveries_total", outcome) == 1


@pytest.mark.parametrize("sealing", ["pickle", "fernet"])
def test_an_entry_moved_under_another_key_is_refused(
    sealing: str, make: Callable[..., RedisStore], raw: Any, clock: FakeClock
) -> None:
    options: dict[str, Any] = (
        {"codec": PickleCodec(PICKLE_KEY)}
        if sealing == "pickle"
        else {"cipher": FernetCipher(FernetCipher.generate_key())}
    )
    store = make(**options)
    store.store(entry(clock, "mine", {"owner": "mine"}))
    raw.copy(f"{store.prefix}e:n:mine", f"{store.prefix}e:n:theirs")  # signed for "mine" only
    with pytest.raises(SerializationError, match="cannot be decoded"):
        store.find("n", "theirs")
    found = store.find("n", "mine")
    assert found is not None
    assert found.payload == {"owner": "mine"}


def test_a_key_of_another_type_is_a_store_error_and_a_miss(
    make: Callable[..., RedisStore], raw: Any
) -> None:
    store = make()
    raw.hset(f"{store.prefix}e:n:k", "field", "value")  # not ours: a hash where an entry goes
    with pytest.raises(StoreError, match="find failed"):
        store.find("n", "k")
    assert store.find_many("n", ["k"]) == {}  # MGET answers nothing for a key of another type


# -- outages --------------------------------------------------------------------------------------


def test_a_service_starts_while_redis_is_down_and_answers_live(
    own_server: RedisServer,
    clock: FakeClock,
    upstream: Upstream,
    registry: CollectorRegistry,
) -> None:
    engine = failover.Failover(own_server.url, clock=clock, metrics=registry)  # not started

    @failover.failover("svc.rates", engine=engine)
    def rate(ccy: str) -> dict[str, str]:
        return upstream({"ccy": ccy})  # type: ignore[return-value]

    with engine:
        assert rate("EUR") == {"ccy": "EUR"}  # live, while its write fails
        assert not engine.flush(timeout=10)  # tried: it waits for Redis, retried
        assert not registry.get_sample_value("failover_async_writes_failed_total")
        upstream.fail()
        # Redis is down, but the write waiting for it is still seen (read-your-writes).
        assert rate("EUR") == {"ccy": "EUR"}

        own_server.start()
        upstream.recover()
        assert rate("EUR") == {"ccy": "EUR"}
        assert engine.flush(timeout=10)
        upstream.fail()
        stale = rate.referential("EUR")
    assert stale.up_to_date is False
    assert stale.payload == {"ccy": "EUR"}


def test_redis_killed_mid_load_and_restarted(
    own_server: RedisServer, upstream: Upstream, registry: CollectorRegistry
) -> None:
    own_server.start()
    engine = failover.Failover(own_server.url, metrics=registry)  # the wall clock

    @failover.failover("load.rates", engine=engine)
    def rate(ccy: str) -> dict[str, str]:
        return upstream({"ccy": ccy})  # type: ignore[return-value]

    progress = threading.Condition()
    done = [0]
    stop = threading.Event()
    errors: list[BaseException] = []

    def load(worker: int) -> None:
        i = 0
        while not stop.is_set():
            try:
                assert rate(f"{worker}-{i % 50}") == {"ccy": f"{worker}-{i % 50}"}
            except BaseException as exc:  # collected and re-raised on the main thread
                errors.append(exc)
                return
            i += 1
            with progress:
                done[0] += 1
                progress.notify_all()

    def after(calls: int) -> None:
        with progress:
            target = done[0] + calls
            assert progress.wait_for(lambda: done[0] >= target or errors, timeout=20)

    workers = [threading.Thread(target=load, args=(w,)) for w in range(4)]
    with engine:
        for worker in workers:
            worker.start()
        try:
            after(200)
            own_server.kill()
            after(200)  # every call answers live while Redis is gone
            # The writes queued meanwhile are tried (and fail) before Redis comes back: without
            # this the worker could still be on an earlier batch when the server returns.
            engine.flush(timeout=20)  # tried; what Redis refused waits for it, retried
            own_server.start()
            after(200)
        finally:
            stop.set()
            for worker in workers:
                worker.join(timeout=20)
        assert errors == []
        assert engine.flush(timeout=10)
        # The writes made while Redis was gone: retried once it was back, none given up.
        assert not registry.get_sample_value("failover_async_writes_failed_total")
        assert rate("after-restart") == {"ccy": "after-restart"}
        assert engine.flush(timeout=10)
        upstream.fail()
        stale = rate.referential("after-restart")  # written and read back after the restart
    assert stale.up_to_date is False


def test_a_hung_redis_costs_at_most_the_socket_timeout(
    make: Callable[..., RedisStore], raw: Any
) -> None:
    store = make(socket_timeout=0.2)
    assert store.find("n", "k") is None  # connected
    raw.execute_command("CLIENT", "PAUSE", 800, "ALL")  # UNPAUSE waits it out too
    try:
        # Without the socket timeout the read would wait out the pause and find nothing.
        with pytest.raises(StoreError, match="find failed"):
            store.find("n", "k")
    finally:
        raw.execute_command("CLIENT", "UNPAUSE")


async def test_an_asyncio_caller_never_blocks_its_loop_on_redis(
    make: Callable[..., RedisStore], raw: Any, clock: FakeClock, upstream: Upstream
) -> None:
    engine = failover.Failover(make(), clock=clock, metrics=False)

    @failover.failover("async.rates", engine=engine)
    async def rate(ccy: str) -> dict[str, str]:
        return upstream({"ccy": ccy})  # type: ignore[return-value]

    with engine:
        await rate("EUR")
        assert engine.flush(timeout=10)
        upstream.fail()
        raw.execute_command("CLIENT", "PAUSE", 300, "ALL")  # Redis answers nobody for 300 ms
        call = asyncio.create_task(rate.referential("EUR"))
        for _ in range(5):
            await asyncio.sleep(0)  # the loop turns: the call waits on a worker thread
        assert not call.done()
        stale = await call
    assert stale.up_to_date is False
    assert stale.payload == {"ccy": "EUR"}


# -- URLs and settings ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "redis://127.0.0.1:1/0",
        "rediss://user:hunter2@127.0.0.1:1/3",
        "unix:///no/such/redis.sock?db=2",
        "redis://127.0.0.1:1/0?prefix=app:&socket_timeout=0.5",
    ],
)
def test_make_store_makes_redis_stores_without_connecting(url: str) -> None:
    store = make_store(url)
    assert isinstance(store, RedisStore)
    assert "hunter2" not in repr(store)
    assert store.does_io is True
    assert store.isolating is True
    store.close()


def test_the_prefix_option_of_a_url(server: RedisServer) -> None:
    store = make_store(f"{server.url}?prefix=app:")
    assert isinstance(store, RedisStore)
    assert store.prefix == "app:"
    assert RedisStore(f"{server.url}?prefix=app:", prefix="app:").prefix == "app:"
    with pytest.raises(ConfigurationError, match="disagree"):
        RedisStore(f"{server.url}?prefix=app:", prefix="other:")
    store.close()


def test_a_unix_socket(server: RedisServer, clock: FakeClock) -> None:
    url = f"unix://{server.socket}?db=0&prefix={redis_server.unique_prefix()}"
    store = make_store(url, clock=clock)
    store.store(entry(clock, "k", {"v": 1}))
    found = store.find("n", "k")
    assert found is not None
    assert found.payload == {"v": 1}
    store.close()


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("redis://h/0?nosuch=1", "an option redis-py refuses"),
        ("redis://:hunter2@h/0?socket_timeout=soon", "socket_timeout"),
        ("redis://h/zero", "the database must be a number"),
        ("redis://h/0?prefix=with%20space", "prefix must be printable ASCII"),
    ],
)
def test_bad_urls_are_one_line_configuration_errors(url: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message) as raised:
        make_store(url)
    assert "\n" not in str(raised.value)
    assert "hunter2" not in str(raised.value)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"prefix": 3},
        {"socket_timeout": 0},
        {"socket_timeout": float("inf")},
        {"clock": "now"},
        {"codec": object()},
        {"cipher": object()},
        {"allowed_types": [1]},
        {"allowed_types": int},  # a type, not a list of them
    ],
)
def test_bad_settings_are_configuration_errors(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ConfigurationError, match="RedisStore") as raised:
        RedisStore("redis://127.0.0.1:1/0", **kwargs)
    assert next(iter(kwargs)) in str(raised.value)  # the setting is named


def test_not_a_url_nor_a_client() -> None:
    with pytest.raises(ConfigurationError, match=r"redis\.Redis client"):
        RedisStore(42)  # type: ignore[arg-type]


# -- tenants --------------------------------------------------------------------------------------


def test_one_key_prefix_per_tenant_one_client(
    server: RedisServer, raw: Any, clock: FakeClock
) -> None:
    base = redis_server.unique_prefix()
    factory = RedisStore.per_tenant(server.url, prefix=base, clock=clock)
    tenants = MultiTenantStore(factory)
    for tenant in ("acme", "globex"):
        with failover.tenant(tenant):
            tenants.store(entry(clock, "k", {"tenant": tenant}))
    for tenant in ("acme", "globex"):
        with failover.tenant(tenant):
            found = tenants.find("n", "k")
            assert found is not None
            assert found.payload == {"tenant": tenant}
        assert raw.exists(f"{base}t:{tenant}:e:n:k") == 1
    acme, globex = tenants.stores["acme"], tenants.stores["globex"]
    assert isinstance(acme, RedisStore)
    assert isinstance(globex, RedisStore)
    assert acme.client is globex.client
    with failover.tenant("../etc"), pytest.raises(StoreError, match="cannot name"):
        tenants.find("n", "k")
    tenants.close()


def test_tenant_prefixes_given_by_hand(server: RedisServer, clock: FakeClock) -> None:
    with pytest.raises(ConfigurationError, match="share the prefix"):
        RedisStore.per_tenant(server.url, {"a": "same:", "b": "same:"})
    factory = RedisStore.per_tenant(server.url, {"acme": redis_server.unique_prefix()})
    with pytest.raises(StoreError, match="no key prefix for tenant 'globex'"):
        factory("globex")
    factory.close()


def test_the_engine_routes_a_redis_url_per_tenant(
    server: RedisServer, raw: Any, clock: FakeClock, upstream: Upstream
) -> None:
    base = redis_server.unique_prefix()
    engine = failover.Failover(
        f"{server.url}?prefix={base}",
        tenant_resolver=lambda: "acme",
        clock=clock,
        metrics=False,
    )

    @failover.failover("t.rates", engine=engine)
    def rate(ccy: str) -> dict[str, str]:
        return upstream({"ccy": ccy})  # type: ignore[return-value]

    with engine:
        rate("EUR")
        assert engine.flush(timeout=10)
    assert raw.smembers(f"{base}t:acme:names") == {b"t.rates"}


# -- two processes, one store ---------------------------------------------------------------------


def test_two_processes_share_one_redis_store(server: RedisServer) -> None:
    two_processes_share(f"{server.url}?prefix={redis_server.unique_prefix()}", "")


# -- the command line -----------------------------------------------------------------------------


def test_inspect_and_clean_a_redis_store(
    server: RedisServer, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"{server.url}?prefix={redis_server.unique_prefix()}"
    store = make_store(url)
    now = datetime.now(UTC)
    for name in ("countries", "rates"):
        store.store(ReferentialPayload(name, "k", {"n": name}, now, now + timedelta(hours=1), True))
    store.close()
    assert main(["inspect", "--store", url]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["name", "key", "as_of", "expire_on", "size", "type", "status"]
    rows = [line.split() for line in lines[2:-2]]
    assert [(r[0], r[1], r[-2], r[-1]) for r in rows] == [
        ("countries", "k", "builtins.dict", "live"),
        ("rates", "k", "builtins.dict", "live"),
    ]
    assert lines[-1] == "2 entries, 0 expired"
    assert main(["inspect", "--store", url, "--name", "rates"]) == 0
    assert "countries" not in capsys.readouterr().out
    assert main(["clean", "--store", url]) == 0
    out = capsys.readouterr().out.strip()
    assert out == "removed 0 expired entries (Redis removes expired entries itself)"


def test_the_command_line_on_an_unreachable_redis(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", "--store", "redis://:hunter2@127.0.0.1:1/0"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("failover: error: cannot reach redis://:***@127.0.0.1:1/0")
    assert len(err.splitlines()) == 1
    assert main(["clean", "--store", "redis://127.0.0.1:1/0", "--table-prefix", "x_"]) == 1
    assert "prefix option" in capsys.readouterr().err
    assert main(["inspect", "--store", "tiered+redis://127.0.0.1:1/0"]) == 1
    assert "--store redis://127.0.0.1:1/0" in capsys.readouterr().err


@pytest.mark.parametrize("tiered", ["", "tiered+"])
def test_the_demo_on_a_redis_store(
    tiered: str, server: RedisServer, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"{server.url}?prefix={redis_server.unique_prefix()}"
    assert main(["demo", "--store", tiered + url]) == 0
    out = capsys.readouterr().out
    assert f"failover inspect --store {url}" in out
    # Redis expires the entries on the demo's clock: served stale within the ttl, not after.
    assert re.findall(r"^\d+\s.*\s(live|stale|error)$", out, flags=re.MULTILINE) == [
        "live", "stale", "stale", "live", "error", "error", "live",
    ]  # fmt: skip


def test_the_dashboard_of_a_redis_store(make: Callable[..., RedisStore], clock: FakeClock) -> None:
    from werkzeug.test import Client

    from failover.dashboard import make_store_app

    from .test_dashboard import get

    store = make()
    store.store_many([entry(clock, f"k{i:03d}", {"i": i}, name="rates") for i in range(60)])
    store.store(entry(clock, "FR", {"code": "FR"}, name="countries"))
    clock.advance(30)
    client = Client(make_store_app(store, clock, show_payloads=True))
    names = json.loads(get(client, "/api/failovers")[2])["names"]
    assert [(n["name"], n["entries"], n["live"]) for n in names] == [
        ("countries", 1, 1),
        ("rates", 60, 60),
    ]
    assert names[1]["oldest_as_of"] == (clock() - timedelta(seconds=30)).isoformat()
    page = json.loads(get(client, "/api/entries?name=rates&limit=50")[2])
    assert (page["total"], len(page["entries"]), page["next_after"]) == (60, 50, "k049")
    assert page["entries"][0]["payload"] == 'json:{"i":0}'  # as stored, not decoded
    rest = json.loads(get(client, "/api/entries?name=rates&limit=50&after=k049")[2])
    assert [e["key"] for e in rest["entries"]] == [f"k{i:03d}" for i in range(50, 60)]
    assert rest["next_after"] is None


def test_a_dashboard_page_reads_only_its_entries(
    make: Callable[..., RedisStore], clock: FakeClock, raw: Any
) -> None:
    from werkzeug.test import Client

    from failover.dashboard import make_store_app

    from .test_dashboard import get

    store = make()
    big = "x" * 20_000
    store.store_many([entry(clock, f"k{i:03d}", {"v": big}, name="rates") for i in range(200)])
    client = Client(make_store_app(store, clock))
    before = raw.info("stats")["total_net_output_bytes"]
    page = json.loads(get(client, "/api/entries?name=rates&limit=10&after=k100")[2])
    sent = raw.info("stats")["total_net_output_bytes"] - before
    assert [e["key"] for e in page["entries"]] == [f"k{i:03d}" for i in range(101, 111)]
    assert (page["total"], page["next_after"]) == (200, "k110")
    assert sent < 11 * 20_000 + 50_000  # the page's values, not the 4 MB of the name
