"""Where a bulkhead's permits come from: the `PermitSource` protocol and `LocalPermits`, the
in-process source every pool uses unless told otherwise.

A source is declared once (``source=`` of `failover.Failover.bulkhead_pool`) and bound to each
pool it serves (`PermitSource.bind`: name, permits, fairness), the way a Java
``@Throttling(factory=…)`` makes one semaphore per name. Deadlines are `time.monotonic`
values: ``None`` waits without limit, a deadline already past (``0.0``) does not wait.

`LocalPermits` takes a free permit without a lock (the permits are a list: ``pop`` and
``append`` are atomic), which keeps the success path cheap; only a weight above one or a wait
brings the lock in. Permits are then handed over in arrival order to whoever waits (a thread on
a `threading.Event`, a task on a future of its own loop). A waiter enqueues itself and then
looks for free permits, under the lock, and a release that finds waiters hands its permits over
under the same lock: a permit released while a waiter enqueues is never missed. A waiter that
leaves (its deadline, a cancellation, an interruption) gives back what was handed to it
meanwhile. A forked child starts with every permit free.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections import deque
from time import monotonic
from typing import Any, Protocol, runtime_checkable

from ..forks import AfterFork

__all__ = ["Kinded", "LocalPermits", "PermitSource", "SupportsTake", "remaining"]


@runtime_checkable
class PermitSource(Protocol):
    """A semaphore with weights: what a bulkhead pool takes its permits from.

    Implementations: `LocalPermits` (one process, the default) and
    `failover.execution.redis_permits.RedisPermits` (a cluster-wide pool in Redis).

    A source may also have ``take(weight) -> lease | None`` (`SupportsTake`): the permits free
    now, never waiting nor doing I/O; the bulkhead tries it first (`LocalPermits.take`). It may
    name its kind (`Kinded`: ``kind = "redis"``) for reprs and health, and have ``close()``
    (`failover.closeable.Closeable`), called when the engine closes its pools.
    """

    def bind(self, pool: str, permits: int, fair: bool) -> PermitSource:
        """The source of one pool: ``permits`` in all, waiters served in arrival order when
        ``fair``. Called once per pool when the pool is declared."""
        ...

    def acquire(self, weight: int, deadline: float | None) -> object | None:
        """Take ``weight`` permits, blocking the calling thread until ``deadline`` at most.

        Returns:
            A lease to give `release` (never ``None``), or ``None`` when the deadline came
            first. Raises when the source cannot answer (the bulkhead refuses the call).
        """
        ...

    async def aacquire(self, weight: int, deadline: float | None) -> object | None:
        """`acquire` for a task: waits without blocking the event loop. Cancelled while
        waiting, it takes nothing."""
        ...

    def release(self, lease: object) -> None:
        """Give back the permits of ``lease``."""
        ...

    def in_use(self) -> int:
        """Permits taken now (by every holder of the pool)."""
        ...

    def waiting(self) -> int:
        """Calls waiting for permits now (in this process)."""
        ...


@runtime_checkable
class SupportsTake(Protocol):
    """A `PermitSource` that can take free permits without waiting (checked once per bulkhead)."""

    def take(self, weight: int) -> object | None:
        """Take ``weight`` permits free now, never waiting nor doing I/O: the lease, or ``None``
        (the bulkhead then calls ``acquire``/``aacquire``)."""
        ...


@runtime_checkable
class Kinded(Protocol):
    """A `PermitSource` that names its kind (``"local"``, ``"redis"``) for reprs and health;
    a source without one is named after its class."""

    kind: str


def remaining(deadline: float | None) -> float | None:
    """Seconds left until ``deadline`` (never negative), ``None`` for no deadline."""
    return None if deadline is None else max(0.0, deadline - monotonic())


class _Waiter:
    """One thread or task waiting for permits. ``granted`` is the truth, set under the
    source's lock; the wake-up is only a signal."""

    __slots__ = ("event", "future", "gone", "granted", "loop", "weight")

    def __init__(
        self,
        weight: int,
        loop: asyncio.AbstractEventLoop | None = None,
        future: asyncio.Future[None] | None = None,
    ) -> None:
        self.weight = weight
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
        except RuntimeError:  # the loop is closed: the permits go to the next waiter
            return False
        return True


class LocalPermits:
    """Permits in this process, shared by its threads and asyncio tasks (of any event loop).

    Args:
        permits: permits in all.
        fair: waiters are served in arrival order, and a newcomer never overtakes them (a
            heavy waiter at the head holds the lighter ones behind it); ``False`` lets any
            call that fits take free permits at once.
    """

    kind = "local"

    def __init__(self, permits: int = 1, fair: bool = True) -> None:
        self.permits = permits
        self.fair = fair
        self._lock = threading.Lock()
        self._free: list[None] = [None] * permits
        self._waiters: deque[_Waiter] = deque()
        _FORKS.add(self)

    def __repr__(self) -> str:
        return f"LocalPermits({self.permits}, free={len(self._free)})"

    def forked(self) -> None:
        """In a forked child (a preforking server's worker): every permit free, nobody waiting.
        The parent's calls that held permits or waited at the fork run on threads and loops
        the child does not have: never given back there, their permits would stay taken."""
        self._lock = threading.Lock()
        # In place: a bulkhead keeps the lists for its lock-free path (`lock_free`).
        self._free[:] = [None] * self.permits
        self._waiters.clear()

    def lock_free(self) -> tuple[list[None], deque[_Waiter]]:
        """The free permits and the queue, for a bulkhead's weight-1 path to take and give
        back a permit inline (`take`'s and `release`'s first steps, without their frames). The
        objects stay the same for the source's life, a fork included."""
        return self._free, self._waiters

    def hand_over(self) -> None:
        """Give the free permits to the waiters (after a lock-free release saw some)."""
        with self._lock:
            self._hand_over()

    def bind(self, pool: str, permits: int, fair: bool) -> LocalPermits:
        """A new in-process source of ``permits``."""
        return LocalPermits(permits, fair)

    def in_use(self) -> int:
        """Permits taken now."""
        return self.permits - len(self._free)

    def waiting(self) -> int:
        """Threads and tasks waiting now."""
        return sum(1 for w in list(self._waiters) if not w.gone)

    # -- acquire: one decision, two ways to wait ----------------------------------------------

    def take(self, weight: int) -> object | None:
        """Take ``weight`` free permits now, never waiting: the lease, or ``None`` when too few
        are free or (``fair``) waiters come first. The bulkhead tries this before
        ``acquire``/``aacquire``: a task that gets its permits at once makes no coroutine."""
        if self._waiters and self.fair:
            return None
        free = self._free
        if weight == 1:
            try:
                free.pop()
            except IndexError:
                return None
            return 1
        with self._lock:
            taken = 0
            try:
                while taken < weight:
                    free.pop()
                    taken += 1
            except IndexError:  # too few, or a lock-free call took one meanwhile: put back
                free.extend([None] * taken)
                self._hand_over()
                return None
            return weight

    def acquire(self, weight: int, deadline: float | None) -> object | None:
        """Take ``weight`` permits, waiting on this thread until ``deadline`` at most."""
        lease = self.take(weight)
        if lease is not None or (deadline is not None and deadline <= 0.0):
            return lease  # taken, or refused at once without reading the clock
        waiter = self._enqueue(_Waiter(weight))
        if not waiter.granted:
            assert waiter.event is not None
            try:
                waiter.event.wait(remaining(deadline))
            except BaseException:  # interrupted while waiting: permits granted meanwhile go on
                if self._settle(waiter):
                    self.release(weight)
                raise
        return weight if self._settle(waiter) else None

    async def aacquire(self, weight: int, deadline: float | None) -> object | None:
        """`acquire` for a task: waits on the event loop, not on a thread."""
        lease = self.take(weight)
        if lease is not None or (deadline is not None and deadline <= 0.0):
            return lease
        loop = asyncio.get_running_loop()
        waiter = self._enqueue(_Waiter(weight, loop, loop.create_future()))
        if not waiter.granted:
            assert waiter.future is not None
            try:
                # Not wait_for: on Python 3.11 it swallows a cancellation that meets a result.
                async with asyncio.timeout(remaining(deadline)):
                    await waiter.future
            except TimeoutError:
                pass  # settled below: permits may have been granted at the deadline
            except BaseException:  # cancelled while waiting: permits granted meanwhile go on
                if self._settle(waiter):
                    self.release(weight)
                raise
        return weight if self._settle(waiter) else None

    # -- release and hand-over ----------------------------------------------------------------

    def release(self, lease: Any) -> None:
        """Give ``lease`` (a weight) back, to the first waiters if any."""
        if lease == 1:
            self._free.append(None)
        else:
            self._free.extend([None] * lease)
        if self._waiters:
            with self._lock:
                self._hand_over()

    def _enqueue(self, waiter: _Waiter) -> _Waiter:
        with self._lock:
            self._waiters.append(waiter)
            self._hand_over()  # permits freed meanwhile (even by a lock-free release)
        return waiter

    def _hand_over(self) -> None:
        """Under the lock: give the free permits to the waiters, first come first served (a
        fair source stops at the first waiter that does not fit)."""
        waiters, free = self._waiters, self._free
        for waiter in list(waiters):
            if waiter.gone:
                waiters.remove(waiter)
                continue
            if len(free) < waiter.weight:
                if self.fair:
                    return
                continue
            taken = 0
            try:
                while taken < waiter.weight:
                    free.pop()
                    taken += 1
            except IndexError:  # taken meanwhile by a lock-free call
                free.extend([None] * taken)
                return
            waiters.remove(waiter)
            waiter.granted = True
            if not waiter.wake():
                waiter.granted, waiter.gone = False, True
                free.extend([None] * waiter.weight)

    def _settle(self, waiter: _Waiter) -> bool:
        """After a wait: whether ``waiter`` got its permits; if not, it leaves the queue (and a
        fair queue's next waiters may fit now)."""
        with self._lock:
            if waiter.granted:
                return True
            waiter.gone = True
            with contextlib.suppress(ValueError):
                self._waiters.remove(waiter)
            self._hand_over()
            return False


_FORKS = AfterFork(LocalPermits.forked)
