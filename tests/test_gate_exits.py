"""Every gate reopens: each way out of a breaker's trial, of a hedged read, of a permit's hold
leaves its state machine at rest, and a forked child starts with none of the parent's.

The machines: the store breaker (`DeadlineStore`, and `HedgingDeadline`'s hedged reads), the
tiered store's async hedge (`TieredStore._tasks`), the upstream breaker (`BreakerGuard` over a
real pybreaker) and the permit pools (`LocalPermits`, `RedisPermits`). Stores are real: SQLite
files, PostgreSQL and redis-server of the tests' own; a hang is the server ``SIGSTOP``-ped (or a
SQLite write lock another process holds), a refused connection is the server killed. Fork tests
use a real ``os.fork()``: the child answers through a pipe and never returns into pytest.

The stress tests drive every way out many times with ``sys.setswitchinterval(1e-6)`` (a thread
switch between almost any two bytecodes), then check the machine is back at rest. No assertion
on time: the short store deadlines only make hangs cost little.
"""

from __future__ import annotations

import asyncio
import gc
import os
import random
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, contextmanager, suppress
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pybreaker
import pytest

import failover
from failover import BulkheadFull, Failover, StoreError
from failover.execution.breaker import _gates
from failover.execution.permits import LocalPermits
from failover.payload import ReferentialPayload
from failover.stores import InMemoryStore, TieredStore
from failover.stores.backends.redis import RedisStore
from failover.stores.backends.sql import SqlStore
from failover.stores.layers.deadline import DeadlineStore, StoreTimeout, StoreUnavailable
from failover.stores.layers.hedging import HedgingDeadline

from .conftest import FakeClock
from .own_servers import children, own_postgres, running, stopped
from .redis_server import RedisServer
from .test_flight_gates import switching_often
from .test_lifecycle_edges import _in_child
from .test_store_hung import sqlite_locked

CLOSED = pybreaker.STATE_CLOSED
WAIT = 10.0  # the most a test waits for something that must happen (a hang guard)
TIMEOUT = 0.2  # the store deadline while a store is hung: a hang costs this much
RESET = 5.0  # the store breaker's open time, on the fake clock
REFUSED = r"(?i)refused|connect|reset|terminat|closed"  # a store's error for a killed server


# -- helpers --------------------------------------------------------------------------------------


def payload(key: str, clock: FakeClock) -> ReferentialPayload[Any]:
    now = clock()
    return ReferentialPayload("n", key, {"k": key}, now, now + timedelta(days=1), True)


def at_rest(layer: DeadlineStore) -> bool:
    """No trial under way (the breaker closed, or open and due for its next trial)."""
    return not layer._trial


def trial_clock(clock: FakeClock) -> Callable[[], datetime]:
    """``clock``, with an event (``.read``) set when an open breaker first reads it: admitting
    a trial (`admitted` waits for it)."""
    read = threading.Event()

    def watched() -> datetime:
        read.set()
        return clock()

    watched.read = read  # type: ignore[attr-defined]
    return watched


def admitted(layer: DeadlineStore) -> None:
    """Wait until another thread's operation is the trial of ``layer``'s open breaker."""
    read = layer.clock.read  # type: ignore[attr-defined]
    assert read.wait(WAIT), "no operation was admitted"
    with layer._lock:  # its admission is done
        assert layer._trial


def join_workers(layer: DeadlineStore) -> None:
    """Wait until the operations the layer's workers run now have ended, their ends counted (a
    hung one included, once its store is resumed): one job per worker, all meeting at a
    barrier, so that every worker has taken one."""
    pool = layer._pool
    if pool is not None:
        met = threading.Barrier(layer.workers)
        for future in [pool.submit(met.wait, WAIT) for _ in range(layer.workers)]:
            future.result(WAIT)


# -- the store breaker: real stores, hung and refused ----------------------------------------------


@pytest.fixture(scope="module")
def pg_server() -> Iterator[Any]:
    """A PostgreSQL server of this module's own: stopping it stalls no other test."""
    yield from own_postgres()


@pytest.fixture
def redis_srv() -> Iterator[RedisServer]:
    """A redis-server of the test's own: it is stopped, killed and started again."""
    yield from running(RedisServer())


class Backend:
    """A real store behind a `DeadlineStore`: the operation the breaker guards, how to hang the
    store, and (where the store can be refused) how to refuse it."""

    def __init__(
        self,
        store: Any,
        op: Callable[[DeadlineStore], Any],
        hang: Callable[[], AbstractContextManager[Any]],
        refuse: Callable[[], AbstractContextManager[Any]] | None = None,
    ) -> None:
        self.store, self.op, self.hang, self.refuse = store, op, hang, refuse

    def layer(self, clock: FakeClock, workers: int = 32) -> DeadlineStore:
        return DeadlineStore(self.store, TIMEOUT, clock, open_for=RESET, workers=workers, after=1)


@contextmanager
def killed(server: RedisServer) -> Iterator[None]:
    """The server killed inside the block (its port refuses), started again after it."""
    server.kill()
    try:
        yield
    finally:
        server.start()


def _find(layer: DeadlineStore) -> Any:
    return layer.find_many("n", ["k"])


@pytest.fixture(params=["sqlite", "postgresql", "redis"])
def backend(request: pytest.FixtureRequest, tmp_path: Path, clock: FakeClock) -> Iterator[Backend]:
    kind = request.param
    if kind == "sqlite":
        path = tmp_path / "gate.db"
        store: Any = SqlStore(f"sqlite:///{path}")
        store.store(payload("k", clock))  # the table exists before the lock is taken
        # SQLite readers pass a writer's lock (WAL): its writes are what hang.
        yield Backend(
            store, lambda layer: layer.store(payload("k", clock)), lambda: sqlite_locked(path)
        )
    elif kind == "postgresql":
        server = request.getfixturevalue("pg_server")
        postmaster = int((server.data / "postmaster.pid").read_text().split()[0])
        store = SqlStore(server.url, table_prefix=f"t{os.urandom(4).hex()}_")
        yield Backend(store, _find, lambda: stopped([postmaster, *children(postmaster)]))
    else:
        redis = request.getfixturevalue("redis_srv")
        store = RedisStore(redis.url, prefix=f"t{os.urandom(4).hex()}:", socket_timeout=WAIT)
        assert redis.process is not None
        pid = redis.process.pid
        yield Backend(store, _find, lambda: stopped([pid]), lambda: killed(redis))
    store.close()


def _opened(backend: Backend, layer: DeadlineStore) -> None:
    """Open the layer's breaker the only way it opens: an operation past its deadline."""
    with backend.hang(), pytest.raises(StoreTimeout):
        backend.op(layer)
    assert not layer.up
    join_workers(layer)  # the hung operation ended once resumed


def _recovers(backend: Backend, layer: DeadlineStore, clock: FakeClock) -> None:
    """The breaker lets the next trial through once due, and that trial closes it."""
    assert at_rest(layer)
    layer.timeout = WAIT  # resumed: a loaded machine's slow answer is not a hang
    clock.advance(RESET)
    backend.op(layer)
    assert layer.up
    assert at_rest(layer)


def test_store_trial_answered_closes_the_breaker(backend: Backend, clock: FakeClock) -> None:
    layer = backend.layer(clock)
    _opened(backend, layer)
    with pytest.raises(StoreUnavailable):
        backend.op(layer)  # skipped while open
    _recovers(backend, layer, clock)


def test_store_trial_timed_out_opens_it_again(backend: Backend, clock: FakeClock) -> None:
    layer = backend.layer(clock)
    _opened(backend, layer)
    clock.advance(RESET)
    with backend.hang(), pytest.raises(StoreTimeout):
        backend.op(layer)  # the trial
    assert not layer.up
    with pytest.raises(StoreUnavailable):
        backend.op(layer)  # open for another RESET
    join_workers(layer)
    _recovers(backend, layer, clock)


def test_store_trial_refused_a_worker_leaves_the_next_operation_the_trial(
    backend: Backend, clock: FakeClock
) -> None:
    """Every worker still held by the hung operation: the trial cannot start. It ends without
    a verdict: the next operation is the trial (before, the store stayed skipped for good)."""
    layer = backend.layer(clock, workers=1)
    with backend.hang():
        with pytest.raises(StoreTimeout):
            backend.op(layer)  # opens the breaker, and keeps the only worker
        clock.advance(RESET)
        with pytest.raises(StoreTimeout, match="every worker is held"):
            backend.op(layer)  # the trial, refused a worker
        assert at_rest(layer)
    join_workers(layer)
    _recovers(backend, layer, clock)


def test_store_trial_failing_on_the_callers_own_value_gives_no_verdict(
    tmp_path: Path, clock: FakeClock
) -> None:
    """A trial write of a value the store cannot encode: the caller's error, not the store's.
    The breaker stays due, and the next operation is the trial (before: skipped for good)."""
    path = tmp_path / "own.db"
    store = SqlStore(f"sqlite:///{path}")
    store.store(payload("k", clock))
    backend = Backend(
        store, lambda layer: layer.store(payload("k", clock)), lambda: sqlite_locked(path)
    )
    layer = backend.layer(clock)
    _opened(backend, layer)
    clock.advance(RESET)
    now = clock()
    unencodable = ReferentialPayload("n", "bad", object(), now, now + timedelta(days=1), True)
    with pytest.raises(failover.SerializationError):
        layer.store(unencodable)
    assert at_rest(layer)
    layer.timeout = WAIT
    backend.op(layer)  # due at once: no new open time, the trial answers
    assert layer.up
    store.close()


def test_store_trial_refused_at_the_connection_opens_it_again(
    redis_srv: RedisServer, clock: FakeClock
) -> None:
    """The trial fails with a refused connection (the server killed): the breaker opens again
    for ``open_for`` and tries again after it (before, it stayed open until a restart)."""
    store = RedisStore(redis_srv.url, prefix="refused:", socket_timeout=WAIT)
    assert redis_srv.process is not None
    backend = Backend(store, _find, lambda: stopped([redis_srv.process.pid]))  # type: ignore[union-attr]
    layer = backend.layer(clock)
    _opened(backend, layer)
    clock.advance(RESET)
    with killed(redis_srv):
        with pytest.raises(StoreError, match=REFUSED):
            backend.op(layer)  # the trial: refused
        assert at_rest(layer)
        assert not layer.up
        with pytest.raises(StoreUnavailable):
            backend.op(layer)  # open again, for another RESET
    _recovers(backend, layer, clock)
    store.close()


def test_store_trial_failing_on_a_killed_postgresql_opens_it_again(
    tmp_path: Path, clock: FakeClock
) -> None:
    """The same on a PostgreSQL server killed between the open and the trial (its port
    refuses): the breaker opens again, then lets a trial through once due."""
    servers = own_postgres()
    server: Any = next(servers)
    store = SqlStore(server.url, table_prefix="refused_")
    try:
        postmaster = int((server.data / "postmaster.pid").read_text().split()[0])
        backend = Backend(store, _find, lambda: stopped([postmaster, *children(postmaster)]))
        layer = backend.layer(clock)
        _opened(backend, layer)
        clock.advance(RESET)
        server.stop()  # killed (immediate): the port refuses
        with pytest.raises(Exception, match=REFUSED):
            backend.op(layer)
        assert at_rest(layer)
        assert not layer.up
        with pytest.raises(StoreUnavailable):
            backend.op(layer)
        clock.advance(RESET)
        with pytest.raises(Exception, match=REFUSED):
            backend.op(layer)  # the next trial reached the store: still down, open again
        assert at_rest(layer)
    finally:
        store.close()
        servers.close()


# -- the store breaker, async: answered, timeout, error, cancellation ------------------------------


def _arun(coro: Any) -> Any:
    return asyncio.run(coro)


def test_async_store_trials_every_way_out(redis_srv: RedisServer, clock: FakeClock) -> None:
    """An async trial answered closes; timed out or refused opens again; cancelled gives no
    verdict (the next operation is the trial). Before, a refused or cancelled async trial left
    the store skipped for good."""
    store = RedisStore(redis_srv.url, prefix="atrial:", socket_timeout=WAIT)
    layer = DeadlineStore(store, TIMEOUT, clock, open_for=RESET, after=1)
    assert redis_srv.process is not None
    pid = redis_srv.process.pid

    async def scenario() -> None:
        async def read() -> Any:
            return await layer.afind_many("n", ["k"])

        with stopped([pid]), pytest.raises(StoreTimeout):
            await read()  # opens the breaker
        clock.advance(RESET)
        with stopped([pid]), pytest.raises(StoreTimeout):
            await read()  # trial: timed out
        assert at_rest(layer)
        assert not layer.up
        clock.advance(RESET)
        with killed(redis_srv):
            with pytest.raises(StoreError, match=REFUSED):
                await read()  # trial: refused
            assert at_rest(layer)
            assert not layer.up
        clock.advance(RESET)
        with stopped([pid]):
            task = asyncio.ensure_future(read())
            await asyncio.sleep(0)  # the trial is admitted, its read on the stopped server
            assert layer._trial is not None
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert at_rest(layer)
        layer.timeout = WAIT
        assert await read() == {}  # the next one is the trial: it answers, and closes
        assert layer.up
        assert at_rest(layer)
        await layer.aclose()

    asyncio.run(scenario())
    store.close()


def test_a_cancelled_async_trial_on_postgresql_leaves_the_next_one_the_trial(
    pg_server: Any, clock: FakeClock
) -> None:
    store = SqlStore(pg_server.url, table_prefix=f"t{os.urandom(4).hex()}_")
    layer = DeadlineStore(store, TIMEOUT, clock, open_for=RESET, after=1)
    postmaster = int((pg_server.data / "postmaster.pid").read_text().split()[0])

    def hung() -> AbstractContextManager[None]:
        return stopped([postmaster, *children(postmaster)])

    if not layer.native_async:
        pytest.skip("no async PostgreSQL driver")

    async def scenario() -> None:
        with hung(), pytest.raises(StoreTimeout):
            await layer.afind_many("n", ["k"])
        clock.advance(RESET)
        with hung():
            task = asyncio.ensure_future(layer.afind_many("n", ["k"]))
            await asyncio.sleep(0)
            assert layer._trial is not None
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        assert at_rest(layer)
        layer.timeout = WAIT
        assert await layer.afind_many("n", ["k"]) == {}
        assert layer.up
        await layer.aclose()

    asyncio.run(scenario())
    store.close()


def test_close_ends_a_trial_under_way(redis_srv: RedisServer, clock: FakeClock) -> None:
    store = RedisStore(redis_srv.url, prefix="closed:", socket_timeout=WAIT)
    layer = DeadlineStore(store, WAIT, trial_clock(clock), open_for=RESET, after=1)
    assert redis_srv.process is not None
    layer._open_until = clock()  # open, and due: the next operation is the trial
    with stopped([redis_srv.process.pid]):
        ended: list[BaseException] = []

        def run_trial() -> None:
            try:
                _find(layer)
            except Exception as exc:  # the store closed under it
                ended.append(exc)

        trial = threading.Thread(target=run_trial)
        trial.start()
        admitted(layer)
        layer.close()
        assert at_rest(layer)
    trial.join(WAIT)
    assert at_rest(layer)


# -- the hedged read: within budget, late, overdue ------------------------------------------------


def _hedging(server: RedisServer, clock: FakeClock, workers: int = 32) -> HedgingDeadline:
    store = RedisStore(server.url, prefix=f"h{os.urandom(4).hex()}:", socket_timeout=WAIT)
    return HedgingDeadline(store, TIMEOUT, clock, open_for=RESET, workers=workers, after=1)


def _hedge(layer: HedgingDeadline, late: Callable[[Any], Any] = lambda found: None) -> Any:
    return layer.hedged(
        "find_many", layer.inner.find_many, "n", ["k"], budget=TIMEOUT / 4, late=late
    )


def test_hedged_trial_refused_within_its_budget_opens_it_again(
    redis_srv: RedisServer, clock: FakeClock
) -> None:
    layer = _hedging(redis_srv, clock)
    assert redis_srv.process is not None
    with stopped([redis_srv.process.pid]), pytest.raises(StoreTimeout):
        _find(layer)  # opens the breaker
    join_workers(layer)
    clock.advance(RESET)
    with killed(redis_srv):
        with pytest.raises(StoreError, match=REFUSED):
            _hedge(layer)  # the trial, refused within its budget
        assert at_rest(layer)
        assert not layer.up
    layer.timeout = WAIT
    clock.advance(RESET)
    assert _hedge(layer) == (True, {})
    assert layer.up
    layer.close()


def test_hedged_trial_refused_a_worker_leaves_the_next_read_the_trial(
    redis_srv: RedisServer, clock: FakeClock
) -> None:
    layer = _hedging(redis_srv, clock, workers=1)
    assert redis_srv.process is not None
    with stopped([redis_srv.process.pid]):
        with pytest.raises(StoreTimeout):
            _find(layer)  # opens the breaker, and keeps the only worker
        clock.advance(RESET)
        with pytest.raises(StoreTimeout, match="every worker is held"):
            _hedge(layer)
        assert at_rest(layer)
    join_workers(layer)
    layer.timeout = WAIT
    assert _hedge(layer) == (True, {})
    assert layer.up
    layer.close()


def test_hedged_trial_failing_after_its_budget_opens_it_again(
    redis_srv: RedisServer, clock: FakeClock
) -> None:
    """The trial outlives its budget (the server stopped), then fails (the server killed): its
    late end reopens the breaker (before, it was counted and the trial never ended)."""
    layer = _hedging(redis_srv, clock)
    layer.timeout = WAIT  # late, not overdue
    assert redis_srv.process is not None
    layer._open_until = clock()  # open, and due
    ended = threading.Event()
    with stopped([redis_srv.process.pid]):
        assert _hedge(layer) == (False, None)  # the trial goes on past its budget
        (future,) = layer._late
        future.add_done_callback(lambda _: ended.set())
        redis_srv.kill()  # a stopped process is killed all the same: its connections reset
    assert ended.wait(WAIT)
    assert at_rest(layer)
    assert not layer.up
    assert layer.errors[("find_many", "error")] == 1
    redis_srv.start()
    clock.advance(RESET)
    assert _hedge(layer) == (True, {})
    assert layer.up
    layer.close()


def test_hedged_trial_answering_late_closes_and_overdue_opens_it_again(
    redis_srv: RedisServer, clock: FakeClock
) -> None:
    layer = _hedging(redis_srv, clock)
    assert redis_srv.process is not None
    pid = redis_srv.process.pid
    kept: list[Any] = []
    ended = threading.Event()
    # Late, then answered: the late answer closes the breaker, and is kept.
    layer.timeout = WAIT
    layer._open_until = clock()
    with stopped([pid]):
        assert _hedge(layer, kept.append) == (False, None)
        (future,) = layer._late
        future.add_done_callback(lambda _: ended.set())
    assert ended.wait(WAIT)
    join_workers(layer)
    assert kept == [{}]
    assert layer.up
    assert at_rest(layer)
    # Late, then overdue: a timeout, as if waited for (seen by the next operation).
    layer.timeout = TIMEOUT
    layer._open_until = clock()
    with stopped([pid]):
        assert _hedge(layer) == (False, None)
        ((_, entry),) = layer._late.items()
        # The deadline is on the monotonic clock, not the engine's: let it pass.
        threading.Event().wait(max(0.0, entry.deadline - time.monotonic()) + 0.01)
        assert not layer.up  # the overdue read counted: a timeout, the breaker open again
    assert at_rest(layer)
    assert layer.errors[("find_many", "timeout")] == 1
    layer.close()


# -- the tiered store's async hedge ---------------------------------------------------------------


def _tiered(server: RedisServer, clock: FakeClock) -> tuple[TieredStore, RedisStore]:
    """A tiered store over ``server`` under the engine's guard, and a store on far's keys."""
    prefix = f"t{os.urandom(4).hex()}:"
    tiered = TieredStore(
        InMemoryStore(), RedisStore(server.url, prefix=prefix, socket_timeout=WAIT, clock=clock)
    )
    tiered.guard_far(WAIT, clock, RESET, 1)
    return tiered, RedisStore(server.url, prefix=prefix, socket_timeout=WAIT, clock=clock)


def test_a_cancelled_async_hedged_read_keeps_no_task_and_far_is_asked_again(
    redis_srv: RedisServer, clock: FakeClock
) -> None:
    """A read cancelled while far is slow: its far read ends (kept for later), and the next
    reads ask far again. Before, the ended task stayed in ``_tasks`` and every later async read
    answered from near alone: stale over fresh for the life of the process."""
    tiered, far = _tiered(redis_srv, clock)
    assert redis_srv.process is not None
    tiered.store(payload("k", clock))
    assert tiered.flush(WAIT)  # type: ignore[attr-defined]

    async def scenario() -> Any:
        with stopped([redis_srv.process.pid]):  # type: ignore[union-attr]
            task = asyncio.ensure_future(tiered.afind_many("n", ["k"]))
            await asyncio.sleep(0)
            assert len(tiered._tasks) == 1  # far's read is out
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        await asyncio.gather(*tiered._tasks)  # resumed: far's read ends
        await asyncio.sleep(0)
        assert tiered._tasks == set()
        clock.advance(60)
        fresher = payload("k", clock)
        far.store(fresher)  # another instance wrote a fresher entry
        tiered.hedge_after = WAIT  # far's answer is waited for, however loaded the machine
        found = await tiered.afind_many("n", ["k"])
        await tiered.aclose()
        return found["k"].as_of == fresher.as_of

    assert asyncio.run(scenario())
    far.close()
    tiered.close()


# The far read of the closed loop is collected unfinished: its coroutine cannot wind down.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_task_of_a_closed_loop_does_not_keep_far_off(
    redis_srv: RedisServer, clock: FakeClock
) -> None:
    tiered, far = _tiered(redis_srv, clock)
    assert redis_srv.process is not None
    tiered.store(payload("k", clock))
    assert tiered.flush(WAIT)  # type: ignore[attr-defined]
    loop = asyncio.new_event_loop()
    with stopped([redis_srv.process.pid]):
        assert loop.run_until_complete(tiered.afind_many("n", ["k"]))  # near, far out
        assert len(tiered._tasks) == 1
        loop.close()  # closed with far's read still out: it never ends
    clock.advance(60)
    fresher = payload("k", clock)
    far.store(fresher)
    tiered.hedge_after = WAIT

    async def read() -> Any:
        found = await tiered.afind_many("n", ["k"])
        await tiered.aclose()
        return found

    assert asyncio.run(read())["k"].as_of == fresher.as_of
    assert tiered._tasks == set()  # the dead task was dropped
    far.close()
    tiered.close()
    del loop
    gc.collect()  # here, where the dead read's complaint is expected


# -- the upstream breaker: every way out of the half-open trial ------------------------------------


def expire(cb: pybreaker.CircuitBreaker) -> None:
    """Let the open breaker's reset timeout pass (on pybreaker's wall clock)."""
    cb._state_storage.opened_at = datetime.now(UTC) - timedelta(seconds=cb.reset_timeout + 1)


class Upstream:
    """Answers its argument; raises ``error`` when set; blocks while ``hold`` is clear for the
    argument ``"held"`` (saying so on ``entered``)."""

    def __init__(self) -> None:
        self.error: BaseException | None = None
        self.entered = threading.Event()
        self.hold = threading.Event()
        self.calls = 0

    def __call__(self, x: str) -> str:
        self.calls += 1
        if x == "held":
            self.entered.set()
            assert self.hold.wait(WAIT)
        if self.error is not None:
            raise self.error
        return x


def _open(cb: pybreaker.CircuitBreaker, call: Callable[[], Any], up: Upstream) -> None:
    """Trip ``cb`` through ``call`` (the upstream failing once), then make its trial due."""
    up.error = ConnectionError("down")
    call()
    assert cb.current_state == pybreaker.STATE_OPEN
    up.error = None
    expire(cb)


def _sqlite(tmp_path: Path, clock: FakeClock) -> Failover:
    return Failover(f"sqlite:///{tmp_path / 'up.db'}", clock=clock, metrics=False)


def _trial_held(
    tmp_path: Path, clock: FakeClock, name: str
) -> tuple[Failover, pybreaker.CircuitBreaker, Upstream, Any, threading.Thread]:
    """A failover whose breaker is half-open with its trial call held inside the upstream (on a
    thread of its own): the engine, the breaker, the upstream, the function, the thread."""
    engine = _sqlite(tmp_path, clock)
    cb = pybreaker.CircuitBreaker(fail_max=1, reset_timeout=60)
    up = Upstream()

    @failover.failover(name, engine=engine, breaker=cb)
    def get(x: str) -> str:
        return up(x)

    assert get("a") == "a"
    _open(cb, lambda: get("a"), up)
    trial = threading.Thread(target=get, args=("held",))
    trial.start()
    assert up.entered.wait(WAIT)
    return engine, cb, up, get, trial


@pytest.mark.parametrize(
    ("way", "state"),
    [
        ("success", pybreaker.STATE_CLOSED),
        ("error", pybreaker.STATE_OPEN),
        ("excluded", pybreaker.STATE_CLOSED),  # not an upstream failure: a success
        ("soft-timeout", pybreaker.STATE_OPEN),
    ],
)
def test_upstream_trial_every_way_out_sync(
    way: str, state: str, tmp_path: Path, clock: FakeClock
) -> None:
    engine = _sqlite(tmp_path, clock)
    cb = pybreaker.CircuitBreaker(fail_max=1, reset_timeout=60)
    up = Upstream()

    @failover.failover("gate.up", engine=engine, breaker=cb, exclude=KeyError)
    def get(x: str) -> str:
        return up(x)

    # The same breaker, a soft timeout inside it: only the held call is slow.
    @failover.failover("gate.up-slow", engine=engine, breaker=cb, timeout=TIMEOUT)
    def slow(x: str) -> str:
        return up(x)

    assert get("a") == "a"
    _open(cb, lambda: get("a"), up)
    calls = up.calls
    if way == "error":
        up.error = ConnectionError("still down")
    elif way == "excluded":
        up.error = KeyError("not the upstream's failure")
    if way == "soft-timeout":
        with pytest.raises(failover.SoftTimeoutError):
            slow("held")
    elif way == "excluded":
        with pytest.raises(KeyError):
            get("a")
    else:
        get("a")
    assert up.calls == calls + 1  # the trial reached the upstream
    assert _gates[cb].trial is False
    assert cb.current_state == state
    up.hold.set()
    engine.close()


def test_calls_refused_during_the_trial_leave_it_to_its_caller(
    tmp_path: Path, clock: FakeClock
) -> None:
    """While the trial runs, the other calls are refused (served stale) without ending it;
    its own end closes the breaker and the gate opens for everyone."""
    engine, cb, up, get, trial = _trial_held(tmp_path, clock, "gate.refused")
    for _ in range(3):
        assert get.referential("a").up_to_date is False  # type: ignore[attr-defined]
    assert _gates[cb].trial is True  # still the trial's
    up.hold.set()
    trial.join(WAIT)
    assert _gates[cb].trial is False
    assert cb.current_state == pybreaker.STATE_CLOSED
    assert get.referential("a").up_to_date is True  # type: ignore[attr-defined]
    engine.close()


@pytest.mark.parametrize(
    ("way", "state"),
    [
        ("success", pybreaker.STATE_CLOSED),
        ("error", pybreaker.STATE_OPEN),
        ("soft-timeout", pybreaker.STATE_OPEN),
        ("cancelled", pybreaker.STATE_HALF_OPEN),  # no verdict: the next call is the trial
    ],
)
def test_upstream_trial_every_way_out_async(
    way: str, state: str, tmp_path: Path, clock: FakeClock
) -> None:
    engine = _sqlite(tmp_path, clock)
    cb = pybreaker.CircuitBreaker(fail_max=1, reset_timeout=60)
    up = Upstream()
    up.hold.set()  # the held call waits on the loop's own event instead
    entered = asyncio.Event()
    hold = asyncio.Event()

    async def upstream(x: str) -> str:
        if x == "held":
            entered.set()
            await hold.wait()
        return up(x)

    @failover.failover("gate.aup", engine=engine, breaker=cb)
    async def aget(x: str) -> str:
        return await upstream(x)

    @failover.failover("gate.aup-slow", engine=engine, breaker=cb, timeout=TIMEOUT)
    async def aslow(x: str) -> str:
        return await upstream(x)

    async def scenario() -> None:
        assert await aget("a") == "a"
        up.error = ConnectionError("down")
        await aget("a")
        up.error = None
        expire(cb)
        if way == "error":
            up.error = ConnectionError("still down")
            await aget("a")
        elif way == "soft-timeout":
            with pytest.raises(failover.SoftTimeoutError):
                await aslow("held")
        elif way == "cancelled":
            task = asyncio.ensure_future(aget("held"))
            await entered.wait()
            assert _gates[cb].trial is True
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        else:
            assert await aget("a") == "a"
        assert _gates[cb].trial is False
        assert cb.current_state == state
        if way == "cancelled":
            assert await aget("a") == "a"  # the next call is the trial, and closes it
            assert cb.current_state == pybreaker.STATE_CLOSED
        hold.set()
        await engine.aclose()

    asyncio.run(scenario())
    engine.close()


# -- fork: the child starts at rest ---------------------------------------------------------------

needs_fork = pytest.mark.skipif(not hasattr(os, "fork"), reason="POSIX only")


@needs_fork
def test_a_child_forked_during_an_upstream_trial_runs_a_trial_of_its_own(
    tmp_path: Path, clock: FakeClock
) -> None:
    """The parent's trial runs on a thread the child does not have: in the child it never
    ends. Before, the child refused every call through the breaker for good."""
    engine, cb, up, get, trial = _trial_held(tmp_path, clock, "gate.fork")

    def child() -> Any:
        env = get.referential("a")  # type: ignore[attr-defined]
        return [env.up_to_date, cb.current_state]

    try:
        assert _in_child(child) == ["ok", [True, pybreaker.STATE_CLOSED]]
    finally:
        up.hold.set()
        trial.join(WAIT)
    assert cb.current_state == pybreaker.STATE_CLOSED
    engine.close()


@needs_fork
def test_a_child_forked_while_a_call_holds_the_only_permit_has_it_free(
    tmp_path: Path, clock: FakeClock
) -> None:
    """The parent's call that holds the permit runs on a thread the child does not have:
    before, the child's pool had none free for good (every call refused)."""
    engine = _sqlite(tmp_path, clock)
    up = Upstream()

    @failover.failover("gate.permits", engine=engine, max_concurrency=1)
    def get(x: str) -> str:
        return up(x)

    holder = threading.Thread(target=get, args=("held",))
    holder.start()
    assert up.entered.wait(WAIT)

    def child() -> Any:
        answers = [get("b"), get("c")]
        return [answers, engine.pools.all()[0].free]  # type: ignore[attr-defined]

    try:
        assert _in_child(child) == ["ok", [["b", "c"], 1]]
    finally:
        up.hold.set()
        holder.join(WAIT)
    assert get("d") == "d"
    engine.close()


@needs_fork
def test_a_child_forked_during_a_store_trial_runs_a_trial_of_its_own(
    redis_srv: RedisServer, clock: FakeClock
) -> None:
    """The parent's store trial runs on a worker the child does not have: before, the child
    skipped the store for good."""
    store = RedisStore(redis_srv.url, prefix="fork:", socket_timeout=WAIT)
    layer = DeadlineStore(store, WAIT, trial_clock(clock), open_for=RESET, after=1)
    assert redis_srv.process is not None
    pid = redis_srv.process.pid
    layer._open_until = clock()  # open, and due: the next operation is the trial
    answers: list[Any] = []
    with stopped([pid]):
        trial = threading.Thread(target=lambda: answers.append(_find(layer)))
        trial.start()
        admitted(layer)
        assert layer._trial is not None

        def child() -> Any:
            os.kill(pid, signal.SIGCONT)  # the server answers the child
            return [_find(layer), layer.up]

        assert _in_child(child) == ["ok", [{}, True]]
    trial.join(WAIT)
    assert answers == [{}]
    assert layer.up
    store.close()


@needs_fork
def test_a_child_forked_during_hedged_reads_asks_far_again(
    redis_srv: RedisServer, clock: FakeClock
) -> None:
    """Sync and async hedged reads of the parent still out at the fork: the child's own reads
    ask far (before, they answered from near until the parent's reads were overdue, or for good
    for the async one)."""
    tiered, far = _tiered(redis_srv, clock)
    assert redis_srv.process is not None
    pid = redis_srv.process.pid
    tiered.store_many([payload("s", clock), payload("a", clock)])
    assert tiered.flush(WAIT)  # type: ignore[attr-defined]
    guard = tiered.far
    assert isinstance(guard, HedgingDeadline)
    loop = asyncio.new_event_loop()
    looping = threading.Thread(target=loop.run_forever)
    looping.start()
    with stopped([pid]):
        assert tiered.find_many("n", ["s"])  # near answered; far's sync read is out
        assert len(guard._late) == 1
        asyncio.run_coroutine_threadsafe(tiered.afind_many("n", ["a"]), loop).result(WAIT)
        assert len(tiered._tasks) == 1

        def child() -> Any:
            os.kill(pid, signal.SIGCONT)
            clock.advance(60)
            fresher = [payload("s", clock), payload("a", clock)]
            far.store_many(fresher)
            # Far's answers are waited for (a hedge, still), however loaded the machine.
            tiered.hedge_after, guard.timeout = WAIT, 2 * WAIT
            found = tiered.find_many("n", ["s"])
            afound = asyncio.run(tiered.afind_many("n", ["a"]))
            return [found["s"].as_of == clock(), afound["a"].as_of == clock()]

        assert _in_child(child) == ["ok", [True, True]]
    for task in list(tiered._tasks):  # the parent's async far read ends, now resumed
        asyncio.run_coroutine_threadsafe(asyncio.wait([task]), loop).result(WAIT)
    asyncio.run_coroutine_threadsafe(tiered.aclose(), loop).result(WAIT)
    loop.call_soon_threadsafe(loop.stop)
    looping.join(WAIT)
    loop.close()
    far.close()
    tiered.close()


@needs_fork
def test_a_child_forked_while_a_redis_permit_is_held_holds_none(
    redis_srv: RedisServer, tmp_path: Path, clock: FakeClock
) -> None:
    """The parent's lease is the parent's: the child neither holds nor renews it (were the
    parent killed, the child's renewals would keep its permit taken)."""
    from failover.execution.redis_permits import RedisPermits

    engine = _sqlite(tmp_path, clock)
    engine.bulkhead_pool("gate.redis", permits=2, source=RedisPermits(redis_srv.url, lease="30s"))
    up = Upstream()

    @failover.failover("gate.redis-permits", engine=engine, bulkhead="gate.redis")
    def get(x: str) -> str:
        return up(x)

    holder = threading.Thread(target=get, args=("held",))
    holder.start()
    assert up.entered.wait(WAIT)
    source: Any = engine.pools.named["gate.redis"].source  # type: ignore[attr-defined]
    assert len(source._held) == 1

    def child() -> Any:
        before = len(source._held)
        answer = get("b")
        return [before, answer, len(source._held), source.in_use()]

    try:
        assert _in_child(child) == ["ok", [0, "b", 0, 1]]
    finally:
        up.hold.set()
        holder.join(WAIT)
    assert source.in_use() == 0
    engine.close()


# -- permits given back on every way out ----------------------------------------------------------


def test_a_redis_permit_granted_after_its_task_and_loop_went_goes_back(
    redis_srv: RedisServer,
) -> None:
    """A task cancelled while its ask is on a stopped Redis, its loop closed before Redis
    answers: the grant goes back from the worker thread. Before, it went back through the
    closed loop (never), and the lease was renewed for as long as the process lived."""
    from failover.execution.redis_permits import RedisPermits

    source = RedisPermits(redis_srv.url, lease="30s", socket_timeout=WAIT).bind("gone", 1, True)
    assert redis_srv.process is not None
    executor = ThreadPoolExecutor(2)
    loop = asyncio.new_event_loop()
    loop.set_default_executor(executor)
    with stopped([redis_srv.process.pid]):
        task = loop.create_task(source.aacquire(1, None))
        loop.run_until_complete(asyncio.sleep(0))  # the ask is on a worker, Redis stopped
        task.cancel()
        loop.run_until_complete(asyncio.wait([task]))
        loop.close()
    executor.shutdown(wait=True)  # resumed: the ask answered, granted
    assert source._held == {}
    assert source.in_use() == 0
    source.close()


# -- stress: every way out, many times, with threads switching at every bytecode -------------------


def test_stress_upstream_breaker_returns_to_rest(clock: FakeClock) -> None:
    engine = Failover(clock=clock, metrics=False)
    cb = pybreaker.CircuitBreaker(fail_max=1, reset_timeout=0)  # every open call is due

    def upstream(x: int) -> int:
        if x % 4 == 1:
            raise ConnectionError("down")
        if x % 4 == 2:
            raise KeyError(x)  # not the upstream's failure
        return x

    @failover.failover("gate.stress", engine=engine, breaker=cb, exclude=KeyError)
    def get(x: int) -> int:
        return upstream(x)

    @failover.failover("gate.astress", engine=engine, breaker=cb, exclude=KeyError)
    async def aget(x: int) -> int:
        await asyncio.sleep(0)
        return upstream(x)

    def calls(seed: int) -> None:
        rng = random.Random(seed)
        for _ in range(300):
            with suppress(ConnectionError, KeyError, pybreaker.CircuitBreakerError):
                get(rng.randrange(8))

    async def tasks(seed: int) -> None:
        rng = random.Random(seed)
        for _ in range(30):
            batch = [asyncio.ensure_future(aget(rng.randrange(8))) for _ in range(8)]
            await asyncio.sleep(0)
            for task in batch[::3]:
                task.cancel()  # some cancelled mid-call, some before they started
            await asyncio.gather(*batch, return_exceptions=True)

    with switching_often():
        threads = [threading.Thread(target=calls, args=(i,)) for i in range(4)]
        threads.append(threading.Thread(target=asyncio.run, args=(tasks(9),)))
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(WAIT * 6)
    assert not any(t.is_alive() for t in threads)
    assert _gates[cb].trial is False
    # At rest: closed, or open / half-open with no trial in flight (a cancelled trial gives
    # no verdict): the next call is the trial.
    assert cb.current_state in (CLOSED, pybreaker.STATE_OPEN, pybreaker.STATE_HALF_OPEN)
    assert get(0) == 0  # the gate reopens: the next call is the trial, and closes it
    assert cb.current_state == CLOSED
    engine.close()


class Flaky(SqlStore):
    """A real SQLite store whose reads go every way out, by key: ``ok`` answers, ``err``
    raises, ``slow`` answers past the stress tests' deadline. Async reads too."""

    native_async = True

    def find_many(self, name: str, keys: Iterable[str]) -> dict[str, Any]:
        keys = list(keys)
        if keys == ["err"]:
            raise ConnectionError("refused")
        if keys == ["slow"]:
            threading.Event().wait(0.02)
        return super().find_many(name, keys)

    async def afind_many(self, name: str, keys: Iterable[str]) -> dict[str, Any]:
        keys = list(keys)
        if keys == ["err"]:
            raise ConnectionError("refused")
        if keys == ["slow"]:
            await asyncio.sleep(0.02)
        return await asyncio.to_thread(super().find_many, name, keys)


WAYS = ["ok", "err", "slow"]


def test_stress_store_breaker_returns_to_rest(tmp_path: Path, clock: FakeClock) -> None:
    store = Flaky(f"sqlite:///{tmp_path / 'stress.db'}")
    store.store(payload("ok", clock))
    # open_for=0: every operation of an open breaker is a trial; two workers: some refused.
    layer = HedgingDeadline(store, 0.01, clock, open_for=0, workers=2, after=1)
    seen: Counter = Counter()

    def calls(seed: int) -> None:
        rng = random.Random(seed)
        for i in range(150):
            key = rng.choice(WAYS)
            try:
                if i % 3:
                    layer.find_many("n", [key])
                else:
                    layer.hedged("find_many", store.find_many, "n", [key], budget=0.005, late=len)
            except (StoreTimeout, StoreUnavailable, ConnectionError) as exc:
                seen[type(exc).__name__] += 1

    async def tasks(seed: int) -> None:
        rng = random.Random(seed)
        for _ in range(25):
            batch = [
                asyncio.ensure_future(layer.afind_many("n", [rng.choice(WAYS)])) for _ in range(6)
            ]
            await asyncio.sleep(0)
            batch[rng.randrange(6)].cancel()
            for result in await asyncio.gather(*batch, return_exceptions=True):
                seen[type(result).__name__] += 1

    with switching_often():
        threads = [threading.Thread(target=calls, args=(i,)) for i in range(4)]
        threads.append(threading.Thread(target=asyncio.run, args=(tasks(7),)))
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(WAIT * 6)
    assert not any(t.is_alive() for t in threads)
    assert seen["StoreTimeout"] > 0  # every way out was taken
    assert seen["ConnectionError"] > 0
    assert seen["StoreUnavailable"] > 0
    join_workers(layer)
    layer.timeout = WAIT
    layer._overdue()
    assert at_rest(layer)
    assert layer._busy == 0
    assert layer.find_many("n", ["ok"])  # the gate reopens: a trial, answered
    assert layer.up
    layer.close()


def test_stress_tiered_hedge_keeps_no_task(redis_srv: RedisServer, clock: FakeClock) -> None:
    tiered, far = _tiered(redis_srv, clock)
    tiered.hedge_after = 0.0005  # far often late
    tiered.store(payload("k", clock))
    assert tiered.flush(WAIT)  # type: ignore[attr-defined]

    async def reads(seed: int) -> None:
        rng = random.Random(seed)
        for _ in range(40):
            batch = [asyncio.ensure_future(tiered.afind_many("n", ["k"])) for _ in range(5)]
            await asyncio.sleep(0)
            batch[rng.randrange(5)].cancel()
            await asyncio.gather(*batch, return_exceptions=True)
        loop = asyncio.get_running_loop()
        while mine := [t for t in list(tiered._tasks) if t.get_loop() is loop and not t.done()]:
            await asyncio.gather(*mine, return_exceptions=True)  # the far reads still out
        await tiered.aclose()

    def sync_reads() -> None:
        for _ in range(100):
            tiered.find_many("n", ["k"])

    with switching_often():
        threads = [threading.Thread(target=asyncio.run, args=(reads(i),)) for i in range(2)]
        threads.append(threading.Thread(target=sync_reads))
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(WAIT * 6)
    assert not any(t.is_alive() for t in threads)
    guard = tiered.far
    assert isinstance(guard, HedgingDeadline)
    join_workers(guard)
    assert tiered._tasks == set()
    assert guard._late == {}
    assert at_rest(guard)
    assert guard.up
    far.close()
    tiered.close()


def test_stress_bulkhead_gives_every_permit_back(clock: FakeClock) -> None:
    engine = Failover(clock=clock, metrics=False)
    pool = engine.bulkhead_pool("gate.stress", permits=3)

    def upstream(x: int) -> int:
        if x % 3 == 1:
            raise ConnectionError("down")
        return x

    @failover.failover("gate.heavy", engine=engine, bulkhead="gate.stress", weight=2,
                       acquire_timeout=0.001)  # fmt: skip
    def heavy(x: int) -> int:
        return upstream(x)

    @failover.failover("gate.light", engine=engine, bulkhead="gate.stress", acquire_timeout=0)
    def light(x: int) -> int:
        return upstream(x)

    @failover.failover("gate.alight", engine=engine, bulkhead="gate.stress", acquire_timeout=0.01)
    async def alight(x: int) -> int:
        await asyncio.sleep(0)
        return upstream(x)

    def calls(seed: int) -> None:
        rng = random.Random(seed)
        for _ in range(300):
            with suppress(ConnectionError, BulkheadFull):
                (heavy if rng.random() < 0.5 else light)(rng.randrange(6))

    async def tasks(seed: int) -> None:
        rng = random.Random(seed)
        for _ in range(40):
            batch = [asyncio.ensure_future(alight(rng.randrange(6))) for _ in range(6)]
            await asyncio.sleep(0)
            for task in batch[:: rng.randrange(1, 4)]:
                task.cancel()  # some holding permits, some waiting, some not started
            await asyncio.gather(*batch, return_exceptions=True)

    with switching_often():
        threads = [threading.Thread(target=calls, args=(i,)) for i in range(4)]
        threads += [threading.Thread(target=asyncio.run, args=(tasks(i),)) for i in (8, 9)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(WAIT * 6)
    assert not any(t.is_alive() for t in threads)
    assert pool.free == 3
    assert pool.waiting == 0
    source = pool.source
    assert isinstance(source, LocalPermits)
    assert len(source._waiters) == 0 or all(w.gone for w in source._waiters)
    engine.close()
