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
from typing import Any, TypeVar

from .deadline import DeadlineStore

__all__ = ["HedgingDeadline"]

T = TypeVar("T")

log = logging.getLogger(__name__)


class HedgingDeadline(DeadlineStore):
    """A `DeadlineStore` with `hedged` reads (a tiered store's far store's deadline layer)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Operations a hedge stopped waiting for: their deadline, operation and flag.
        self._late: dict[Future[Any], tuple[float, str, threading.Event]] = {}

    @property
    def up(self) -> bool:
        """The breaker's view, operations left running past their deadline counted first."""
        if self._late:
            self._overdue()
        return super().up

    def _admit(self, operation: str) -> None:
        if self._late:
            self._overdue()
        super()._admit(operation)

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
        self._admit(operation)
        future, flag = self._start(operation, fn, *args)
        try:
            result = future.result(budget)
        except FutureTimeout:
            self._watch(operation, future, flag, late, time.monotonic() + self.timeout - budget)
            return False, None
        except Exception:
            self.errors[(operation, "error")] += 1
            raise
        self._answered()
        return True, result

    def _watch(
        self,
        operation: str,
        future: Future[T],
        flag: threading.Event,
        late: Callable[[T], Any],
        deadline: float,
    ) -> None:
        with self._lock:
            self._late[future] = (deadline, operation, flag)

        def landed(done: Future[T]) -> None:
            with self._lock:
                if self._late.pop(done, None) is None:
                    return  # past its deadline: counted as a timeout already
            if done.cancelled():
                return
            if done.exception() is not None:
                self.errors[(operation, "error")] += 1
                return
            self._answered()
            try:
                late(done.result())
            except Exception:  # the answer is only kept for later: nobody waits on it
                log.debug("failover: keeping a late store answer failed", exc_info=True)

        future.add_done_callback(landed)

    def _overdue(self) -> None:
        """Operations a hedge left running past their deadline: timeouts, as if waited for."""
        now = time.monotonic()
        with self._lock:
            over = [(f, entry) for f, entry in self._late.items() if entry[0] <= now]
            for f, _ in over:
                del self._late[f]
        for _, (_, operation, flag) in over:
            flag.set()
            self._failed(operation, "timeout")
