"""`HedgingDeadline`: a store deadline whose reads may stop waiting before the deadline.

A tiered store's far read is *hedged*: when the near copy has an answer, the caller waits for
the far store a small budget only, then answers from near. The far read is not abandoned: it
goes on under the deadline, its answer (if it comes in time) kept for later, and past the
deadline it is a timeout as if waited for, opening the store breaker, seen by the next
operation (`HedgingDeadline._overdue`: nothing runs in the background to watch it).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, NamedTuple, TypeVar

from .deadline import DeadlineStore

__all__ = ["HedgingDeadline"]

T = TypeVar("T")

log = logging.getLogger(__name__)


class HedgingDeadline(DeadlineStore):
    """A `DeadlineStore` with `hedged` reads (a tiered store's far store's deadline layer)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Operations a hedge stopped waiting for: their deadline, operation, flag and trial.
        self._late: dict[Future[Any], _Late] = {}

    @property
    def up(self) -> bool:
        """The breaker's view, operations left running past their deadline counted first."""
        self.settle()
        return super().up

    def settle(self) -> None:
        """Count the operations a hedge left running past their deadline (timeouts)."""
        if self._late:
            self._overdue()

    def _admit(self, operation: str) -> object | None:
        if self._late:
            self._overdue()
        return super()._admit(operation)

    def hedged(
        self,
        operation: str,
        fn: Callable[..., T],
        *args: Any,
        budget: float,
        late: Callable[[T], Any],
    ) -> tuple[bool, T | None]:
        """``(True, fn(*args))`` if it answers within ``budget`` seconds, else ``(False, None)``
        at once: the operation goes on, its answer, if it comes within the deadline, is given
        to ``late``; past the deadline it counts as a timeout and opens the breaker (seen by
        the next operation). While such an operation is still out, ``(False, None)`` at once,
        without starting another. A tiered store's hedged read: the near copy answers meanwhile.

        Raises:
            StoreError: the breaker is open, or every worker is held.
            Exception: the operation's own failure within ``budget``.
        """
        if budget >= self.timeout:
            return True, self._run(operation, fn, *args)
        if self._late:
            self._overdue()
            if self._late:  # an earlier read is still out: no second one piled on a slow store
                return False, None
        trial = self._admit(operation)
        outcome: str | None = None
        try:
            future, flag = self._start(operation, fn, *args)
            try:
                result = future.result(budget)
            except FutureTimeout:
                deadline = time.monotonic() + self.timeout - budget
                self._watch(operation, future, _Late(deadline, operation, flag, trial), late)
                trial = None  # the watch ends it now
                return False, None
            except Exception as exc:
                outcome = self._failure(operation, exc)
                raise
            outcome = "answered"
            return True, result
        finally:
            self._ended(trial, outcome)

    def _watch(
        self, operation: str, future: Future[T], entry: _Late, late: Callable[[T], Any]
    ) -> None:
        """Watch an operation a hedge stopped waiting for: its end (or `_overdue`, whichever
        comes first, once) ends it for the breaker."""
        with self._lock:
            self._late[future] = entry

        def landed(done: Future[T]) -> None:
            with self._lock:
                if self._late.pop(done, None) is not entry:
                    return  # past its deadline (a timeout already), or forgotten by a close
            outcome: str | None = None
            try:
                if done.cancelled():
                    return  # never ran (the pool was shut down): no verdict
                exc = done.exception()
                if exc is not None:
                    outcome = self._failure(operation, exc)
                    return
                outcome = "answered"
            finally:
                self._ended(entry.trial, outcome)
            try:
                late(done.result())
            except Exception:  # the answer is only kept for later: nobody waits on it
                log.debug("failover: keeping a late store answer failed", exc_info=True)

        future.add_done_callback(landed)

    def _overdue(self) -> None:
        """Operations a hedge left running past their deadline: timeouts, as if waited for."""
        now = time.monotonic()
        with self._lock:
            over = [(f, entry) for f, entry in self._late.items() if entry.deadline <= now]
            for f, _ in over:
                del self._late[f]
        for _, entry in over:
            entry.flag.set()
            self._timed_out(entry.operation)
            self._ended(entry.trial, "out")

    def forked(self) -> None:
        """`DeadlineStore.forked`; the operations the parent's hedges left running are its
        own (in the child they never end: they would count as timeouts and hold reads off)."""
        super().forked()
        self._late = {}

    def close(self) -> None:
        """`DeadlineStore.close`; the operations left running are no longer watched."""
        with self._lock:
            self._late.clear()
        super().close()


class _Late(NamedTuple):
    """An operation a hedge stopped waiting for."""

    deadline: float  # time.monotonic(): past it, the operation is a timeout
    operation: str
    flag: threading.Event  # its "given up" flag
    trial: object | None  # the breaker's trial token, if it is the trial
