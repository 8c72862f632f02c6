"""Bulkhead: at most N upstream calls of one failover in flight; the rest are served stale.

Threads and asyncio tasks share one count. Permits are handed over in arrival order to whoever
waits (a thread on an `threading.Event`, a task on a future of its own loop), so a waiter never
races a newcomer. A call already holding the permit of its failover (a nested call in the same
context) does not take a second one, which would deadlock a bulkhead of size 1.
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

    def wake(self) -> None:
        if self.event is not None:
            self.event.set()
        elif self.loop is not None and self.future is not None:
            future = self.future
            self.loop.call_soon_threadsafe(
                lambda: future.done() or future.set_result(None)  # type: ignore[func-returns-value]
            )


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
        self._free = limit
        self._waiters: deque[_Waiter] = deque()

    def __repr__(self) -> str:
        return f"Bulkhead({self.name!r}, limit={self.limit}, free={self._free})"

    @property
    def free(self) -> int:
        """Permits not taken now."""
        return self._free

    # -- the guard ----------------------------------------------------------------------------

    def enter(self) -> Any:
        """Take a permit (waiting up to ``acquire_timeout``) or raise `BulkheadFull`."""
        held = _held.get()
        if self in held:
            return None  # nested call: the outer one holds the permit
        with self._lock:
            if self._free > 0 and not self._waiters:
                self._free -= 1
                return _held.set((*held, self))
            if self.acquire_timeout <= 0:
                waiter = None
            else:
                waiter = _Waiter()
                self._waiters.append(waiter)
        if waiter is not None:
            assert waiter.event is not None
            waiter.event.wait(self.acquire_timeout)
            if self._settle(waiter):
                return _held.set((*held, self))
        raise self._refuse()

    async def aenter(self) -> Any:
        """`enter` for a task: waits on the event loop, not on a thread."""
        held = _held.get()
        if self in held:
            return None
        with self._lock:
            if self._free > 0 and not self._waiters:
                self._free -= 1
                return _held.set((*held, self))
            if self.acquire_timeout <= 0:
                raise self._refuse()
            loop = asyncio.get_running_loop()
            waiter = _Waiter(loop, loop.create_future())
            self._waiters.append(waiter)
        assert waiter.future is not None
        try:
            await asyncio.wait_for(waiter.future, self.acquire_timeout)
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
        with contextlib.suppress(ValueError):
            _held.reset(token)
        self._release()

    # -- permits ------------------------------------------------------------------------------

    def _settle(self, waiter: _Waiter) -> bool:
        """After a wait: whether ``waiter`` got a permit; if not, it leaves the queue."""
        with self._lock:
            if waiter.granted:
                return True
            waiter.gone = True
            with contextlib.suppress(ValueError):
                self._waiters.remove(waiter)
            return False

    def _release(self) -> None:
        with self._lock:
            while self._waiters:
                waiter = self._waiters.popleft()
                if not waiter.gone:
                    waiter.granted = True
                    waiter.wake()
                    return
            self._free += 1

    def _refuse(self) -> BulkheadFull:
        if self.on_reject is not None:
            with contextlib.suppress(Exception):  # metrics never break a call
                self.on_reject()
        return BulkheadFull(
            f"failover {self.name!r}: all {self.limit} permits in use "
            f"(max_concurrency={self.limit}, acquire_timeout={self.acquire_timeout:g}s)"
        )
