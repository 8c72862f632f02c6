"""Soft timeout: an upstream slower than ``timeout=`` fails for its caller, not for the store.

The caller stops waiting and goes to recovery with a `SoftTimeoutError` (a `TimeoutError`);
the upstream call goes on in the background and its result, when it comes, is stored. Sync
upstreams run on the engine's bounded worker pool, async ones as tasks the engine keeps.
Calls of one key share the call in flight (single flight), so slow refreshes of a key never
pile up: at most one runs per key.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from ..errors import SoftTimeoutError

__all__ = ["Refreshes", "SoftTimeout"]

log = logging.getLogger("failover.execution")

Late = Callable[[Any, Any], None]  # (ctx, result): store a result its caller gave up on


class Refreshes:
    """The engine's background calls: a bounded thread pool and the tasks it keeps.

    Args:
        max_workers: threads for sync upstreams running past their caller's timeout.
    """

    def __init__(self, max_workers: int = 16) -> None:
        self.max_workers = max_workers
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._closed = False

    def submit(
        self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any
    ) -> concurrent.futures.Future[Any]:
        """Run ``fn`` on the pool, in a copy of the caller's context."""
        with self._lock:
            if self._closed:
                raise RuntimeError("failover: the engine is closed")
            if self._pool is None:
                self._pool = concurrent.futures.ThreadPoolExecutor(
                    self.max_workers, thread_name_prefix="failover-timeout"
                )
            pool = self._pool
        return pool.submit(contextvars.copy_context().run, fn, *args, **kwargs)

    def keep(self, task: asyncio.Task[Any]) -> None:
        """Hold a reference to ``task`` until it ends (asyncio keeps only weak ones)."""
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    @property
    def running(self) -> int:
        """Background calls not finished."""
        pool = self._pool
        queued = 0 if pool is None else pool._work_queue.qsize()
        return queued + sum(1 for t in list(self._tasks) if not t.done())

    def close(self, deadline: float = 5.0) -> bool:
        """Stop: cancel the tasks and the queued calls, wait up to ``deadline`` seconds for the
        calls already running on threads. Returns whether they all ended in time."""
        with self._lock:
            self._closed = True
            pool, self._pool = self._pool, None
        for task in list(self._tasks):
            loop = task.get_loop()
            if not loop.is_closed():
                loop.call_soon_threadsafe(task.cancel)
        if pool is None:
            return True
        pool.shutdown(wait=False, cancel_futures=True)
        threads = list(getattr(pool, "_threads", ()))
        end = time.monotonic() + deadline
        for thread in threads:
            thread.join(max(0.0, end - time.monotonic()))
        return not any(t.is_alive() for t in threads)


class SoftTimeout:
    """Runs one failover's upstream with a soft timeout.

    Args:
        name: the failover's name (for messages).
        seconds: how long a caller waits.
        refreshes: the engine's pool and task keeper.
        late: stores a result whose caller gave up: ``late(ctx, result)``.
        key: ``ctx -> hashable``: calls of one key share the call in flight.
    """

    def __init__(
        self,
        name: str,
        seconds: float,
        refreshes: Refreshes,
        late: Late,
        key: Callable[[Any], Any],
    ) -> None:
        self.name = name
        self.seconds = seconds
        self.refreshes = refreshes
        self.late = late
        self.key = key
        self._lock = threading.Lock()
        self._flights: dict[Any, _Flight] = {}

    def __repr__(self) -> str:
        return f"SoftTimeout({self.name!r}, {self.seconds:g}s)"

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

    def call(self, ctx: Any, fn: Callable[..., Any], args: Any, kwargs: Any) -> Any:
        """Call ``fn`` on the pool and wait up to the timeout (joining a call of the same key
        already in flight)."""
        key = self._flight_key(ctx)
        with self._lock:
            flight = self._flights.get(key)
            if flight is None or flight.loop is not None:
                future = self.refreshes.submit(fn, *args, **kwargs)
                flight = self._flights[key] = _Flight(future, None)
                future.add_done_callback(lambda f: self._landed(key, flight, ctx))
        try:
            return flight.future.result(self.seconds)
        except concurrent.futures.TimeoutError:
            flight.abandoned = True
            raise self._error() from None

    async def acall(self, ctx: Any, fn: Callable[..., Any], args: Any, kwargs: Any) -> Any:
        """Start ``fn``'s coroutine as a task and await it up to the timeout (joining a task of
        the same key in flight on this loop)."""
        key = self._flight_key(ctx)
        loop = asyncio.get_running_loop()
        with self._lock:
            flight = self._flights.get(key)
            if flight is None or flight.loop is not loop:
                task = loop.create_task(fn(*args, **kwargs))
                self.refreshes.keep(task)
                flight = self._flights[key] = _Flight(task, loop)
                task.add_done_callback(lambda t: self._landed(key, flight, ctx))
        task = flight.future
        try:
            return await asyncio.wait_for(asyncio.shield(task), self.seconds)
        except TimeoutError:
            flight.abandoned = True
            raise self._error() from None
        except asyncio.CancelledError:
            if not task.done():  # this caller was cancelled, not the upstream: it goes on
                flight.abandoned = True
            raise

    def _landed(self, key: Any, flight: _Flight, ctx: Any) -> None:
        """The upstream call ended: forget the flight; store a result nobody waited for."""
        with self._lock:
            if self._flights.get(key) is flight:
                del self._flights[key]
        future = flight.future
        if not flight.abandoned or future.cancelled() or future.exception() is not None:
            return
        try:
            self.late(ctx, future.result())
        except Exception:
            log.warning("failover %r: storing a late result failed", self.name, exc_info=True)

    @property
    def in_flight(self) -> int:
        """Upstream calls running now."""
        return len(self._flights)


class _Flight:
    __slots__ = ("abandoned", "future", "loop")

    def __init__(self, future: Any, loop: asyncio.AbstractEventLoop | None) -> None:
        self.future = future
        self.loop = loop
        self.abandoned = False  # a caller gave up waiting: the result is stored when it lands
