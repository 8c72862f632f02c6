"""The bounded runner of a `failover.stores.layers.deadline.DeadlineStore`: a store operation
holds its caller no longer than the deadline.

Socket timeouts do not bound a *hung* server (a stopped PostgreSQL still accepts the TCP data),
so the operation runs on a small bounded pool of worker threads and the caller waits for it at
most ``timeout`` seconds; past it the caller gets a `StoreTimeout` (a read is then a miss, a
write is dropped and counted) and the worker finishes, or fails, on its own. When every worker
is still held by a hung operation, further operations are refused at once instead of queueing.
An awaited operation is a task on the caller's loop, waited for as long, then cancelled and
left to wind down (never awaited past the deadline). Each verdict reaches the store breaker
(`failover.stores.layers.store_breaker.StoreBreaker`).

A store that bounds a read itself (`ReadsHere`: a SQLite file, whose reads wait on nothing
but the file's locks and its own work) reads on the caller's thread instead, with no hand-off:
`BoundedRunner._run_here` sets the deadline (`until`), and the store gives up past it
(`StoreTimeout`), or sends the read to a worker after all (`Elsewhere`) when it cannot bound
it now.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from datetime import datetime
from time import monotonic
from typing import Any, Protocol, TypeVar, runtime_checkable

from ...errors import StoreError
from .store_breaker import StoreBreaker, StoreUnavailable

__all__ = ["BoundedRunner", "Elsewhere", "ReadsHere", "StoreTimeout", "abandoned", "until"]

T = TypeVar("T")

_running = threading.local()  # the operation a worker runs now: its "given up" flag


def abandoned() -> bool:
    """Whether the caller of the store operation running on this thread gave up on it at its
    deadline: the store then discards the connection it used instead of lending it again (it
    may still be mid-statement, or mid-reply, when the operation returns)."""
    flag: threading.Event | None = getattr(_running, "flag", None)
    return flag is not None and flag.is_set()


def until() -> float | None:
    """The `time.monotonic` deadline of the read the caller's thread runs now within its
    deadline (`BoundedRunner._run_here`), or ``None``: any other operation."""
    deadline: float | None = getattr(_running, "until", None)
    return deadline


class Elsewhere(Exception):
    """Raised by a store asked to read on the caller's thread (`until`) that cannot bound the
    read now (no connection free without a wait, the table not ready): a worker runs it."""


@runtime_checkable
class ReadsHere(Protocol):
    """A store that can bound its reads (``find``, ``find_many``) on the caller's thread."""

    def reads_here(self, timeout: float) -> bool:
        """Set up reads bounded by ``timeout`` seconds on the caller's thread; whether this
        store can make them. A read made while `until` gives a deadline then ends by it:
        answered, or `StoreTimeout`, or `Elsewhere`."""
        ...


def _flagged(flag: threading.Event, fn: Callable[..., T], *args: Any) -> T:
    _running.flag = flag
    try:
        return fn(*args)
    finally:
        _running.flag = None


class StoreTimeout(StoreError, TimeoutError):
    """A store operation did not answer within the engine's ``store_timeout``."""


class BoundedRunner(StoreBreaker):
    """Runs store operations within ``timeout`` seconds, on at most ``workers`` threads (or as
    tasks of the caller's loop), their verdicts told to the breaker.

    Args:
        timeout: the most seconds a caller waits for one operation.
        workers: threads running operations; when all are held (by a hung store), further
            operations fail at once, without opening the breaker (a busy healthy store is not
            a failing one).
        clock, open_for, after: the breaker's (`StoreBreaker`).
    """

    def __init__(
        self,
        timeout: float,
        clock: Callable[[], datetime],
        open_for: float,
        workers: int,
        after: int,
    ) -> None:
        super().__init__(clock, open_for, after)
        self.timeout = timeout
        self.workers = workers
        self._busy = 0
        self._pool: ThreadPoolExecutor | None = None
        self._abandoned: set[asyncio.Future[Any]] = set()  # async operations given up, ending

    def forked(self) -> None:
        """In a forked child (a preforking server's worker): the parent's workers did not come
        along, and its pool would take operations no thread ever runs; a trial they ran is
        not the child's. The child starts with no worker and no trial (what the breaker
        learnt of the store stays)."""
        self._lock = threading.Lock()  # another thread may have held it at the fork
        self._pool, self._busy, self._trial = None, 0, None
        self._abandoned = set()

    def _run(
        self,
        operation: str,
        fn: Callable[..., T],
        *args: Any,
        guarded: bool = True,
        admit: bool = True,
    ) -> T:
        # guarded=False: bounded by the deadline, but neither skipped by the breaker nor
        # opening it (the health publisher's own writes: not a caller's, see failover.publish).
        # admit=False (the queue's worker): never skipped, its verdict counted.
        trial = self._admit(operation) if guarded and admit else None
        outcome: str | None = None  # no verdict unless the operation answers or fails
        try:
            future, flag = self._start(operation, fn, *args)
            try:
                result = future.result(self.timeout)
            except FutureTimeout:
                flag.set()  # its connection is discarded when the operation ends
                outcome = "out"
                raise self._timed_out(operation) from None
            except Exception as exc:
                outcome = self._failure(operation, exc)
                raise
            outcome = "answered"
            return result
        finally:
            if guarded:
                self._ended(trial, outcome)

    def _run_here(self, operation: str, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)``, a read of a `ReadsHere` store, on this thread within the deadline
        (`until`), its verdict told to the breaker as `_run` tells it.

        Raises:
            Elsewhere: the store cannot bound it now: no verdict, the caller hands it over.
        """
        trial = self._admit(operation)
        outcome: str | None = None
        _running.until = monotonic() + self.timeout
        try:
            result = fn(*args)
            outcome = "answered"
            return result
        except Elsewhere:
            raise  # no verdict: the worker's will be
        except StoreTimeout:
            outcome = "out"
            self.errors[(operation, "timeout")] += 1
            raise
        except Exception as exc:
            outcome = self._failure(operation, exc)
            raise
        finally:
            _running.until = None
            self._ended(trial, outcome)

    def _timed_out(self, operation: str) -> StoreTimeout:
        """Count a timeout; the error to raise (the caller's `_ended` opens the breaker)."""
        self.errors[(operation, "timeout")] += 1
        return StoreTimeout(f"store {operation} did not answer within {self.timeout:g} s")

    def _start(
        self, operation: str, fn: Callable[..., T], *args: Any
    ) -> tuple[Future[T], threading.Event]:
        """``fn(*args)`` started on a worker, with its "given up" flag.

        Raises:
            StoreTimeout: every worker is held by an earlier operation.
        """
        with self._lock:
            if self._busy >= self.workers:
                full = True
            else:
                full = False
                self._busy += 1
                if self._pool is None:
                    self._pool = ThreadPoolExecutor(self.workers, "failover-store")
                pool = self._pool
        if full:
            self.errors[(operation, "timeout")] += 1
            raise StoreTimeout(f"store {operation}: every worker is held by an earlier operation")
        flag = threading.Event()
        # In a copy of the caller's context: a store of your own reads its context variables
        # (a request id, the tenant) on the worker as on the caller's thread.
        future = pool.submit(contextvars.copy_context().run, _flagged, flag, fn, *args)
        future.add_done_callback(self._release)
        return future, flag

    def _release(self, _: object) -> None:
        with self._lock:
            self._busy -= 1

    # -- the async side -----------------------------------------------------------------------

    async def _arun(self, operation: str, work: Awaitable[T]) -> T:
        try:
            trial = self._admit(operation)
        except StoreUnavailable:
            if asyncio.iscoroutine(work):
                work.close()
            raise
        outcome: str | None = None
        try:
            task = asyncio.ensure_future(work)
            try:
                done, _ = await asyncio.wait((task,), timeout=self.timeout)
            except BaseException:  # the caller was cancelled: so is the operation, left to end
                self._abandon(task)
                raise
            if not done:
                # Cancelled past the deadline, and not awaited (asyncio.wait_for would be): a
                # store may take seconds winding a cancelled statement down (psycopg asks the
                # server to cancel it, and waits; a hung server never answers). The async stores
                # discard a connection cancelled mid-statement when it ends: never reused.
                self._abandon(task)
                outcome = "out"
                raise self._timed_out(operation)
            try:
                result = task.result()
            except Exception as exc:
                outcome = self._failure(operation, exc)
                raise
            outcome = "answered"
            return result
        finally:
            self._ended(trial, outcome)

    def _abandon(self, task: asyncio.Future[Any]) -> None:
        """``task`` cancelled and left to end on its own (held until then: a task nobody
        references may be collected mid-way)."""
        task.cancel()
        self._abandoned.add(task)
        task.add_done_callback(self._wound_down)

    def _wound_down(self, task: asyncio.Future[Any]) -> None:
        self._abandoned.discard(task)
        if not task.cancelled():
            task.exception()  # retrieved: nobody waits for it any more
