"""Async-native store reads (PostgreSQL through psycopg's async connections, Redis through
redis.asyncio) under cancellation and trouble.

Real servers of this module's own (stopping one must not stall other tests). A read is held
"in flight" by a TCP hop in front of the server (`Proxy`): the request reaches the server, its
reply is withheld until the test lets it through, so a caller is cancelled (or its
``asyncio.timeout`` expires) at a known point of the read, without sleeping. A hung server is a
``SIGSTOP``ped one, as in tests/test_store_hung.py. No assertion on time.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import suppress
from typing import Any

import pytest

import failover
from failover import Failover
from failover.closeable import AsyncCloseable
from failover.stores.backends.redis import RedisStore
from failover.stores.backends.sql import SqlStore
from failover.stores.base import walk
from failover.stores.layers.deadline import DeadlineStore

from .conftest import FakeClock, Upstream
from .own_servers import children, own_postgres, running, stopped
from .redis_server import RedisServer

RESET = 5.0  # the store breaker's open time, on the fake clock: the tests move it past
PATIENT = 30.0  # a store deadline no held read reaches: the test releases it first
KEYS = 8


# -- servers ----------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _collected() -> Iterator[None]:
    yield
    gc.collect()  # what a test left unclosed warns in that test, not in a later one


@pytest.fixture(scope="module")
def pg_server() -> Iterator[Any]:
    yield from own_postgres()


@pytest.fixture(scope="module")
def redis_srv() -> Iterator[Any]:
    yield from running(RedisServer())


class Proxy:
    """A TCP hop in front of a real server: bytes pass both ways; while held, the server's
    replies are withheld (the requests still reach the server) and the requests counted."""

    def __init__(self, port: int) -> None:
        self.target = ("127.0.0.1", port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self.listener.getsockname()[1]
        self._open = threading.Event()
        self._open.set()
        self._asked = 0
        self._changed = threading.Condition()
        self._sockets: list[socket.socket] = []
        self.ports: list[int] = []  # the hop's own ends of its connections to the server
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.target)
            self._sockets += [client, server]
            self.ports.append(server.getsockname()[1])
            for src, dst, request in ((client, server, True), (server, client, False)):
                threading.Thread(target=self._pump, args=(src, dst, request), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, request: bool) -> None:
        try:
            while data := src.recv(65536):
                if not request:
                    self._open.wait()
                elif not self._open.is_set():
                    with self._changed:
                        self._asked += 1
                        self._changed.notify_all()
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for end in (src, dst):
                with suppress(OSError):
                    end.shutdown(socket.SHUT_RDWR)

    def hold(self) -> None:
        with self._changed:
            self._asked = 0
        self._open.clear()

    def release(self) -> None:
        self._open.set()

    def asked(self, n: int = 1) -> bool:
        """Whether ``n`` requests reached the server while held (waits up to 10 s for them)."""
        with self._changed:
            return self._changed.wait_for(lambda: self._asked >= n, 10)

    def close(self) -> None:
        self.release()
        self.listener.close()
        for sock in self._sockets:
            with suppress(OSError):
                sock.close()


def _conninfo(url: str) -> str:
    return url.replace("postgresql+psycopg://", "postgresql://")


class Backend:
    """One real store, its engine, and what checks that its connections are healthy."""

    def __init__(self, kind: str, server: Any, clock: FakeClock, timeout: float) -> None:
        self.kind = kind
        self.server = server
        self.proxy = Proxy(server.port)
        tag = os.urandom(4).hex()
        if kind == "postgresql":
            url = server.url.replace(f":{server.port}/", f":{self.proxy.port}/")
            self.store: Any = SqlStore(url, table_prefix=f"t{tag}_")
            self.engine = Failover(
                self.store, async_writes=False, store_timeout=timeout, clock=clock, metrics=False
            )
        else:
            url = f"redis://127.0.0.1:{self.proxy.port}/0?prefix=t{tag}:"
            self.engine = Failover(
                url, async_writes=False, store_timeout=timeout, clock=clock, metrics=False
            )
            self.store = next(s for s in walk(self.engine.store) if isinstance(s, RedisStore))
        self.upstream = Upstream()
        upstream = self.upstream

        @failover.failover(f"svc.{tag}", engine=self.engine)
        async def get(x: int) -> int:
            return upstream(x)  # type: ignore[return-value]

        self.get = get

    def deadline(self) -> DeadlineStore:
        return next(s for s in walk(self.engine.store) if isinstance(s, DeadlineStore))

    def pids(self) -> list[int]:
        """The server's processes (PostgreSQL: the postmaster and its backends)."""
        if self.kind == "postgresql":
            postmaster = int((self.server.data / "postmaster.pid").read_text().split()[0])
            return [postmaster, *children(postmaster)]
        return [self.server.process.pid]

    async def stored(self) -> None:
        """Every key's entry stored (live calls), the upstream then down: calls recover."""
        assert [await self.get(k) for k in range(KEYS)] == list(range(KEYS))
        self.upstream.fail()
        assert await self.get(0) == 0  # an async connection of this loop, made and kept

    async def healthy(self) -> None:
        """The next 50 recoveries (batched, then one by one) answer each its own entry, and
        no connection is left checked out or in a transaction."""
        keys = [k % KEYS for k in range(50)]
        assert await asyncio.gather(*(self.get(k) for k in keys)) == keys
        assert [await self.get(k) for k in reversed(keys)] == list(reversed(keys))
        loop = asyncio.get_running_loop()
        if self.kind == "postgresql":
            import psycopg

            idle = self.store._aio._idle.get(loop, [])
            assert idle  # connections kept for the loop, each idle, outside a transaction
            for connection in idle:
                assert not connection.broken
                assert connection.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
            states = await asyncio.to_thread(_pg_states, self.server.url)
            assert not {s for s in states if "transaction" in s}, states
        else:
            pool = self.store._aio._clients[loop].connection_pool
            assert not pool._in_use_connections

    async def closed_here(self) -> None:
        """This loop's async connections closed, on it (`Failover.aclose` would close the
        whole engine, which other loops still use)."""
        store = self.engine.store
        assert isinstance(store, AsyncCloseable)
        await store.aclose()

    def close(self) -> None:
        self.engine.close()
        self.proxy.close()


def _pg_states(url: str) -> dict[str, int]:
    """The states of the database's client backends (pg_stat_activity), this one left out."""
    import psycopg

    with psycopg.connect(_conninfo(url), autocommit=True) as conn:
        rows = conn.execute(
            "SELECT coalesce(state, ''), count(*) FROM pg_stat_activity"
            " WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()"
            " AND datname = current_database() GROUP BY 1"
        ).fetchall()
    return dict(rows)


@pytest.fixture(params=["postgresql", "redis"])
def backend_of(
    request: pytest.FixtureRequest, clock: FakeClock
) -> Iterator[Callable[[float], Backend]]:
    made: list[Backend] = []
    server = request.getfixturevalue("pg_server" if request.param == "postgresql" else "redis_srv")

    def make(timeout: float = PATIENT) -> Backend:
        made.append(Backend(request.param, server, clock, timeout))
        return made[-1]

    yield make
    for backend in made:
        backend.close()


def _run(backend: Backend, scenario: Callable[[], Any]) -> None:
    async def main() -> None:
        try:
            async with asyncio.timeout(60):  # a hang fails the test, not the suite
                await scenario()
        finally:
            await backend.closed_here()

    asyncio.run(main())


# -- a caller cancelled during its read -------------------------------------------------------


def test_a_caller_cancelled_during_its_read_leaves_the_batch_and_the_pool_whole(
    backend_of: Callable[[float], Backend],
) -> None:
    b = backend_of(PATIENT)

    async def scenario() -> None:
        await b.stored()
        b.proxy.hold()
        tasks = [asyncio.create_task(b.get(k)) for k in range(KEYS)]
        assert await asyncio.to_thread(b.proxy.asked)  # the batch's read reached the server
        tasks[0].cancel()
        await asyncio.sleep(0)  # the cancellation lands before the reply
        b.proxy.release()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        assert isinstance(results[0], asyncio.CancelledError)
        assert results[1:] == list(range(1, KEYS))
        await b.healthy()

    _run(b, scenario)


def test_every_caller_of_a_batch_cancelled_leaves_the_pool_whole(
    backend_of: Callable[[float], Backend],
) -> None:
    b = backend_of(PATIENT)

    async def scenario() -> None:
        await b.stored()
        b.proxy.hold()
        tasks = [asyncio.create_task(b.get(k)) for k in range(KEYS)]
        assert await asyncio.to_thread(b.proxy.asked)
        for task in tasks:
            task.cancel()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        assert all(isinstance(r, asyncio.CancelledError) for r in results)
        b.proxy.release()  # the reply nobody waits for any more arrives now
        await b.healthy()

    _run(b, scenario)


def test_an_asyncio_timeout_expiring_during_the_read_raises_timeout_error(
    backend_of: Callable[[float], Backend],
) -> None:
    b = backend_of(PATIENT)

    async def scenario() -> None:
        await b.stored()
        scopes: list[asyncio.Timeout] = []

        async def bounded(k: int) -> int:
            async with asyncio.timeout(None) as scope:
                scopes.append(scope)
                return await b.get(k)

        b.proxy.hold()
        tasks = [asyncio.create_task(bounded(k)) for k in range(KEYS)]
        assert await asyncio.to_thread(b.proxy.asked)
        scopes[0].reschedule(asyncio.get_running_loop().time())  # expires now, mid-read
        with pytest.raises(TimeoutError):
            await tasks[0]
        b.proxy.release()
        assert await asyncio.gather(*tasks[1:]) == list(range(1, KEYS))
        await b.healthy()

    _run(b, scenario)


# -- a hung server ----------------------------------------------------------------------------


def test_a_stopped_server_fails_an_async_recovery_at_the_store_deadline(
    backend_of: Callable[[float], Backend], clock: FakeClock
) -> None:
    b = backend_of(0.2)
    # psycopg winds a cancelled statement down itself (asks the server to cancel it, then waits
    # for the result): against a stopped server it gives up after seconds, and says so.
    gave_up: list[logging.LogRecord] = []
    psycopg_log = logging.getLogger("psycopg")
    handler = logging.Handler(logging.WARNING)
    handler.emit = gave_up.append  # type: ignore[method-assign]
    psycopg_log.addHandler(handler)

    async def scenario() -> None:
        await b.stored()
        layer = b.deadline()
        with stopped(b.pids()):
            results = await asyncio.gather(*(b.get(k) for k in range(KEYS)), return_exceptions=True)
            # The read gave up at the deadline: a store error, the upstream's own exception;
            # the callers did not wait for the abandoned statement to wind down.
            assert all(isinstance(r, ConnectionError) for r in results), results
            assert layer.errors[("find_many", "timeout")] == 1
            assert not gave_up, [r.getMessage() for r in gave_up]
        for stage in walk(b.engine.store):
            if isinstance(stage, DeadlineStore):
                stage.timeout = PATIENT  # a server just resumed is not taken for a hung one
        clock.advance(RESET + 1)  # the store breaker lets a trial through
        # The replies to the abandoned read arrive now: never taken for another read's.
        assert [await b.get(k) for k in range(KEYS)] == list(range(KEYS))
        await b.healthy()

    try:
        _run(b, scenario)
    finally:
        psycopg_log.removeHandler(handler)


# -- many event loops -------------------------------------------------------------------------


def test_two_loops_in_two_threads_read_each_its_own_entries(
    backend_of: Callable[[float], Backend],
) -> None:
    b = backend_of(PATIENT)
    _run(b, b.stored)
    both = threading.Barrier(2, timeout=30)
    errors: list[BaseException] = []

    def loop_of(keys: list[int]) -> None:
        async def reads() -> None:
            for _ in range(20):
                both.wait()  # the two loops' batches in flight together
                assert await asyncio.gather(*(b.get(k) for k in keys)) == keys
            await b.closed_here()

        try:
            asyncio.run(reads())
        except BaseException as exc:  # pragma: no cover - reported below
            both.abort()
            errors.append(exc)

    threads = [
        threading.Thread(target=loop_of, args=([0, 1, 2, 3],)),
        threading.Thread(target=loop_of, args=([7, 6, 5, 4, 0],)),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    _run(b, b.healthy)


# The doomed loop's tasks are destroyed pending: asyncio says so (never-awaited coroutines).
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.filterwarnings("ignore::ResourceWarning")
def test_a_loop_closed_with_a_batch_pending_leaves_the_other_loop_working(
    backend_of: Callable[[float], Backend],
) -> None:
    b = backend_of(PATIENT)
    _run(b, b.stored)
    results: list[Any] = []

    async def other() -> None:
        results.append(await asyncio.gather(*(b.get(k) for k in range(KEYS))))
        await b.healthy()

    b.proxy.hold()
    doomed = asyncio.new_event_loop()
    meanwhile = threading.Thread(target=_run, args=(b, other))
    try:
        meanwhile.start()
        assert b.proxy.asked()  # the other loop's read is in flight

        async def start() -> list[asyncio.Task[int]]:
            tasks = [asyncio.create_task(b.get(k)) for k in range(KEYS)]
            await asyncio.sleep(0)  # each joined the loop turn's batch
            return tasks

        tasks = doomed.run_until_complete(start())
        assert not any(t.done() for t in tasks)
    finally:
        doomed.close()  # with the batch pending (or its read in flight): never run again
        b.proxy.release()
        meanwhile.join()
    assert results == [list(range(KEYS))]
    _run(b, b.healthy)  # and a loop started afterwards
    b.close()
    del tasks
    gc.collect()  # the doomed loop's leftovers warn here, not in a later test


def test_loops_that_ended_leave_no_postgres_connection_behind(
    pg_server: Any, clock: FakeClock
) -> None:
    import psycopg

    b = Backend("postgresql", pg_server, clock, PATIENT)
    try:
        _run(b, b.stored)

        async def recoveries() -> None:
            assert await asyncio.gather(*(b.get(k) for k in range(KEYS))) == list(range(KEYS))

        for _ in range(12):
            asyncio.run(recoveries())  # each loop ends without closing its connections
        # The ended loops' connections are closed once another loop connects: at most the
        # last loop's are left open (12 loops would otherwise hold 12 server backends).
        assert sum(len(idle) for idle in b.store._aio._idle.values()) <= 1
        with psycopg.connect(_conninfo(pg_server.url), autocommit=True) as conn:
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE client_port = ANY(%s)",
                (b.proxy.ports,),
            ).fetchone()
        assert row is not None
        assert row[0] <= 4, row  # the last loop's, the sync pool's, one closing at most
    finally:
        b.close()
