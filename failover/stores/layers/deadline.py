"""`DeadlineStore`: no store operation holds a caller longer than a deadline, and a store that
timed out is skipped for a while (the store breaker).

Socket timeouts do not bound a *hung* server (a stopped PostgreSQL still accepts the TCP data),
so the operation runs on a small bounded pool of worker threads and the caller waits for it at
most ``timeout`` seconds; past it the caller gets a `StoreTimeout` (a read is then a miss, a
write is dropped and counted) and the worker finishes, or fails, on its own. When every worker
is still held by a hung operation, further operations are refused at once instead of queueing.

The breaker opens when the store is *out*: ``after`` operations in a row (default 3) timed out
or were refused at the connection (`failover.stores.outages.out`), the queue's own writes
included, so that a dead database with healthy upstreams (nothing but writes) is seen too. One
slow read is not an outage; an error the store answered with resets the count, and one that is
the caller's own (a value the store cannot encode) says nothing about the store. Once open, the
breaker lets one operation through as a trial after ``open_for``; every way a trial ends
reaches `DeadlineStore._ended`, the one place that ends it: answered (closed), out or failed
(open for another ``open_for``), or without a verdict (refused a worker, cancelled,
interrupted: the next operation is the trial). An answer from any operation closes it. A forked
child starts with no worker, no trial.

The store going out (the breaker opening) and answering again (closing) are facts: `watch`ers
are told, on the thread whose operation changed it (the engine puts them on its stream, for
``failover_store_up``, ``HealthReport.stores`` and the logs).
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import operator
import threading
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from datetime import datetime, timedelta
from logging import getLogger
from typing import Any, TypeVar

from ...errors import SerializationError, StoreError
from ...forks import AfterFork
from ..base import (
    FailoverStore,
    Payload,
    as_async,
    delete_many,
    native_async,
    writes_async,
)
from ..browsing import BrowsingLayer
from ..health_rows import HealthRowsLayer, ProcessHealth, below
from ..layer import Layer
from ..outages import out
from .async_write import AsyncWriteStore

__all__ = ["DeadlineStore", "StoreTimeout", "StoreUnavailable", "abandoned"]

T = TypeVar("T")

log = getLogger(__name__)

_running = threading.local()  # the operation a worker runs now: its "given up" flag


def abandoned() -> bool:
    """Whether the caller of the store operation running on this thread gave up on it at its
    deadline: the store then discards the connection it used instead of lending it again (it
    may still be mid-statement, or mid-reply, when the operation returns)."""
    flag: threading.Event | None = getattr(_running, "flag", None)
    return flag is not None and flag.is_set()


def _flagged(flag: threading.Event, fn: Callable[..., T], *args: Any) -> T:
    _running.flag = flag
    try:
        return fn(*args)
    finally:
        _running.flag = None


class StoreTimeout(StoreError, TimeoutError):
    """A store operation did not answer within the engine's ``store_timeout``."""


class StoreUnavailable(StoreError):
    """A store operation skipped: the store breaker is open (the store is out)."""


class DeadlineStore(HealthRowsLayer, BrowsingLayer, Layer):
    """Bounds the caller's wait on a store that does I/O, and skips a store that timed out.

    Reads (``find``, ``find_many``) always run under the deadline; writes only when they would
    otherwise block the caller: with no async-writes queue below, and the queue's own writes on
    a caller's thread (``rejection="caller_runs"`` at a full queue, or after its close). A
    queued write is already off the caller's thread and passes straight through, without a
    thread hop; the queue's worker writes under the deadline too, never refused by the breaker
    (a write it cannot make stays queued and is retried), its verdicts counted like a
    caller's.

    Args:
        inner: the store (or the async-writes queue over it).
        timeout: the most seconds a caller waits for one operation.
        clock: the engine's clock, for the breaker's open time.
        open_for: how long the breaker skips the store once open; then one operation is let
            through as a trial, and its success closes the breaker.
        after: how many operations in a row must time out or be refused at the connection
            for the breaker to open (one slow read is not an outage).
        workers: threads running operations; when all are held (by a hung store), further
            operations fail at once, without opening the breaker (a busy healthy store is not
            a failing one).

    Attributes:
        errors: counts of ``(operation, reason)``, reason ``timeout``, ``error`` or
            ``breaker_open``.
    """

    def __init__(
        self,
        inner: FailoverStore,
        timeout: float,
        clock: Callable[[], datetime],
        open_for: float = 5.0,
        workers: int = 32,
        after: int = 3,
    ) -> None:
        self.inner = inner
        self.timeout = timeout
        self.clock = clock
        self.open_for = timedelta(seconds=open_for)
        self.workers = workers
        self.after = after
        self._streak = 0  # operations in a row that were out (timed out, refused)
        self.errors: Counter[tuple[str, str]] = Counter()
        self._lock = threading.Lock()
        self._busy = 0
        self._pool: ThreadPoolExecutor | None = None
        self._open_until: datetime | None = None
        # The trial operation under way (others are still skipped): its token, which only
        # that operation's end (or a close, or a fork) clears.
        self._trial: object | None = None
        self._abandoned: set[asyncio.Future[Any]] = set()  # async operations given up, ending
        # Told ``False`` when the store goes out (the breaker opens), ``True`` when it answers
        # again (`watch`).
        self._watchers: list[Callable[[bool], None]] = []
        _FORKS.add(self)
        # Read once: a queued write passes straight through on the hot path.
        self._queued = writes_async(inner)
        if isinstance(inner, AsyncWriteStore):
            # The queue's writes on a caller's thread (caller_runs) wait no longer than reads.
            inner.bound_writes_here(functools.partial(self._run, "store_many"))
            # The worker's writes: bounded (a hung store holds it no longer), never skipped.
            inner.bound_queued_writes(functools.partial(self._run, admit=False))

    def __repr__(self) -> str:
        return f"DeadlineStore({self.inner!r}, timeout={self.timeout})"

    @property
    def up(self) -> bool:
        """``False`` while the store is out: its latest ``after`` operations timed out or were
        refused at the connection (the breaker is then open, and the store skipped)."""
        with self._lock:
            return self._open_until is None

    def watch(self, watcher: Callable[[bool], None]) -> None:
        """Have ``watcher(up)`` called each time the store goes out (``False``: its breaker
        opened) or answers again (``True``), on the thread whose operation changed it, under
        the breaker's lock (so that watchers hear the changes in their order): a watcher
        records or wakes, it never waits nor uses the store. One that raises is logged, never
        the operation's outcome. A store out already is told at once."""
        with self._lock:
            self._watchers.append(watcher)
            if self._open_until is not None:
                self._tell(watcher, False)

    def settle(self) -> None:
        """Count what is owed before the store's state is read (nothing here; a hedging layer
        counts the operations it left running past their deadline)."""

    def browsed(self) -> FailoverStore:
        """The inner store: browsing is an operator's, not a caller's, wait."""
        return self.inner

    # -- the breaker --------------------------------------------------------------------------

    def _admit(self, operation: str) -> object | None:
        """Let the operation through: ``None``, or the trial's token when it is the trial of
        an open breaker (the caller then owes `_ended` that token, whatever happens).

        Raises:
            StoreUnavailable: the breaker is open, or another operation is its trial.
        """
        with self._lock:
            until = self._open_until
            if until is None:
                return None
            if self._trial is None and self.clock() >= until:
                self._trial = token = object()
                return token
        self.errors[(operation, "breaker_open")] += 1
        raise StoreUnavailable(f"store skipped for {operation}: its breaker is open")

    def _ended(self, trial: object | None, outcome: str | None) -> None:
        """An operation the breaker admitted (or the queue's write) ended: the one place its
        verdict reaches the breaker, and the one place a trial ends, whichever way it went.

        Args:
            trial: the token `_admit` gave the trial; ``None`` for any other operation.
            outcome: ``"answered"`` (closes the breaker), ``"out"`` (timed out or refused at
                the connection: the ``after``-th in a row, or a trial's, opens it for
                ``open_for`` from now), ``"error"`` (a store error that came back: the store
                is reachable, the count starts over; a trial's opens it again), or ``None``:
                no verdict (refused a worker, cancelled, interrupted, or an error that is the
                caller's own); the breaker stays as it was and, open, lets the next operation
                through as its trial.
        """
        if trial is None and (
            outcome is None
            or (outcome == "answered" and not self._streak and self._open_until is None)
        ):
            return  # the common case: nothing changes, no lock
        with self._lock:
            was = self._open_until is None
            if trial is not None and self._trial is trial:
                self._trial = None
            if outcome == "answered":
                self._streak = 0
                self._open_until = None
            elif outcome == "out":
                self._streak += 1
                if trial is not None or self._streak >= self.after:
                    self._open_until = self.clock() + self.open_for
            elif outcome == "error":
                self._streak = 0
                if trial is not None:
                    self._open_until = self.clock() + self.open_for
            up = self._open_until is None
            if up != was:  # told under the lock: watchers hear the changes in their order
                self._changed(up)

    def _changed(self, up: bool) -> None:
        """Tell the watchers the store went out or answers again."""
        for watcher in self._watchers:
            self._tell(watcher, up)

    def _tell(self, watcher: Callable[[bool], None], up: bool) -> None:
        try:
            watcher(up)
        except Exception:  # a watcher's bug is never the operation's outcome
            log.warning("%r: a watcher of its state failed", self, exc_info=True)

    def _failure(self, operation: str, exc: BaseException) -> str | None:
        """Count an error that came back; its outcome for `_ended`: ``"out"`` when it says the
        store could not be reached, none when it is the caller's own (a value the store could
        not encode or decode), else ``"error"``."""
        self.errors[(operation, "error")] += 1
        if isinstance(exc, SerializationError):
            return None
        return "out" if out(exc) else "error"

    def forked(self) -> None:
        """In a forked child (a preforking server's worker): the parent's workers did not come
        along, and its pool would take operations no thread ever runs; a trial they ran is
        not the child's. The child starts with no worker and no trial (what the breaker
        learnt of the store stays)."""
        self._lock = threading.Lock()  # another thread may have held it at the fork
        self._pool, self._busy, self._trial = None, 0, None
        self._abandoned = set()

    # -- running under the deadline -----------------------------------------------------------

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

    # -- the operations -----------------------------------------------------------------------

    def find(self, name: str, key: str) -> Payload | None:
        """The entry, within the deadline."""
        return self._run("find", self.inner.find, name, key)

    def find_many(self, name: str, keys: Iterable[str]) -> dict[str, Payload]:
        """The entries found, within the deadline."""
        return self._run("find_many", self.inner.find_many, name, list(keys))

    def store(self, payload: Payload) -> int | None:
        """Store, within the deadline unless the write is queued below."""
        if self._queued:
            return self.inner.store(payload)
        return self._run("store", self.inner.store, payload)

    def store_many(self, payloads: Sequence[Payload]) -> int | None:
        """Store several, within the deadline unless the writes are queued below."""
        if self._queued:
            return self.inner.store_many(payloads)
        return self._run("store_many", self.inner.store_many, payloads)

    async def afind(self, name: str, key: str) -> Payload | None:
        """`find`, awaited within the deadline."""
        return await self._arun("find", as_async(self.inner).afind(name, key))

    async def afind_many(self, name: str, keys: Iterable[str]) -> dict[str, Payload]:
        """`find_many`, awaited within the deadline."""
        return await self._arun("find_many", as_async(self.inner).afind_many(name, keys))

    async def astore_many(self, payloads: Sequence[Payload]) -> int | None:
        """`store_many`, awaited (within the deadline unless the writes are queued below)."""
        inner = as_async(self.inner)
        if self._queued:
            return await inner.astore_many(payloads)
        return await self._arun("store_many", inner.astore_many(payloads))

    async def aclose(self) -> None:
        """Close the inner store's async clients of this loop."""
        if native_async(self.inner):
            await self.inner.aclose()

    def publish_health(self, row: ProcessHealth) -> None:
        """Publish the process's health row within the deadline (a hung store holds the
        publisher's thread no longer than a caller), without the breaker: a slow publish
        never makes the callers' reads skip the store."""
        self._run("publish_health", below(self).publish_health, row, guarded=False)

    def remove_health(self, process: str) -> None:
        """Remove the process's health row, within the deadline (without the breaker)."""
        self._run("remove_health", below(self).remove_health, process, guarded=False)

    def find_all(self, name: str) -> list[Payload]:
        """Every entry of ``name`` (maintenance and browsing: no deadline)."""
        return self.inner.find_all(name)

    def delete(self, name: str, key: str) -> None:
        """Remove the entry."""
        self.inner.delete(name, key)

    def delete_many(self, name: str, keys: Iterable[str]) -> None:
        """Remove the entries."""
        delete_many(self.inner, name, keys)

    def clean_by_expiry(self, now: datetime) -> int:
        """Remove expired entries."""
        return self.inner.clean_by_expiry(now)

    def close(self) -> None:
        """Close the inner store; workers still held by a hung operation are not waited for.
        A trial under way ends here (its late end changes nothing). The inner store closes
        first: a queue below flushes through this layer's workers, which must still run."""
        try:
            self.inner.close()
        finally:
            with self._lock:
                pool, self._pool = self._pool, None
                self._trial = None
            if pool is not None:
                pool.shutdown(wait=False, cancel_futures=True)


_FORKS = AfterFork(operator.methodcaller("forked"))  # a subclass's own reset included
