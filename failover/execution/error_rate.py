"""The error-rate breaker: ``breaker_defaults={"error_rate": 0.05, "min_calls": 10, "period":
60}`` opens a failover's breaker when at least ``min_calls`` calls ended in the last ``period``
seconds and ``error_rate`` of them or more failed (cashews' ``circuit_breaker``), where
``fail_max`` opens it after that many failures in a row (pybreaker's own rule, which still holds
when both are given).

It is a `pybreaker.CircuitBreakerListener` of the breaker: it hears each call's end as every
listener does (`failover.execution.breaker.BreakerGuard` tells the listeners, and so does
pybreaker's own ``call``), counts it in a window of one-second buckets, and trips the breaker
with pybreaker's own ``open()``. The state stays pybreaker's, in the breaker's storage: its
other listeners hear the transitions, a shared storage (``CircuitRedisStorage``, the engine's
fleet) shares the open state, and half-open, the trial and the reset timeout are pybreaker's as
for any breaker. The window is each process's own: a process judges the calls it made, and the
breaker it opens is open for every process sharing the storage.

The window runs on the engine's clock (a test's fake clock). It holds at most ``period`` buckets
(one per second with calls), and starts empty again each time the breaker opens or closes.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable
from typing import Any

import pybreaker

__all__ = ["ErrorRate", "shown_error_rate"]


class ErrorRate(pybreaker.CircuitBreakerListener):
    """Opens its breaker when, over the last ``period`` seconds, at least ``min_calls`` calls
    ended and at least ``error_rate`` of them failed.

    Args:
        error_rate: the failed share that opens the breaker (0 to 1, 1 included).
        min_calls: the fewest calls in the window for the rate to count.
        period: the window, in seconds.
        clock: seconds, monotonic (the engine's clock).
    """

    def __init__(
        self, error_rate: float, min_calls: int, period: float, clock: Callable[[], float]
    ) -> None:
        self.error_rate = error_rate
        self.min_calls = min_calls
        self.period = period
        self.clock = clock
        self.lock = threading.Lock()
        # [second, calls, failures], oldest first; and their totals.
        self.buckets: collections.deque[list[int]] = collections.deque()
        self.calls = 0
        self.failures = 0

    def __repr__(self) -> str:
        return f"ErrorRate({shown_error_rate(self.error_rate, self.min_calls, self.period)})"

    def success(self, cb: pybreaker.CircuitBreaker) -> None:
        """A call of the breaker succeeded."""
        self._count(False)

    def failure(self, cb: pybreaker.CircuitBreaker, exc: BaseException) -> None:
        """A call failed: the breaker opens when the window's rate reaches ``error_rate``."""
        if self._count(True) and cb.current_state == pybreaker.STATE_CLOSED:
            with self.lock:  # concurrent failures open it once
                if cb.current_state != pybreaker.STATE_CLOSED:
                    return
                self._clear()
            cb.open()

    def state_change(self, cb: pybreaker.CircuitBreaker, old_state: Any, new_state: Any) -> None:
        """Opened or closed: the window starts again (the calls before judged the upstream
        as it was then)."""
        name = getattr(new_state, "name", None)
        if name in (pybreaker.STATE_OPEN, pybreaker.STATE_CLOSED):
            with self.lock:
                self._clear()

    def _count(self, failed: bool) -> bool:
        """Count a call's end now; whether the window's rate now opens the breaker."""
        now = int(self.clock())
        with self.lock:
            buckets = self.buckets
            start = now - self.period
            while buckets and buckets[0][0] <= start:
                _, calls, failures = buckets.popleft()
                self.calls -= calls
                self.failures -= failures
            if buckets and buckets[-1][0] == now:
                bucket = buckets[-1]
            else:
                bucket = [now, 0, 0]
                buckets.append(bucket)
            bucket[1] += 1
            self.calls += 1
            if failed:
                bucket[2] += 1
                self.failures += 1
            return (
                failed
                and self.calls >= self.min_calls
                and self.failures >= self.error_rate * self.calls
            )

    def _clear(self) -> None:
        self.buckets.clear()
        self.calls = self.failures = 0


def shown_error_rate(error_rate: float, min_calls: int, period: float) -> str:
    """``error_rate 5% of >= 10 calls in 60s``: the setting as a definition shows it."""
    return f"error_rate {error_rate:.0%} of >= {min_calls} calls in {period:g}s"
