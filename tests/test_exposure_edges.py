"""Exposure edges (issue 27): secrets in store URLs, published health rows, the dashboard beyond
loopback, tenants without end, keys of any str, and argument values in log lines.

Real stores throughout: SQLite files, the session's PostgreSQL and redis-server (and a
redis-server of this module's own, with a password); the dashboard served on loopback and read
over HTTP; the command line run as a subprocess.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import failover
from failover import Failover
from failover.cli import main
from failover.dashboard import make_store_app, make_wsgi_app
from failover.engine import utcnow
from failover.errors import StoreError
from failover.keys import key_tag, make_key
from failover.payload import envelope
from failover.scatter import ListSplitter
from failover.stores import per_tenant_tables
from failover.stores.backends.redis import RedisStore
from failover.stores.backends.sql import SqlStore
from failover.stores.factory import per_tenant
from failover.stores.health_rows import FailoverSummary, ProcessHealth
from failover.stores.layers.routing import MultiTenantStore, TenantStoreFactory

from . import postgres, redis_server
from .conftest import FakeClock
from .own_servers import running
from .servers import fetch, serve_wsgi
from .test_cli import free_port
from .test_lifecycle_edges import _in_child

SECRETS = ("hunter2", "s3cr3t", "t0k3n", "k3y", "4cc355")


def shows_no_secret(text: str) -> None:
    for secret in SECRETS:
        assert secret not in text, text


# -- 1. secrets in store URLs: one masking everywhere ----------------------------------------------


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        (
            "postgresql+psycopg://app:hunter2@db/x?sslpassword=s3cr3t&sslmode=require",
            "postgresql+psycopg://app:***@db/x?sslpassword=***&sslmode=require",
        ),
        ("redis://:hunter2@h:6379/0?password=s3cr3t", "redis://:***@h:6379/0?password=***"),
        (
            "redis://h/0?token=t0k3n&api_key=k3y&access_key=4cc355&prefix=a:",
            "redis://h/0?token=***&api_key=***&access_key=***&prefix=a:",
        ),
        ("sqlite:////tmp/a.db?client_secret=s3cr3t&auth=hunter2", None),
        ("postgresql://u:hun?ter2#@h/d", "postgresql://u:***@h/d"),  # "?" in a password
        ("tiered+redis://:hunter2@h/0", "tiered+redis://:***@h/0"),
        ("sqlite:////tmp/a@b.db", "sqlite:////tmp/a@b.db"),
    ],
)
def test_one_masking_hides_the_password_and_every_secret_option(url: str, shown: str) -> None:
    from failover.cli.common import display

    masked = display(url)
    shows_no_secret(masked)
    if shown is not None:
        assert masked == shown


def _pg_url_with_secrets(postgres_url: str) -> str:
    # The server trusts local connections: the password is sent and ignored, so the store works.
    user, _, rest = postgres_url.partition("@")
    return f"{user}:hunter2@{rest}?sslpassword=s3cr3t&application_name=exposure"


def test_a_postgresql_store_shows_no_secret_in_its_repr_the_dashboard_and_errors(
    postgres_url: str, clock: FakeClock
) -> None:
    url = _pg_url_with_secrets(postgres_url)
    store = SqlStore(url, table_prefix="exposure_")
    try:
        shows_no_secret(repr(store))
    finally:
        store.close()
    with Failover(url, metrics=False, async_writes=False, clock=clock) as eng:

        @failover.failover("masked", engine=eng)
        def masked(x: int) -> int:
            return x

        assert masked(1) == 1
        shows_no_secret(repr(eng.raw_store))
        with serve_wsgi(make_wsgi_app(eng)) as base:
            status, body = fetch(f"{base}/api/failovers")
            assert status == 200
            assert "sslpassword=***" in json.loads(body)["store"]
            shows_no_secret(body)
            status, page = fetch(f"{base}/")
            assert status == 200
            shows_no_secret(page)
    # A refused option in an error message.
    with pytest.raises(failover.ConfigurationError) as refused:
        SqlStore(url + "&pgbouncer=nonsense")
    shows_no_secret(str(refused.value))


@pytest.fixture(scope="module")
def redis_with_password() -> Iterator[redis_server.RedisServer]:
    server = redis_server.RedisServer()
    for started in running(server):
        started.client().config_set("requirepass", "hunter2")
        yield started


def test_a_redis_store_with_a_password_option_shows_no_secret(
    redis_with_password: redis_server.RedisServer, clock: FakeClock
) -> None:
    port = redis_with_password.port
    url = f"redis://127.0.0.1:{port}/0?password=hunter2&prefix=exp:"
    with Failover(url, metrics=False, async_writes=False, clock=clock) as eng:

        @failover.failover("masked", engine=eng)
        def masked(x: int) -> int:
            return x

        assert masked(2) == 2  # the password works: the entry is stored
        assert eng.raw_store.find_all("masked")
        assert "password=***" in repr(eng.raw_store)
        shows_no_secret(repr(eng.raw_store))
    with pytest.raises(failover.ConfigurationError) as refused:
        RedisStore(f"redis://:hunter2@127.0.0.1:{port}/x?token=t0k3n")
    shows_no_secret(str(refused.value))


def test_the_command_line_shows_no_secret(
    redis_with_password: redis_server.RedisServer, capsys: pytest.CaptureFixture[str]
) -> None:
    port = redis_with_password.port
    url = f"redis://127.0.0.1:{port}/0?password=hunter2&prefix=cli:"
    assert main(["inspect", "--store", url]) == 0
    out = capsys.readouterr().out
    assert "password=***" in out
    shows_no_secret(out)
    # Unreachable: the error line names the store, masked.
    unreachable = "redis://:hunter2@127.0.0.1:1/0?password=s3cr3t"
    assert main(["inspect", "--store", unreachable]) == 1
    err = capsys.readouterr().err
    assert "cannot reach redis://:***@127.0.0.1:1/0?password=***" in err
    shows_no_secret(err)


# -- 3. the dashboard beyond loopback; the token and the URL from the environment -----------------


@pytest.mark.parametrize("payloads", [[], ["--show-payloads"]])
def test_the_dashboard_refuses_to_serve_beyond_loopback_without_a_token(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    payloads: list[str],
) -> None:
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    SqlStore(url).close()
    monkeypatch.delenv("FAILOVER_DASHBOARD_TOKEN", raising=False)
    # 192.0.2.1 (a documentation address) is none of this machine's: were the command to go on,
    # it could not listen there, and would say so instead.
    command = ["dashboard", "--store", url, "--host", "192.0.2.1", "--port", "8050", *payloads]
    assert main(command) == 1
    err = capsys.readouterr().err
    assert err.startswith("failover: error: refusing to serve the dashboard on 192.0.2.1")
    assert "FAILOVER_DASHBOARD_TOKEN" in err
    assert "--insecure" in err
    # A token from the environment lifts the refusal: it goes on to listen.
    monkeypatch.setenv("FAILOVER_DASHBOARD_TOKEN", "t0k3n")
    assert main(command) == 1
    err = capsys.readouterr().err
    assert "cannot listen on 192.0.2.1:8050" in err
    assert "refusing" not in err


def test_the_dashboard_command_on_every_address_without_a_token_exits_at_once(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    SqlStore(url).close()
    env = {k: v for k, v in os.environ.items() if k != "FAILOVER_DASHBOARD_TOKEN"}
    command = ["dashboard", "--store", url, "--host", "0.0.0.0", "--port", str(free_port())]
    done = subprocess.run(
        [sys.executable, "-m", "failover", *command, "--show-payloads"],
        capture_output=True,
        text=True,
        env=env,
        timeout=30,  # a hang guard: before the fix, it served (with a warning) until stopped
        check=False,
    )
    assert done.returncode == 1
    assert done.stderr.startswith("failover: error: refusing to serve the dashboard on 0.0.0.0")
    assert done.stdout == ""


def test_the_dashboard_takes_its_token_and_store_from_the_environment(
    postgres_url: str,
) -> None:
    url = _pg_url_with_secrets(postgres_url)
    with Failover(url, metrics=False, async_writes=False) as eng:
        failover.failover("rates", engine=eng)(_rate)("EUR")
    port = free_port()
    env = {**os.environ, "FAILOVER_STORE": url, "FAILOVER_DASHBOARD_TOKEN": "t0k3n"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "failover", "dashboard", "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout is not None
        started = proc.stdout.readline()
        assert f"on http://127.0.0.1:{port}/" in started, started
        shows_no_secret(" ".join(map(str, proc.args)))  # nothing secret in the process list
        shows_no_secret(started)
        base = f"http://127.0.0.1:{port}"
        assert fetch(f"{base}/api/failovers")[0] == 401
        status, body = fetch(f"{base}/api/failovers", {"Authorization": "Bearer t0k3n"})
        assert status == 200
        assert "rates" in [n["name"] for n in json.loads(body)["names"]]
        shows_no_secret(body)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    shows_no_secret(out + err)


def _rate(currency: str) -> float:
    return 1.0


# -- 2. published health rows: bounded, one bad row never breaks the page -------------------------


def _row(clock: FakeClock, process: str, **counts: int) -> ProcessHealth:
    now = clock()
    return ProcessHealth(
        process,
        "web-1",
        1234,
        now,
        now,
        now + timedelta(hours=1),  # the writer picks the expiry
        "up",
        60,
        {"rates": FailoverSummary("up", **counts)},
    )


def _hostile_rows(clock: FakeClock) -> list[ProcessHealth]:
    good = _row(clock, "good", live=3, stale=1)
    return [
        good,
        _row(clock, "huge", live=10**400),
        _row(clock, "big", stale=2**64),
        ProcessHealth("pid", "h", 10**30, clock(), clock(), good.expire_on, "up", 60, {}),
        ProcessHealth("window", "h", 1, clock(), clock(), good.expire_on, "up", 10**40, {}),
        ProcessHealth("host", "h" * 100_000, 1, clock(), clock(), good.expire_on, "up", 60, {}),
    ]


@pytest.fixture(params=["sqlite", "postgresql", "redis"])
def health_store(request: pytest.FixtureRequest, tmp_path: Path, clock: FakeClock) -> Iterator[Any]:
    if request.param == "sqlite":
        store: Any = SqlStore(f"sqlite:///{tmp_path / 'health.db'}")
    elif request.param == "postgresql":
        store = postgres.pg_store()  # tables of its own
    else:
        server = redis_server.server()
        store = RedisStore(f"{server.url}?prefix={redis_server.unique_prefix()}", clock=clock)
    try:
        yield store
    finally:
        store.close()


def test_a_row_with_a_huge_count_never_breaks_the_store_dashboard(
    health_store: Any, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    for row in _hostile_rows(clock):
        health_store.publish_health(row)
    with (
        caplog.at_level(logging.WARNING, "failover"),
        serve_wsgi(make_store_app(health_store, clock)) as base,
    ):
        status, page = fetch(f"{base}/")
        assert status == 200, page
        assert "unreadable" in page
        assert "5 health rows cannot be read" in page
        status, body = fetch(f"{base}/api/failovers")
        assert status == 200, body
        cluster = json.loads(body)["cluster"]
    first, *read = cluster["processes"]
    assert first["status"] == "unreadable"
    assert first["problem"].startswith("5 health rows cannot be read")
    assert [p["process"] for p in read] == ["good"]
    assert cluster["totals"]["processes"] == 1
    assert cluster["failovers"][0]["live"] == 3  # the bad rows are never added up
    assert cluster["status"] == "up"


# -- 4. tenants without end: max_tenants ----------------------------------------------------------


TENANT_BACKENDS = ["sqlite", "postgresql", "redis"]


def _tenant_engine(
    tmp_path: Path, clock: FakeClock, most: int, backend: str = "sqlite"
) -> tuple[Failover, TenantStoreFactory]:
    """An engine routed by tenant over ``backend`` keeping ``most`` tenants' stores open, and
    its tenants' store factory (a fresh store of a tenant reads what the engine wrote)."""
    factory: TenantStoreFactory
    if backend == "sqlite":
        factory = per_tenant(f"sqlite:///{tmp_path / 'tenants.db'}?max_tenants={most}")
    elif backend == "postgresql":
        prefix = postgres.unique_prefix()  # the session's database: tables of this test's own
        tables = per_tenant_tables(postgres.server().url, {t: f"{prefix}{t}_" for t in "abcd"})
        tables.max_tenants = most
        factory = tables
    else:
        url = f"{redis_server.server().url}?prefix={redis_server.unique_prefix()}"
        factory = per_tenant(f"{url}&max_tenants={most}", clock=clock)
    engine = Failover(factory, tenant_resolver=failover.current_tenant, metrics=False, clock=clock)
    return engine, factory


@pytest.mark.parametrize("backend", TENANT_BACKENDS)
def test_past_max_tenants_the_least_recently_used_tenant_store_is_closed_after_its_writes(
    backend: str, tmp_path: Path, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    down: list[bool] = []
    eng, factory = _tenant_engine(tmp_path, clock, 2, backend)
    with eng:
        router = eng.store
        assert isinstance(router, MultiTenantStore)
        assert router.max_tenants == 2

        @failover.failover("quote", engine=eng)
        def quote(symbol: str) -> str:
            if down:
                raise ConnectionError("down")
            return f"{failover.current_tenant()}:{symbol}"

        with caplog.at_level(logging.WARNING, "failover"):
            for tenant in ("a", "b", "a", "c", "d"):  # b then a are the least recently used
                with failover.tenant(tenant):
                    assert quote("X") == f"{tenant}:X"
        assert sorted(router.stores) == ["c", "d"]
        assert router.closed_tenants == 2
        closing = [r for r in caplog.records if "least recently used" in r.getMessage()]
        assert len(closing) == 1  # logged once
        # Their queued writes were flushed before they closed: in the file, under their tables.
        for tenant in ("a", "b"):
            seen = factory(tenant)
            try:
                assert len(seen.find_all("quote")) == 1
            finally:
                seen.close()
        down.append(True)
        with failover.tenant("a"):  # made again: its entry recovered
            recovered = quote.referential("X")
            assert (recovered.payload, recovered.up_to_date) == ("a:X", False)
        assert router.closed_tenants == 3


class _Held(SqlStore):
    """A SqlStore whose reads wait until the test lets them go: a call using its store."""

    def __init__(self, url: str, **kwargs: Any) -> None:
        super().__init__(url, **kwargs)
        self.entered = threading.Event()
        self.release = threading.Event()
        self.closes = 0

    def find(self, name: str, key: str) -> Any:
        self.entered.set()
        assert self.release.wait(10), "never released"
        return super().find(name, key)

    def close(self) -> None:
        self.closes += 1
        super().close()


class _Factory:
    """One tenant's `_Held` store per tenant, in one SQLite file; declares ``max_tenants``."""

    def __init__(self, path: Path, most: int) -> None:
        self.url = f"sqlite:///{path}"
        self.max_tenants = most
        self.made: dict[str, _Held] = {}

    def __call__(self, tenant: str) -> _Held:
        store = self.made[tenant] = _Held(self.url, table_prefix=f"{tenant}_")
        return store


def test_a_store_in_use_is_never_closed_and_a_new_tenant_is_refused_meanwhile(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    factory = _Factory(tmp_path / "held.db", 1)
    router = MultiTenantStore(factory)
    assert router.max_tenants == 1  # the factory's own
    with failover.tenant("a"):
        router.store(_payload())  # a's store made (writes are not held)
    held = factory.made["a"]

    def read_as_a() -> None:
        with failover.tenant("a"):
            router.find("n", "k")

    reader = threading.Thread(target=read_as_a)
    reader.start()
    try:
        assert held.entered.wait(10)  # a's store is in use
        with caplog.at_level(logging.WARNING, "failover"):
            for _ in range(2):
                with failover.tenant("b"), pytest.raises(StoreError, match="max_tenants=1"):
                    router.find("n", "k")
        assert router.refused_tenants == 2
        assert held.closes == 0  # in use: never closed
        assert "b" not in factory.made
        refusals = [r for r in caplog.records if "every one is in use" in r.getMessage()]
        assert len(refusals) == 1  # logged once
    finally:
        held.release.set()
        reader.join(10)
    assert not reader.is_alive()
    with failover.tenant("b"):  # a is idle now: closed to make room for b
        router.store(_payload())
    assert held.closes == 1
    assert router.closed_tenants == 1
    assert sorted(router.stores) == ["b"]
    router.close()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="POSIX only")
def test_a_child_forked_while_every_tenant_store_is_in_use_serves_a_new_tenant(
    tmp_path: Path,
) -> None:
    """max_tenants=1 and a's store held by a read at the fork: the child inherits no in-use
    count (the reading thread is the parent's and never releases it there), so a new tenant
    evicts a instead of being refused for the child's whole life."""
    factory = _Factory(tmp_path / "forked.db", 1)
    router = MultiTenantStore(factory)
    with failover.tenant("a"):
        router.store(_payload())
    held = factory.made["a"]

    def read_as_a() -> None:
        with failover.tenant("a"):
            router.find("n", "k")

    def child() -> Any:
        with failover.tenant("b"):
            router.store(_payload())
            factory.made["b"].release.set()  # b's reads are not held
            found = router.find("n", "k")
        return [sorted(router.stores), found is not None, router.refused_tenants]

    reader = threading.Thread(target=read_as_a)
    reader.start()
    try:
        assert held.entered.wait(10)  # a's store is in use at the fork
        assert _in_child(child) == ["ok", [["b"], True, 0]]
    finally:
        held.release.set()
        reader.join(10)
    assert not reader.is_alive()
    assert sorted(router.stores) == ["a"]  # the parent's pool is its own
    router.close()


def _payload() -> Any:
    now = utcnow()
    return envelope("n", "k", 1, now, now + timedelta(hours=1), True)


def _engine_over(factory: _Factory) -> Failover:
    # No deadline: a held read would time out, and no queue: writes happen on the call.
    return Failover(factory, metrics=False, async_writes=False, store_timeout=None)


def test_a_refused_tenant_call_gets_its_live_result_and_a_recovery_miss(tmp_path: Path) -> None:
    factory = _Factory(tmp_path / "calls.db", 1)
    down: list[bool] = []
    with _engine_over(factory) as eng:

        @failover.failover("quote", engine=eng)
        def quote(symbol: str) -> str:
            if down:
                raise ConnectionError("down")
            return symbol

        _exercise_refusal(factory, quote, down)


async def test_a_refused_tenant_async_call_gets_its_live_result_and_a_recovery_miss(
    tmp_path: Path,
) -> None:
    factory = _Factory(tmp_path / "acalls.db", 1)
    down: list[bool] = []
    with _engine_over(factory) as eng:

        @failover.failover("aquote", engine=eng)
        async def aquote(symbol: str) -> str:
            if down:
                raise ConnectionError("down")
            return symbol

        def quote(symbol: str) -> str:
            return asyncio.run(aquote(symbol))

        await asyncio.to_thread(_exercise_refusal, factory, quote, down)


def _exercise_refusal(factory: _Factory, call: Any, down: list[bool]) -> None:
    """Tenant a's call holds its store (a recovery read in progress); meanwhile tenant b's calls
    are refused a store: the live result comes back, and a failure finds nothing."""

    with failover.tenant("a"):
        assert call("A") == "A"  # a's store made and written (reads not held: none yet)
    down.append(True)
    held = factory.made["a"]
    errors: list[BaseException] = []

    def recover_as_a() -> None:
        with failover.tenant("a"):
            try:
                call("A")
            except BaseException as exc:  # reported below
                errors.append(exc)

    reader = threading.Thread(target=recover_as_a)
    reader.start()
    try:
        assert held.entered.wait(10)
        down.clear()
        with failover.tenant("b"):
            assert call("B") == "B"  # live, although b gets no store
        down.append(True)
        with failover.tenant("b"), pytest.raises(ConnectionError):
            call("B")  # the recovery is a miss
        assert "b" not in factory.made
    finally:
        held.release.set()
        reader.join(10)
    assert not reader.is_alive()
    assert errors == []  # a recovered its entry


# -- 5. keys of any str ---------------------------------------------------------------------------


def test_keys_are_made_from_lone_surrogates_unambiguously_and_in_every_process() -> None:
    texts = ["\ud800", "\udfff", "\ud83d\ude00", "\U0001f600", "\ufffd", "?", ""]
    keys = [make_key("k", (t,)) for t in texts]
    assert len(set(keys)) == len(texts)
    assert make_key("k", (["\ud800"],)) != make_key("k", (["\udfff"],))  # the generic path
    # The key of a plain str is the one it always was.
    assert make_key("k", ("FR",)) == make_key("k", (["FR"][0],))
    script = (
        "from failover.keys import make_key; "
        "print(make_key('k', ('\\ud800',)), make_key('k', (('\\udfff', 1),)))"
    )
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        out = subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, env=env, check=True
        ).stdout.split()
        assert out == [make_key("k", ("\ud800",)), make_key("k", (("\udfff", 1),))]


@pytest.fixture(params=["sqlite", "postgresql", "redis"])
def durable_url(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    """A durable store's URL, or the store (PostgreSQL: the session's, in tables of its own)."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'keys.db'}"
    if request.param == "postgresql":
        return postgres.pg_store()
    return f"{redis_server.server().url}?prefix={redis_server.unique_prefix()}"


def test_a_surrogate_argument_is_stored_and_recovered(
    durable_url: Any, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    down: list[bool] = []
    with Failover(durable_url, metrics=False, async_writes=False, clock=clock) as eng:

        @failover.failover("paths", engine=eng)
        def size(path: str) -> int:
            if down:
                raise ConnectionError("down")
            return len(path)

        with caplog.at_level(logging.WARNING, "failover"):
            assert size("a\ud800") == 2
            assert size("a\udfff") == 2
            assert caplog.records == []  # stored: no failure to make the key, no traceback
            down.append(True)
            recovered = size.referential("a\ud800")
            assert (recovered.payload, recovered.up_to_date) == (2, False)
            with pytest.raises(ConnectionError):
                size("a\udc00")  # another surrogate: another key, nothing stored
        assert not any(r.exc_info for r in caplog.records)


async def test_an_async_surrogate_argument_is_stored_and_recovered(
    durable_url: Any, clock: FakeClock
) -> None:
    down: list[bool] = []
    with Failover(durable_url, metrics=False, async_writes=False, clock=clock) as eng:

        @failover.failover("apaths", engine=eng)
        async def size(path: str) -> int:
            if down:
                raise ConnectionError("down")
            return len(path)

        assert await size("\ud800") == 1
        down.append(True)
        recovered = await size.referential("\ud800")
        assert (recovered.payload, recovered.up_to_date) == (1, False)
        with pytest.raises(ConnectionError):
            await size("\udbff")


# -- 6. no argument value in a log line at INFO or above ------------------------------------------

SECRET_ARGUMENT = "4cc355-0f-jane@example.com"


def test_the_mistyped_keys_warning_names_types_not_values(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    down: list[bool] = []
    with Failover(f"sqlite:///{tmp_path / 'f.db'}", metrics=False, async_writes=False) as eng:

        @failover.failover("accounts", engine=eng, splitter=ListSplitter("id"))
        def accounts(ids: str) -> list[dict[str, int]]:
            if down:
                raise ConnectionError("down")
            return [{"id": int(i)} for i in ids.split(",")]

        accounts("738291,55")  # stored under int keys
        down.append(True)
        with caplog.at_level(logging.DEBUG, "failover"), pytest.raises(ConnectionError):
            accounts("738291,55")  # asked for by str keys
    loud = [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO]
    assert any("differ in type" in m for m in loud)
    for message in loud:
        assert "738291" not in message, message
    quiet = [r.getMessage() for r in caplog.records if r.levelno < logging.INFO]
    assert any("738291" in m for m in quiet)  # the values at debug level


def test_a_failing_label_callable_is_warned_without_the_arguments(
    engine: Failover, caplog: pytest.LogCaptureFixture
) -> None:
    @failover.failover("sessions", engine=engine, label=lambda user: {}[user])
    def session(user: str) -> str:
        return "ok"

    with caplog.at_level(logging.INFO, "failover"):
        assert session(SECRET_ARGUMENT) == "ok"
    loud = [r for r in caplog.records if r.levelno >= logging.INFO]
    assert any("label= callable raised KeyError" in r.getMessage() for r in loud)
    for record in loud:
        assert SECRET_ARGUMENT not in record.getMessage()
        assert record.exc_info is None or SECRET_ARGUMENT not in str(record.exc_info[1])


def test_a_failed_sql_write_is_logged_without_the_statement_parameters(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """SQLAlchemy's errors quote the parameters (the payload, the label: the arguments): the
    write's warning carries its traceback, so they are hidden."""
    path = tmp_path / "broken.db"
    with Failover(f"sqlite:///{path}", metrics=False, async_writes=False) as eng:

        @failover.failover("who", engine=eng, label=True)
        def who(email: str) -> str:
            return "ok"

        assert who("warm@up") == "ok"  # the table is made
        broken = sqlite3.connect(path)
        broken.execute("DROP TABLE failover_store")
        broken.execute("CREATE TABLE failover_store (name TEXT CHECK (0))")  # every write fails
        broken.commit()
        broken.close()
        with caplog.at_level(logging.INFO, "failover"):
            assert who(SECRET_ARGUMENT) == "ok"  # the live result; the write failed
    loud = [r for r in caplog.records if r.levelno >= logging.INFO]
    assert any(r.exc_info for r in loud)
    for record in loud:
        text = logging.Formatter().format(record)
        assert SECRET_ARGUMENT not in text, text


def test_a_corrupt_row_is_logged_by_its_keys_tag_never_its_key(
    tmp_path: Path, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    """A row that cannot be decoded is logged (on the recovering read, and skipped by
    ``find_all``) naming its key by its tag (`failover.keys.key_tag`, computable from the key
    the dashboard lists), never the key: neither the digest the decorator stores nor a raw key
    written through the store's own API."""
    path = tmp_path / "corrupt.db"
    down: list[bool] = []
    with Failover(f"sqlite:///{path}", metrics=False, async_writes=False, clock=clock) as eng:

        @failover.failover("who", engine=eng)
        def who(email: str) -> str:
            if down:
                raise ConnectionError("down")
            return "ok"

        assert who(SECRET_ARGUMENT) == "ok"
        stored = SqlStore(f"sqlite:///{path}")
        [entry] = stored.find_all("who")
        digest = entry.key
        now = clock()
        stored.store(envelope("raw", SECRET_ARGUMENT, 1, now, now + timedelta(days=1), True))
        corrupting = sqlite3.connect(path)
        corrupting.execute("UPDATE failover_store SET payload = 'json:{not json'")
        corrupting.commit()
        corrupting.close()
        down.append(True)
        with caplog.at_level(logging.INFO, "failover"):
            with pytest.raises(ConnectionError):
                who(SECRET_ARGUMENT)  # the row is a miss
            assert stored.find_all("raw") == []
            with pytest.raises(failover.errors.SerializationError) as raised:
                stored.find("raw", SECRET_ARGUMENT)
        stored.close()
    assert SECRET_ARGUMENT not in str(raised.value)
    loud = [r for r in caplog.records if r.levelno >= logging.INFO]
    texts = [logging.Formatter().format(r) for r in loud]
    for key in (digest, SECRET_ARGUMENT):
        assert [t for t in texts if key_tag(key) in t and "cannot be decoded" in t], texts
        for text in texts:
            assert key not in text, text
