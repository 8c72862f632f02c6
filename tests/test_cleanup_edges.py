"""Adversarial tests of cleanup (`Failover.clean`, the scheduler, ``failover clean``) and of
write coalescing (``store_interval``), on real stores (SQLite files, the in-memory store, the
suite's redis-server) and a fake clock.

Cleanup has no grace period (docs/cleanup.md): it deletes ``expire_on <= now``, which is exactly
what recovery treats as expired (``now >= expire_on``), so an entry is deleted the moment it
stops being recoverable, and never before.
"""

from __future__ import annotations

import logging
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

import failover
from failover import Failover, InMemoryStore, ListSplitter
from failover.cli.main import main as cli_main
from failover.metrics import NullMetrics
from failover.stores import FailoverStore, make_store

from . import redis_server
from .conftest import FakeClock

WAIT = 5.0  # an upper bound for joins that end within milliseconds; never reached when green


class Upstream:
    """A live source that fails while ``down`` is set."""

    def __init__(self) -> None:
        self.down = False
        self.version = 0

    def __call__(self, value: object) -> str:
        if self.down:
            raise ConnectionError("upstream down")
        return f"{value}@{self.version}"


def _engine(kind: str, tmp_path: Path, clock: FakeClock, **kwargs: Any) -> Failover:
    if kind == "memory":
        return Failover(InMemoryStore(max_entries=0), clock=clock, metrics=False, **kwargs)
    # A generous store deadline: the cleanup is tested, and a loaded host's read or write past
    # the default 0.5 s would be a miss or a write given up.
    kwargs.setdefault("store_timeout", WAIT)
    return Failover(f"sqlite:///{tmp_path / 'clean.db'}", clock=clock, metrics=False, **kwargs)


def _recoverable(fn: Any, upstream: Upstream, *args: object) -> bool:
    """Whether a failing call of ``fn`` is answered from the store."""
    upstream.down = True
    try:
        fn(*args)
    except ConnectionError:
        return False
    finally:
        upstream.down = False
    return True


# -- what a cleanup deletes --------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_clean_deletes_exactly_what_is_no_longer_recoverable(
    kind: str, tmp_path: Path, clock: FakeClock
) -> None:
    """Three failovers in two domains, 15 keys each, stored one second apart: at every step of
    the clock a cleanup removes exactly the entries whose ``expire_on`` has been reached, and
    every entry it leaves is recovered by a failing call."""
    upstream = Upstream()
    ttls = {"short": 10, "middle": 25, "long": 3600}
    with _engine(kind, tmp_path, clock) as engine:
        fns = {
            name: failover.failover(name, ttl=ttl, domain=f"dom-{name}", engine=engine)(upstream)
            for name, ttl in ttls.items()
        }
        start = clock()
        expires: dict[tuple[str, int], datetime] = {}
        for i in range(15):
            for name, fn in fns.items():
                fn(i)
                expires[name, i] = clock() + timedelta(seconds=ttls[name])
            clock.advance(1)
        engine.flush()
        for step in (0, 9, 10, 14, 24, 25, 40, 3599, 3600, 3700):
            clock.now = start + timedelta(seconds=step)
            due = {k for k, at in expires.items() if at <= clock()}
            assert engine.clean() == len(due)
            for k in due:
                del expires[k]
            for name, fn in fns.items():
                remaining = {p.key for p in engine.store.find_all(fn.definition.effective_name)}
                assert len(remaining) == sum(1 for n, _ in expires if n == name)
            # Everything left is still recoverable (the first not-yet-expired of each name
            # is the one closest to its expiry: one second or less away at the boundaries).
            for name, i in sorted(expires, key=expires.__getitem__)[:3]:
                assert _recoverable(fns[name], upstream, i), (step, name, i)
            assert engine.clean() == 0  # a second run finds nothing more
        assert set(expires) == set()


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_an_entry_is_deleted_at_its_expire_on_not_a_microsecond_before(
    kind: str, tmp_path: Path, clock: FakeClock
) -> None:
    upstream = Upstream()
    with _engine(kind, tmp_path, clock) as engine:
        fn = failover.failover("edge", ttl=60, engine=engine)(upstream)
        fn("k")
        engine.flush()
        clock.advance(60 - 1e-6)
        assert engine.clean() == 0
        assert _recoverable(fn, upstream, "k")
        clock.advance(1e-6)
        assert not _recoverable(fn, upstream, "k")  # expired at expire_on: not served...
        fn("k2")  # (another key, so the count below is the cleanup's own)
        clock.advance(60)
        assert engine.clean() == 1  # ...and deleted, by the recovery or by the cleanup


def test_each_tenant_store_is_cleaned_and_no_tenant_loses_another_tenants_rows(
    tmp_path: Path, clock: FakeClock
) -> None:
    """One SQLite file per tenant: a cleanup removes each tenant's expired rows, counts them all,
    and leaves every tenant's live rows, whatever another tenant stored under the same key."""
    upstream = Upstream()
    url = f"sqlite:///{tmp_path}/tenant-{{tenant}}.db"
    tenants = ("acme", "globex", "initech")
    with Failover(url, clock=clock, metrics=False, async_writes=False) as engine:
        short = failover.failover("shared", ttl=10, engine=engine)(upstream)
        long = failover.failover("shared-long", ttl=1000, engine=engine)(upstream)
        for tenant, count in (("acme", 3), ("globex", 5), ("initech", 7)):
            with failover.tenant(tenant):
                for i in range(count):
                    short(i)  # the same keys in every tenant
                    long(i)
        clock.advance(10)
        assert engine.clean() == 3 + 5 + 7
        for tenant, count in (("acme", 3), ("globex", 5), ("initech", 7)):
            with failover.tenant(tenant):
                assert engine.store.find_all("shared") == []
                assert len(engine.store.find_all("shared-long")) == count
                assert all(_recoverable(long, upstream, i) for i in range(count))
        for tenant in tenants:
            assert (tmp_path / f"tenant-{tenant}.db").exists()

    # Documented (docs/multi-tenancy.md): a fresh process cleans the tenants it has seen.
    clock.advance(1000)
    with Failover(url, clock=clock, metrics=False, async_writes=False) as engine:
        with failover.tenant("globex"):
            engine.store.find_all("shared-long")  # globex seen
        assert engine.clean() == 5
    with Failover(url, clock=clock, metrics=False, async_writes=False) as engine:
        for tenant in tenants:
            with failover.tenant(tenant):
                engine.store.find_all("shared-long")
        assert engine.clean() == 3 + 7


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_slices_expire_and_are_cleaned_one_by_one(
    kind: str, tmp_path: Path, clock: FakeClock
) -> None:
    """Slices stored by different calls expire on their own stores' times: a cleanup removes
    the expired ones only, and a call over old and new slices recovers the new ones."""
    down = threading.Event()

    with _engine(kind, tmp_path, clock) as engine:

        @failover.failover("slices", ttl=60, splitter=ListSplitter("id"), engine=engine)
        def rows(ids: str) -> list[dict[str, str]]:
            if down.is_set():
                raise ConnectionError("down")
            return [{"id": i} for i in ids.split(",")]

        rows("1,2,3")
        clock.advance(30)
        rows("3,4")  # slice 3 stored again: its expiry moves on
        engine.flush()
        clock.advance(30)  # 1 and 2 expire now; 3 and 4 in 30 s
        assert engine.clean() == 2
        assert sorted(p.payload["id"] for p in engine.store.find_all("slices")) == ["3", "4"]
        down.set()
        with pytest.raises(ConnectionError):
            rows("1,2")
        partial = rows.referential("2,3,4")
        assert not partial.up_to_date
        assert sorted(r["id"] for r in partial.payload) == ["3", "4"]
        clock.advance(30)
        assert engine.clean() == 2
        assert engine.store.find_all("slices") == []


# -- cleanup racing with calls -----------------------------------------------------------------


def test_cleanup_running_while_calls_store_and_recover(tmp_path: Path, clock: FakeClock) -> None:
    """Four threads call (half their calls fail and recover) while a fifth cleans in a loop on
    the same SQLite file: no call raises, every failed call is recovered, and the rows expired
    beforehand all go."""
    with Failover(
        f"sqlite:///{tmp_path / 'race.db'}",
        clock=clock,
        metrics=False,
        async_writes=False,
        store_timeout=WAIT,  # the race is tested, not the deadline: a loaded host's write is slow
    ) as engine:
        old = failover.failover("old", ttl=1, engine=engine)(lambda i: i)
        for i in range(300):
            old(i)
        clock.advance(1)  # 300 rows expired, waiting for the cleanup

        failing = [False] * 4  # each worker's upstream (one entry per thread)

        @failover.failover("hot", ttl=3600, engine=engine)
        def hot(worker: int, i: int) -> str:
            if failing[worker]:
                raise ConnectionError("down")
            return f"{worker}-{i}"

        start = threading.Barrier(5)
        errors: list[BaseException] = []
        done = threading.Event()
        removed = 0

        def call(worker: int) -> None:
            start.wait(WAIT)
            try:
                for i in range(60):
                    failing[worker] = False
                    assert hot(worker, i) == f"{worker}-{i}"
                    failing[worker] = True
                    assert hot(worker, i) == f"{worker}-{i}"  # recovered
            except BaseException as exc:  # any failure, assertion included, fails the test
                errors.append(exc)

        def clean() -> None:
            nonlocal removed
            start.wait(WAIT)
            while not done.is_set():
                removed += engine.clean()

        workers = [threading.Thread(target=call, args=(w,)) for w in range(4)]
        cleaner = threading.Thread(target=clean)
        for thread in [*workers, cleaner]:
            thread.start()
        for thread in workers:
            thread.join(WAIT * 4)
        done.set()
        cleaner.join(WAIT)
        assert errors == []
        removed += engine.clean()
        assert removed == 300
        assert len(engine.store.find_all("hot")) == 4 * 60


class FailingOnce(InMemoryStore):
    """A real in-memory store whose cleanups fail while ``failures`` is above zero."""

    def __init__(self, failures: int) -> None:
        super().__init__(max_entries=0)
        self.failures = failures
        self.attempted = threading.Event()

    def clean_by_expiry(self, now: datetime) -> int:
        self.attempted.set()
        if self.failures:
            self.failures -= 1
            raise OSError("disk gone")
        return super().clean_by_expiry(now)


class RecordingMetrics(NullMetrics):
    def __init__(self) -> None:
        self.removed: list[int] = []

    def cleanup(self, removed: int, seconds: float) -> None:
        self.removed.append(removed)


def test_a_failing_tenant_cleanup_is_logged_the_others_are_cleaned_the_next_run_works(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    stores = {"acme": FailingOnce(1), "globex": FailingOnce(0)}
    upstream = Upstream()
    with Failover(stores.__getitem__, clock=clock, metrics=False) as engine:
        fn = failover.failover("f", ttl=10, engine=engine)(upstream)
        for tenant in stores:
            with failover.tenant(tenant):
                fn(1)
                fn(2)
        clock.advance(10)
        metrics = RecordingMetrics()
        scheduler = failover.CleanupScheduler(engine, every="1h", metrics=metrics)
        with caplog.at_level(logging.WARNING, logger="failover"):
            scheduler.start()
            assert stores["acme"].attempted.wait(WAIT)
            assert scheduler.stop(WAIT)  # the first run ended, its failure logged
        assert "disk gone" in caplog.text
        assert "'acme'" in caplog.text  # which tenant failed
        assert metrics.removed == []  # a failed run reports no count
        with failover.tenant("globex"):
            assert engine.store.find_all("f") == []  # cleaned despite acme's failure
        assert scheduler.run_once() == 2  # acme's, at the next run
        assert metrics.removed == [2]
        with failover.tenant("acme"):
            assert engine.store.find_all("f") == []
        # No call ever saw the cleanup's failure.
        with failover.tenant("acme"):
            assert fn(3) == "3@0"


# -- write coalescing --------------------------------------------------------------------------


class Counting(InMemoryStore):
    """A real in-memory store that records the payloads written to it."""

    def __init__(self) -> None:
        super().__init__(max_entries=0)
        self.written: list[object] = []

    def store(self, payload: Any) -> None:
        self.written.append(payload.payload)
        super().store(payload)

    def store_many(self, payloads: Any) -> None:
        self.written.extend(p.payload for p in payloads)
        super().store_many(payloads)


def test_the_interval_ends_exactly_at_the_last_store_plus_the_interval(clock: FakeClock) -> None:
    store = Counting()
    upstream = Upstream()
    with Failover(store, clock=clock, metrics=False, store_interval="10s") as engine:
        fn = failover.failover("edge", ttl="1h", engine=engine)(upstream)
        fn(1)
        upstream.version = 1  # a changed value within the interval: documented as not stored
        clock.advance(10 - 1e-6)
        assert fn(1) == "1@1"
        assert store.written == ["1@0"]
        clock.advance(1e-6)
        fn(1)
        assert store.written == ["1@0", "1@1"]
        clock.advance(5)
        fn(1)  # the interval runs from the last store, not the first
        assert store.written == ["1@0", "1@1"]


def test_two_engines_on_one_sqlite_file_coalesce_each_on_its_own(
    tmp_path: Path, clock: FakeClock
) -> None:
    """Two "processes": each stores a key at most once per interval, whatever the other did, so
    the file sees at most two writes of it per interval."""
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    upstream = Upstream()
    first = Failover(url, clock=clock, metrics=False, async_writes=False, store_interval="10s")
    second = Failover(url, clock=clock, metrics=False, async_writes=False, store_interval="10s")
    with first, second:
        a = failover.failover("fx", ttl="1h", engine=first)(upstream)
        b = failover.failover("fx", ttl="1h", engine=second)(upstream)

        def stored() -> tuple[str, datetime | None]:
            found = a.peek("EUR")
            assert found is not None
            return found.payload, found.as_of

        t0 = clock()
        a("EUR")
        assert stored() == ("EUR@0", t0)
        upstream.version = 1
        clock.advance(2)
        b("EUR")  # the second engine's first store: not coalesced by the first's
        assert stored() == ("EUR@1", t0 + timedelta(seconds=2))
        upstream.version = 2
        clock.advance(2)
        a("EUR")  # within the first engine's interval
        b("EUR")  # within the second's
        assert stored() == ("EUR@1", t0 + timedelta(seconds=2))
        clock.advance(6)  # 10 s after the first engine's store
        a("EUR")
        assert stored() == ("EUR@2", t0 + timedelta(seconds=10))
        clock.advance(1)  # 9 s after the second engine's: still coalesced
        b("EUR")
        assert stored() == ("EUR@2", t0 + timedelta(seconds=10))
        clock.advance(1)
        b("EUR")
        assert stored() == ("EUR@2", t0 + timedelta(seconds=12))


def test_invalidate_inside_the_interval_forgets_only_the_current_tenants_store(
    clock: FakeClock,
) -> None:
    stores: dict[str, Counting] = {}

    def store_of(tenant: str) -> Counting:
        return stores.setdefault(tenant, Counting())

    upstream = Upstream()
    with Failover(store_of, clock=clock, metrics=False, store_interval="1h") as engine:
        fn = failover.failover("inv", ttl="2h", engine=engine)(upstream)
        for tenant in ("acme", "globex"):
            with failover.tenant(tenant):
                fn(1)
        with failover.tenant("acme"):
            fn.invalidate(1)
            assert fn.peek(1) is None
        upstream.version = 1
        clock.advance(1)
        for tenant in ("acme", "globex"):
            with failover.tenant(tenant):
                fn(1)
        assert stores["acme"].written == ["1@0", "1@1"]  # invalidated: stored again
        assert stores["globex"].written == ["1@0"]  # still within its interval


def test_invalidating_a_slice_inside_the_interval_lets_the_next_success_store_it(
    clock: FakeClock,
) -> None:
    """Coalescing of slices goes by the whole call: ``invalidate("1")`` deletes slice 1, and a
    success of ``rows("1,2")`` within the interval must store it again, or slice 1 stays
    unrecoverable for the rest of the interval."""
    down = threading.Event()
    with Failover(InMemoryStore(), clock=clock, metrics=False, store_interval="1h") as engine:

        @failover.failover("inv-slices", ttl="2h", splitter=ListSplitter("id"), engine=engine)
        def rows(ids: str) -> list[dict[str, str]]:
            if down.is_set():
                raise ConnectionError("down")
            return [{"id": i} for i in ids.split(",")]

        rows("1,2")
        rows.invalidate("1")
        clock.advance(1)
        rows("1,2")  # within the interval of this call, but slice 1 was invalidated
        down.set()
        recovered = rows.referential("1,2")
        assert sorted(r["id"] for r in recovered.payload) == ["1", "2"]


class FailingWrites(Counting):
    """Writes fail while ``down`` is set (the write never reaches the entries)."""

    down = False

    def store(self, payload: Any) -> None:
        if self.down:
            raise OSError("store down")
        super().store(payload)


def test_a_failed_write_inside_the_interval_of_an_earlier_store_keeps_the_old_mark(
    clock: FakeClock,
) -> None:
    """After the interval a write fails: the key is not marked, so the next success, even one
    second later, is stored; and the failed attempt did not extend the interval either."""
    store = FailingWrites()
    upstream = Upstream()
    with Failover(store, clock=clock, metrics=False, store_interval="10s") as engine:
        fn = failover.failover("flaky", ttl="1h", engine=engine)(upstream)
        fn(1)
        clock.advance(10)
        store.down = True
        upstream.version = 1
        assert fn(1) == "1@1"  # live, though its write failed
        store.down = False
        clock.advance(1)
        upstream.version = 2
        fn(1)
        assert store.written == ["1@0", "1@2"]
        clock.advance(9)
        fn(1)  # within the interval of the store that worked
        assert store.written == ["1@0", "1@2"]


# -- `failover clean` ----------------------------------------------------------------------------


@pytest.fixture
def real_now_clock() -> FakeClock:
    """A fake clock two hours behind the real one: the CLI cleans at the real time."""
    return FakeClock(datetime.now(UTC) - timedelta(hours=2))


def _fill(engine: Failover, expired: int, live: int) -> None:
    short = failover.failover("cli-short", ttl="1h", engine=engine)(lambda i: i)
    long = failover.failover("cli-long", ttl="1d", engine=engine)(lambda i: i)
    for i in range(expired):
        short(i)
    for i in range(live):
        long(i)
    engine.flush()


def test_cli_clean_removes_what_cleanup_would_and_reports_the_count(
    tmp_path: Path, real_now_clock: FakeClock, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    twin = f"sqlite:///{tmp_path / 'twin.db'}"
    for target in (url, twin):
        with Failover(target, clock=real_now_clock, metrics=False) as engine:
            _fill(engine, expired=7, live=4)
    assert cli_main(["clean", "--store", url]) == 0
    assert capsys.readouterr().out == "removed 7 expired entries\n"
    with Failover(twin, metrics=False) as engine:  # the real clock, as the CLI
        assert engine.clean() == 7
    for target in (url, twin):
        store = make_store(target)
        try:
            assert store.find_all("cli-short") == []
            assert len(store.find_all("cli-long")) == 4
        finally:
            store.close()
    assert cli_main(["clean", "--store", url]) == 0
    assert capsys.readouterr().out == "removed 0 expired entries\n"


def test_cli_clean_on_one_tenants_table(
    tmp_path: Path, real_now_clock: FakeClock, capsys: pytest.CaptureFixture[str]
) -> None:
    """Per-tenant tables in one file: ``--table-prefix`` cleans that tenant's table only."""
    url = f"sqlite:///{tmp_path / 'tables.db'}"
    factory = failover.stores.per_tenant_tables(url)
    with Failover(factory, clock=real_now_clock, metrics=False) as engine:
        for tenant, expired in (("acme", 2), ("globex", 5)):
            with failover.tenant(tenant):
                _fill(engine, expired=expired, live=1)
    assert cli_main(["clean", "--store", url, "--table-prefix", "globex_"]) == 0
    assert capsys.readouterr().out == "removed 5 expired entries\n"
    assert cli_main(["clean", "--store", url, "--table-prefix", "acme_"]) == 0
    assert capsys.readouterr().out == "removed 2 expired entries\n"


def test_cli_clean_on_redis_removes_nothing_and_says_why(
    real_now_clock: FakeClock, capsys: pytest.CaptureFixture[str]
) -> None:
    if redis_server.binary() is None:
        pytest.skip("redis-server is not installed")
    server = redis_server.server()
    prefix = redis_server.unique_prefix()
    from failover.stores.backends.redis import RedisStore

    store: FailoverStore = RedisStore(server.url, prefix=prefix, clock=real_now_clock)
    with Failover(store, clock=real_now_clock, metrics=False, async_writes=False) as engine:
        _fill(engine, expired=3, live=2)
        assert engine.clean() == 0
    assert cli_main(["clean", "--store", server.url]) == 0
    assert capsys.readouterr().out == (
        "removed 0 expired entries (Redis removes expired entries itself)\n"
    )
