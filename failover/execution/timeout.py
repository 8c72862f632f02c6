"""Soft timeout: an upstream slower than ``timeout=`` fails for its caller, not for the store.

The caller stops waiting and goes to recovery with a `SoftTimeoutError` (a `TimeoutError`);
the upstream call goes on in the background and its result, when it comes, is stored. Sync
upstreams run on the engine's bounded worker pool, async ones as tasks the engine keeps.
Calls of one key share the call in flight (single flight), so slow refreshes of a key never
pile up: at most one runs per key. The key is what the engine says (``(tenant, key)`` on an
engine routed by tenant: a tenant never joins another's call). Every way out of a flight (an
answer, an error, the engine closing before it ran) lands it in `SoftTimeout._land`; a forked
child starts with no flight and no background call (`SoftTimeout.forked`, `Refreshes.forked`).

A call that lands at its caller's deadline is decided once, under a lock: either the caller
gets it (it "landed" first) or the caller gave up first (it is "abandoned") and the result is
stored in the background, never both and never neither.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from ..errors import SoftTimeoutError
from ..forks import AfterFork
from .base import Kind

__all__ = ["TIMEOUT", "Refreshes", "SoftTimeout"]

log = logging.getLogger("failover.execution")

Late = Callable[[Any, Any], None]  # (ctx, result): store a result its caller gave up on
ALate = Callable[[Any, Any], Awaitable[None]]  # the same, awaited (async upstreams)


class Refreshes:
    """The engine's background calls: a bounded thread pool and the tasks it keeps.

    Args:
        max_workers: threads for sync upstreams running past their caller's timeout.
    """

    def __init__(self, max_workers: int = 16) -> None:
        self.max_workers = max_workers
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        self._futures: set[concurrent.futures.Future[Any]] = set()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._closed = False
        _REFRESHES.add(self)

    def forked(self) -> None:
        """In a forked child (a preforking server's worker): the parent's threads did not come
        along, and its pool would take calls that no thread ever runs; its calls and tasks are
        the parent's. The child's next call starts a pool of its own."""
        self._lock = threading.Lock()
        self._pool, self._futures, self._tasks = None, set(), set()

    def submit(
        self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any
    ) -> concurrent.futures.Future[Any]:
        """Run ``fn`` on the pool, in a copy of the caller's context (its tenant included).

        Raises:
            RuntimeError: the engine is closed.
        """
        context = contextvars.copy_context()
        with self._lock:
            if self._closed:
                raise RuntimeError("failover: the engine is closed")
            if self._pool is None:
                self._pool = concurrent.futures.ThreadPoolExecutor(
                    self.max_workers, thread_name_prefix="failover-timeout"
                )
            future = self._pool.submit(context.run, fn, *args, **kwargs)
            self._futures.add(future)
        future.add_done_callback(self._futures.discard)
        return future

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        """Run ``coro`` as a task of the running loop, holding a reference to it until it ends
        (asyncio keeps only weak ones).

        Raises:
            RuntimeError: the engine is closed (``coro`` is closed unstarted).
        """
        if self._closed:
            coro.close()
            raise RuntimeError("failover: the engine is closed")
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._ended)
        return task

    def _ended(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        # A failure reached whoever still waited; one that came after its callers gave up goes
        # unreported, as on the pool (asyncio would log it as "never retrieved").
        if not task.cancelled():
            task.exception()

    @property
    def running(self) -> int:
        """Background calls not finished (queued, running, or storing their result)."""
        return len(self._futures) + sum(1 for t in list(self._tasks) if not t.done())

    def close(self, deadline: float = 5.0) -> bool:
        """Stop: cancel the tasks and the queued calls, wait up to ``deadline`` seconds for the
        calls already running on threads (their results are still stored). Returns whether
        they all ended in time."""
        with self._lock:
            self._closed = True
            pool, self._pool = self._pool, None
        for task in list(self._tasks):
            loop = task.get_loop()
            if not loop.is_closed():
                loop.call_soon_threadsafe(task.cancel)
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)
        return self.wait(deadline)

    def wait(self, timeout: float | None = None) -> bool:
        """Wait up to ``timeout`` seconds (``None``: as long as it takes) for the sync calls
        on the pool to end, their late results stored. Returns whether they all ended."""
        end = None if timeout is None else time.monotonic() + timeout
        for future in list(self._futures):
            try:
                future.exception(None if end is None else max(0.0, end - time.monotonic()))
            except concurrent.futures.CancelledError:
                pass  # queued, never started
            except TimeoutError:
                return False
        return True


class SoftTimeout:
    """Runs one failover's upstream with a soft timeout.

    Args:
        name: the failover's name (for messages).
        seconds: how long a caller waits.
        refreshes: the engine's pool and task keeper.
        late: stores a result whose callers gave up: ``late(ctx, result)`` (sync upstreams,
            on the pool thread, in the caller's context).
        alate: the same for ``async def`` upstreams, awaited in a task of the caller's loop.
        key: ``ctx -> hashable``: calls of one key share the call in flight.
    """

    def __init__(
        self,
        name: str,
        seconds: float,
        refreshes: Refreshes,
        late: Late,
        alate: ALate,
        key: Callable[[Any], Any],
    ) -> None:
        self.name = name
        self.seconds = seconds
        self.refreshes = refreshes
        self.late = late
        self.alate = alate
        self.key = key
        self._lock = threading.Lock()
        self._flights: dict[Any, _Flight] = {}
        _TIMEOUTS.add(self)

    def forked(self) -> None:
        """In a forked child: the calls in flight at the fork are the parent's, and no thread of
        the child will land them (a later call of their key would time out for ever)."""
        self._lock = threading.Lock()
        self._flights = {}

    def __repr__(self) -> str:
        return f"SoftTimeout({self.name!r}, {self.seconds:g}s)"

    @property
    def in_flight(self) -> int:
        """Upstream calls running now."""
        return len(self._flights)

    def _error(self) -> SoftTimeoutError:
        return SoftTimeoutError(
            f"failover {self.name!r}: the upstream did not answer within {self.seconds:g}s "
            "(timeout=); it goes on in the background and its result will be stored"
        )

    def _flight_key(self, ctx: Any) -> Any:
        try:
            return self.key(ctx)
        except Exception:  # no key, no sharing: this call flies alone
            return object()

    def _join(self, key: Any, loop: asyncio.AbstractEventLoop | None) -> tuple[_Flight, bool]:
        """The flight of ``key`` to wait for, and whether this call must start it."""
        with self._lock:
            flight = self._flights.get(key)
            if flight is not None and flight.loop is loop:
                return flight, False
            flight = self._flights[key] = _Flight(loop)
            return flight, True

    def _land(self, key: Any, flight: _Flight) -> bool:
        """The upstream call ended: forget the flight; whether its callers gave up on it."""
        with self._lock:
            if self._flights.get(key) is flight:
                del self._flights[key]
            flight.landed = True
            return flight.abandoned

    def _give_up(self, flight: _Flight) -> bool:
        """A caller's deadline passed: whether it gives up (the call has not landed)."""
        with self._lock:
            if not flight.landed:
                flight.abandoned = True
            return flight.abandoned

    # -- sync ---------------------------------------------------------------------------------

    def call(self, ctx: Any, fn: Callable[..., Any], args: Any, kwargs: Any) -> Any:
        """Call ``fn`` on the pool and wait up to the timeout (joining a call of the same key
        already in flight)."""
        key = self._flight_key(ctx)
        flight, start = self._join(key, None)
        future = flight.future
        if start:
            try:
                submitted = self.refreshes.submit(self._run, key, flight, ctx, fn, args, kwargs)
            except RuntimeError:
                # The engine is closed (shutting down): no pool, so the call runs here, without
                # its timeout, rather than fail; the calls that joined it share its outcome.
                self._run(key, flight, ctx, fn, args, kwargs)
                return future.result()
            except BaseException as exc:
                self._land(key, flight)
                future.set_exception(exc)
                raise
            submitted.add_done_callback(lambda f: self._dropped(key, flight, f))
        try:
            return future.result(self.seconds)
        except concurrent.futures.TimeoutError:
            # Also the upstream's own TimeoutError: only a call that has not landed is late.
            if not future.done() and self._give_up(flight):
                raise self._error() from None
            return future.result()

    def _run(
        self, key: Any, flight: _Flight, ctx: Any, fn: Callable[..., Any], args: Any, kwargs: Any
    ) -> None:
        """On the pool, in the caller's context: the upstream call, then its landing."""
        future = flight.future
        try:
            result = fn(*args, **kwargs)
        except BaseException as exc:
            self._land(key, flight)
            future.set_exception(exc)
            return
        abandoned = self._land(key, flight)
        future.set_result(result)
        if abandoned:
            try:
                self.late(ctx, result)
            except Exception:
                log.warning("failover %r: storing a late result failed", self.name, exc_info=True)

    def _dropped(
        self, key: Any, flight: _Flight, submitted: concurrent.futures.Future[Any]
    ) -> None:
        """The pool dropped the call unstarted (the engine closed): its callers stop waiting."""
        if not submitted.cancelled():
            return
        self._land(key, flight)
        if not flight.future.done():
            flight.future.set_exception(RuntimeError("failover: the engine is closed"))

    # -- async --------------------------------------------------------------------------------

    async def acall(self, ctx: Any, fn: Callable[..., Any], args: Any, kwargs: Any) -> Any:
        """Start ``fn``'s coroutine as a task and await it up to the timeout (joining a task of
        the same key in flight on this loop)."""
        key = self._flight_key(ctx)
        loop = asyncio.get_running_loop()
        flight, start = self._join(key, loop)
        if start:
            try:
                spawned = flight.task = self.refreshes.spawn(_arun(fn, args, kwargs))
            except RuntimeError:  # the engine is closed: the call runs here, without its timeout
                self._land(key, flight)
                return await fn(*args, **kwargs)
            except BaseException:
                self._land(key, flight)
                raise
            # Landed when the task ends, however it ends: cancelled before it ever ran (the
            # engine closed) included, which no code inside the task would see.
            spawned.add_done_callback(lambda t: self._ended(key, flight, ctx, t))
        task = flight.task
        assert task is not None  # set by the call that started the flight, with no await between
        try:
            # Not wait_for: on Python 3.11 it swallows a cancellation that meets a result.
            async with asyncio.timeout(self.seconds):
                return await asyncio.shield(task)
        except TimeoutError:
            # Also the upstream's own TimeoutError: only a call that has not landed is late.
            if not task.done() and self._give_up(flight):
                raise self._error() from None
            return task.result()
        except asyncio.CancelledError:
            if not task.done():  # this caller was cancelled, not the upstream: it goes on
                self._give_up(flight)
            else:
                current = asyncio.current_task()
                if task.cancelled() and current is not None and not current.cancelling():
                    # The engine closed and cancelled the upstream: not this caller's doing.
                    raise self._error() from None
            raise

    def _ended(self, key: Any, flight: _Flight, ctx: Any, task: asyncio.Task[Any]) -> None:
        """The upstream's task ended: its landing, and its result stored if its callers gave up
        on it. Callers still waiting see the task done first (no give-up after that), so the
        decision stays one."""
        abandoned = self._land(key, flight)
        if not abandoned or task.cancelled() or task.exception() is not None:
            return
        try:
            self.refreshes.spawn(self._store_late(ctx, task.result()))
        except RuntimeError:
            log.warning("failover %r: a late result came after close", self.name)

    async def _store_late(self, ctx: Any, result: Any) -> None:
        try:
            await self.alate(ctx, result)
        except Exception:
            log.warning("failover %r: storing a late result failed", self.name, exc_info=True)


class _Flight:
    """One upstream call in flight, shared by the callers of its key."""

    __slots__ = ("abandoned", "future", "landed", "loop", "task")

    def __init__(self, loop: asyncio.AbstractEventLoop | None) -> None:
        self.loop = loop  # None: a sync call on the pool
        self.future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self.task: asyncio.Task[Any] | None = None
        self.landed = False  # the upstream call ended
        self.abandoned = False  # a caller gave up first: the result is stored when it lands


async def _arun(fn: Callable[..., Any], args: Any, kwargs: Any) -> Any:
    """The task of an ``async def`` upstream (whatever awaitable ``fn`` returns)."""
    return await fn(*args, **kwargs)


# Emptied in a forked child (`Refreshes.forked`, `SoftTimeout.forked`).
_REFRESHES = AfterFork(Refreshes.forked)
_TIMEOUTS = AfterFork(SoftTimeout.forked)


TIMEOUT = Kind(
    "timeout",
    wanted=lambda d: d.timeout is not None,
    shown=lambda d: f"timeout({d.timeout:g}s)",
    make=lambda d, wiring: wiring.timeout(d),
)
"""The soft timeout in the guards' order: ``timeout=``; innermost, it runs the upstream."""
