"""Store URL schemes: one table for `make_store` and `per_tenant`, and a scheme of your own."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, ClassVar

import pytest

import failover
from failover import ConfigurationError, Failover, ReferentialPayload
from failover.payload import envelope
from failover.serialization.rows import Serializer
from failover.serialization.text import EntryText
from failover.stores import Capabilities, MultiTenantStore, register_scheme, schemes
from failover.stores.base import older
from failover.stores.factory import make_store, per_tenant, per_tenant_stores
from failover.stores.layers.tenant_stores import TenantStores

from .conftest import FakeClock, Upstream

ROOT = Path(__file__).resolve().parent.parent
Payload = ReferentialPayload[Any]

# A URL of each of the library's own schemes; none connects before its first use.
SAMPLES = {
    "memory": "memory://",
    "cachetools": "cachetools://",
    "redis": "redis://127.0.0.1:1/0",
    "rediss": "rediss://127.0.0.1:1/0",
    "unix": "unix:///nonexistent/redis.sock",
    "redis+sentinel": "redis+sentinel://127.0.0.1:1/master",
    "redis+cluster": "redis+cluster://127.0.0.1:1",
    "tiered+": "tiered+memory://",
}


@pytest.fixture(autouse=True)
def own_table(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test's registrations end with it."""
    monkeypatch.setattr(schemes, "_TABLE", dict(schemes._TABLE))


class KvStore(Capabilities):
    """Entries as strings in a dict, in the text format (as a key-value server keeps them)."""

    does_io = False
    made: ClassVar[list[KvStore]] = []

    def __init__(self, url: str, clock: Any = None) -> None:
        self.url = url
        self.text = EntryText(Serializer(owner=f"KvStore({url!r})"), clock)
        self.strings: dict[tuple[str, str], str] = {}
        KvStore.made.append(self)

    def store(self, payload: Payload) -> int:
        ident = (payload.name, payload.key)
        if older(payload, self.find(*ident)):
            return 1
        self.strings[ident] = self.text.value(payload)[0]
        return 0

    def store_many(self, payloads: Sequence[Payload]) -> int:
        return sum(self.store(p) for p in payloads)

    def find(self, name: str, key: str) -> Payload | None:
        raw = self.strings.get((name, key))
        return None if raw is None else self.text.load(name, key, raw)

    def find_many(self, name: str, keys: Iterable[str]) -> dict[str, Payload]:
        return self.text.decoded(name, ((k, self.strings.get((name, k))) for k in keys))

    def find_all(self, name: str) -> list[Payload]:
        pairs = [(k, raw) for (n, k), raw in self.strings.items() if n == name]
        return list(self.text.decoded(name, pairs).values())

    def delete(self, name: str, key: str) -> None:
        self.strings.pop((name, key), None)

    def clean_by_expiry(self, now: datetime) -> int:
        found = [self.find(*ident) for ident in self.strings]
        gone = [(p.name, p.key) for p in found if p and p.expire_on and p.expire_on <= now]
        for ident in gone:
            del self.strings[ident]
        return len(gone)

    def close(self) -> None:
        self.strings.clear()


def kv_per_tenant(url: str, clock: Any) -> TenantStores:
    return TenantStores(lambda tenant: KvStore(url, clock), False, f"kv per tenant ({url})")


@pytest.fixture
def kv() -> list[KvStore]:
    KvStore.made = []
    return KvStore.made


def test_make_store_and_per_tenant_share_one_table() -> None:
    register_scheme("kv", KvStore)  # no per-tenant maker
    rows = schemes.registered()
    assert {row.name for row in rows} == {*SAMPLES, "kv"}
    for row in rows:
        url = SAMPLES.get(row.name, f"{row.name}://here")
        made = make_store(url)
        made.close()
        assert row.shown in schemes.supported()
        if row.per_tenant is None:
            with pytest.raises(ConfigurationError, match=rf"scheme '{row.name}' has no per-tenant"):
                per_tenant(url)
        else:
            stores = per_tenant(url)
            assert callable(stores)
            stores.close()


@pytest.mark.parametrize("url", ["kv://here", "nosuch://host/db", "kv+tls://here"])
def test_an_unknown_scheme_is_refused_by_name_in_both(url: str) -> None:
    scheme = url.split("://", maxsplit=1)[0]
    for make in (make_store, per_tenant):
        with pytest.raises(ConfigurationError) as refused:
            make(url)
        text = str(refused.value)
        assert f"unknown scheme {scheme!r}" in text
        assert "supported: memory://, cachetools://" in text
        assert "unknown database or driver" not in text


def test_a_misspelt_scheme_gets_the_nearest_in_both() -> None:
    register_scheme("kvdb", KvStore, misspellings=["keyvalue"])
    for make in (make_store, per_tenant):
        with pytest.raises(ConfigurationError, match=r"'memroy' \(did you mean memory://\?\)"):
            make("memroy://")
        with pytest.raises(ConfigurationError, match=r"'keyvalue' \(did you mean kvdb://\?\)"):
            make("keyvalue://x")
        with pytest.raises(ConfigurationError, match=r"'kvbd' \(did you mean kvdb://\?\)"):
            make("kvbd://x")


def test_a_registered_scheme_through_make_store(kv: list[KvStore], clock: FakeClock) -> None:
    register_scheme("kv", KvStore, kv_per_tenant)
    store = make_store("kv://one", clock=clock)
    assert isinstance(store, KvStore)
    assert store.url == "kv://one"
    entry = envelope("n", "k", {"a": 1}, clock(), clock() + timedelta(hours=1), True)
    assert store.store(entry) == 0
    found = store.find("n", "k")
    assert found is not None
    assert found.payload == {"a": 1}
    assert "kv://" in schemes.supported()


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_a_registered_scheme_serves_stale_through_failover(
    kind: str, kv: list[KvStore], clock: FakeClock, upstream: Upstream
) -> None:
    register_scheme("kv", KvStore, kv_per_tenant)
    engine = Failover("kv://shop", clock=clock, metrics=False, async_writes=False)
    assert isinstance(engine.raw_store, KvStore)

    if kind == "sync":

        @failover.failover("country", engine=engine)
        def country(code: str) -> object:
            return upstream(code)

        assert country("FR") == "FR"
        upstream.fail()
        assert country.referential("FR").up_to_date is False
    else:

        @failover.failover("country", engine=engine)
        async def acountry(code: str) -> object:
            return upstream(code)

        assert await acountry("FR") == "FR"
        upstream.fail()
        assert (await acountry.referential("FR")).up_to_date is False
    assert kv[0].strings  # stored as text, in the KvStore
    engine.close()


def test_a_registered_scheme_per_tenant(
    kv: list[KvStore], clock: FakeClock, upstream: Upstream
) -> None:
    register_scheme("kv", KvStore, kv_per_tenant)
    engine = Failover(
        "kv://shop?max_tenants=5",
        tenant_resolver=failover.current_tenant,
        clock=clock,
        metrics=False,
        async_writes=False,
    )
    assert isinstance(engine.raw_store, MultiTenantStore)

    @failover.failover("country", engine=engine)
    def country(code: str) -> object:
        return upstream(code)

    with failover.tenant("acme"):
        assert country("FR") == "FR"
    with failover.tenant("globex"):
        assert country("DE") == "DE"
    upstream.fail()
    with failover.tenant("acme"):
        assert country.referential("FR").up_to_date is False
        with pytest.raises(ConnectionError):
            country("DE")  # globex's entry, not acme's
    assert sorted(len(store.strings) for store in kv) == [1, 1]
    assert all(store.url == "kv://shop" for store in kv)  # max_tenants is the router's
    engine.close()


def test_a_multi_tenant_engine_refuses_a_scheme_without_per_tenant_stores() -> None:
    register_scheme("kv", KvStore)
    with pytest.raises(ConfigurationError, match=r"'kv://shop'.*scheme 'kv' has no per-tenant"):
        Failover("kv://shop", tenant_resolver=failover.current_tenant, metrics=False)


@pytest.mark.parametrize(
    ("name", "why"),
    [("memory", "failover's own"), ("tiered+", "failover's own"), ("9kv", "not a URL scheme")],
)
def test_register_scheme_refuses(name: str, why: str) -> None:
    with pytest.raises(ConfigurationError, match=why):
        register_scheme(name, KvStore)


def test_an_in_process_scheme_of_your_own_is_per_tenant_stores_material() -> None:
    register_scheme("kv", KvStore, in_process=True)
    stores = per_tenant_stores("kv://x")
    assert isinstance(stores("acme"), KvStore)
    from failover.stores.opening import in_process

    assert in_process("kv://x")
    assert not in_process("redis://127.0.0.1:1/0")


def test_the_text_format_imports_without_redis_py() -> None:
    code = (
        "import sys\n"
        "sys.modules['redis'] = None\n"
        "from failover.serialization.text import EntryText, as_stored\n"
        "import failover\n"
        "print(as_stored(b'1000000 2000000 str\\tlbl\\nbody')[2:])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "('str', 'lbl', b'body')"
