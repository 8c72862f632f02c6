"""Bulkhead: at most N upstream calls of one failover in flight; the rest are served stale.

Threads and asyncio tasks share one count. A free permit is taken without a lock (the permits
are a list: ``pop`` and ``append`` are atomic), which keeps the success path cheap; only when
calls wait does the lock come in. Permits are then handed over in arrival order to whoever waits
(a thread on a `threading.Event`, a task on a future of its own loop). A waiter enqueues itself
and then looks for a free permit, under the lock, and a release that finds waiters hands its
permit over under the same lock: a permit released while a waiter enqueues is never missed.

A call already holding the permit of its failover (a nested call in the same context) does not
take a second one, which would deadlock a bulkhead of size 1.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import threading
from collections import deque
from collections.abc import Callable
from typing import Any, ClassVar

from ..errors import BulkheadFull
from .base import Guard

__all__ = ["Bulkhead"]

# The bulkheads whose permits the current context holds (for nested calls).
_held: contextvars.ContextVar[tuple[Bulkhead, ...]] = contextvars.ContextVar(
    "failover_bulkheads", default=()
)


_WAIT: Any = object()  # `_take`: no permit free, the call waits for one


class _Waiter:
    """One thread or task waiting for a permit. ``granted`` is the truth, set under the
    bulkhead's lock; the wake-up is only a signal."""

    __slots__ = ("event", "future", "gone", "granted", "loop")

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop | None = None,
        future: asyncio.Future[None] | None = None,
    ) -> None:
        self.granted = False
        self.gone = False  # gave up (timeout, cancellation): skipped by release
        self.loop = loop
        self.future = future
        self.event = threading.Event() if future is None else None

    def wake(self) -> bool:
        """Signal the waiter; ``False`` when it cannot hear it any more (its loop closed)."""
        if self.event is not None:
            self.event.set()
            return True
        assert self.loop is not None
        assert self.future is not None
        future = self.future
        try:
            self.loop.call_soon_threadsafe(
                lambda: future.done() or future.set_result(None)  # type: ignore[func-returns-value]
            )
        except RuntimeError:  # the loop is closed: the permit goes to the next waiter
            return False
        return True


class Bulkhead(Guard):
    """At most ``limit`` calls admitted at once.

    Args:
        name: the failover's name (for messages).
        limit: permits.
        acquire_timeout: seconds a call waits for a permit; ``0`` refuses at once.
        on_reject: called with no argument for each refused call (metrics).
    """

    refusals: ClassVar[tuple[type[Exception], ...]] = (BulkheadFull,)

    def __init__(
        self,
        name: str,
        limit: int,
        acquire_timeout: float = 0.0,
        on_reject: Callable[[], None] | None = None,
    ) -> None:
        self.name = name
        self.limit = limit
        self.acquire_timeout = acquire_timeout
        self.on_reject = on_reject
        self._lock = threading.Lock()
        self._permits: list[None] = [None] * limit  # the free ones
        self._waiters: deque[_Waiter] = deque()

    def __repr__(self) -> str:
        return f"Bulkhead({self.name!r}, limit={self.limit}, free={self.free})"

    @property
    def free(self) -> int:
        """Permits not taken now."""
        return len(self._permits)

    # -- the guard ----------------------------------------------------------------------------

    def _take(self, held: tuple[Bulkhead, ...]) -> Any:
        """What `enter` and `aenter` decide without waiting: no token for a nested call, a
        token for a free permit, `BulkheadFull` when calls may not wait, else ``_WAIT``."""
        if self in held:
            return None  # nested call: the outer one holds the permit
        if not self._waiters:  # no one waits: a free permit is this call's
            try:
                self._permits.pop()
            except IndexError:
                pass
            else:
                return _held.set((*held, self))
        if self.acquire_timeout <= 0:
            raise self._refuse()
        return _WAIT

    def enter(self) -> Any:
        """Take a permit (waiting up to ``acquire_timeout``) or raise `BulkheadFull`."""
        held = _held.get()
        token = self._take(held)
        if token is not _WAIT:
            return token
        waiter = self._enqueue(_Waiter())
        if not waiter.granted:
            assert waiter.event is not None
            try:
                waiter.event.wait(self.acquire_timeout)
            except BaseException:  # interrupted while waiting: a permit granted meanwhile goes on
                if self._settle(waiter):
                    self._release()
                raise
        if self._settle(waiter):
            return _held.set((*held, self))
        raise self._refuse()

    async def aenter(self) -> Any:
        """`enter` for a task: waits on the event loop, not on a thread."""
        held = _held.get()
        token = self._take(held)
        if token is not _WAIT:
            return token
        loop = asyncio.get_running_loop()
        waiter = self._enqueue(_Waiter(loop, loop.create_future()))
        if not waiter.granted:
            assert waiter.future is not None
            try:
                # Not wait_for: on Python 3.11 it swallows a cancellation that meets a result.
                async with asyncio.timeout(self.acquire_timeout):
                    await waiter.future
            except TimeoutError:
                pass  # settled below: a permit may have been granted at the deadline
            except BaseException:  # cancelled while waiting: a permit granted meanwhile goes on
                if self._settle(waiter):
                    self._release()
                raise
        if self._settle(waiter):
            return _held.set((*held, self))
        raise self._refuse()

    def exit(self, token: Any, exc: BaseException | None) -> None:
        """Give the permit back (to the first waiter, if any)."""
        if token is None:
            return
        # Exited in another context than entered: the permit still goes back.
        try:  # noqa: SIM105  (contextlib.suppress costs more than the rest of the exit)
            _held.reset(token)
        except ValueError:
            pass
        self._release()

    # -- permits ------------------------------------------------------------------------------

    def _release(self) -> None:
        self._permits.append(None)
        if self._waiters:
            with self._lock:
                self._hand_over()

    def _enqueue(self, waiter: _Waiter) -> _Waiter:
        with self._lock:
            self._waiters.append(waiter)
            self._hand_over()  # a permit freed meanwhile (even by a lock-free release)
        return waiter

    def _hand_over(self) -> None:
        """Under the lock: give the free permits to the waiters, first come first served."""
        waiters, permits = self._waiters, self._permits
        while waiters and permits:
            waiter = waiters[0]
            if waiter.gone:
                waiters.popleft()
                continue
            try:
                permits.pop()
            except IndexError:  # taken meanwhile by a lock-free call
                return
            waiters.popleft()
            waiter.granted = True
            if not waiter.wake():
                waiter.granted, waiter.gone = False, True
                permits.append(None)

    def _settle(self, waiter: _Waiter) -> bool:
        """After a wait: whether ``waiter`` got a permit; if not, it leaves the queue."""
        with self._lock:
            if waiter.granted:
                return True
            waiter.gone = True
            with contextlib.suppress(ValueError):
                self._waiters.remove(waiter)
            return False

    def _refuse(self) -> BulkheadFull:
        if self.on_reject is not None:
            with contextlib.suppress(Exception):  # metrics never break a call
                self.on_reject()
        return BulkheadFull(
            f"failover {self.name!r}: all {self.limit} permits in use "
            f"(max_concurrency={self.limit}, acquire_timeout={self.acquire_timeout:g}s)"
        )
