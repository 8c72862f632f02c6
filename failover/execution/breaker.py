"""Circuit breaker: a `pybreaker.CircuitBreaker` consulted around each call, without its lock.

pybreaker keeps the state (in memory, or shared across processes by a `CircuitBreakerStorage`
such as `pybreaker.CircuitRedisStorage`), the counters, the listeners and the transitions
(`open`, `half_open`, `close`). This guard decides around each call, where pybreaker falls short:

- `CircuitBreaker.call` holds the breaker's lock while the function runs, so calls through one
  breaker would run one at a time; here the guarded call runs outside any lock.
- its decorator does not count failures of ``async def`` functions; here the guard sees the
  end of the awaited call.
- in half-open, exactly one trial call (per process) reaches the upstream; the concurrent others
  are refused and served from the store.
- the call that trips the breaker raises the upstream's own exception, not pybreaker's error.
- exceptions the failover does not recover (``exclude=``, or not matched by ``exceptions=``) are
  not failures of the upstream: they count as successes, as pybreaker's own ``exclude`` does.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar

import pybreaker

from .base import Guard

__all__ = ["BreakerGuard", "state_code"]

_OPEN = pybreaker.STATE_OPEN
_CLOSED = pybreaker.STATE_CLOSED
_TRIAL = object()  # the token of the half-open trial call
_CODES = {_CLOSED: 0, pybreaker.STATE_HALF_OPEN: 1, _OPEN: 2}


def state_code(state: str) -> int:
    """The ``failover_circuit_state`` value of a pybreaker state name (0 closed, 1 half-open,
    2 open)."""
    return _CODES.get(state, 0)


class BreakerGuard(Guard):
    """Refuses calls with `pybreaker.CircuitBreakerError` while ``breaker`` is open.

    Args:
        breaker: the pybreaker breaker (its own settings, listeners and storage apply).
        counts: ``exc -> bool``: whether an exception is a failure of the upstream (the
            failover's ``exceptions=``/``exclude=``; refusals of inner guards always count).
    """

    refusals: ClassVar[tuple[type[Exception], ...]] = (pybreaker.CircuitBreakerError,)

    def __init__(self, breaker: pybreaker.CircuitBreaker, counts: Callable[[Exception], bool]):
        self.breaker = breaker
        self.counts = counts
        self._lock = threading.Lock()
        self._trial = False  # a half-open trial call is in flight in this process

    def __repr__(self) -> str:
        return f"BreakerGuard({self.breaker.name!r}, state={self.breaker.current_state})"

    def enter(self) -> Any:
        """Admit the call, or refuse it while open (or while another trial is in flight)."""
        cb = self.breaker
        state = cb.current_state
        if state == _CLOSED:
            return None
        with self._lock:
            if self._trial:
                raise pybreaker.CircuitBreakerError(
                    f"circuit breaker {cb.name!r}: half-open, a trial call is in flight"
                )
            state = cb.current_state
            if state == _CLOSED:
                return None
            if state == _OPEN:
                # pybreaker's own storage records when it opened (shared with other processes).
                opened_at = cb._state_storage.opened_at
                if opened_at and datetime.now(UTC) < opened_at + timedelta(
                    seconds=cb.reset_timeout
                ):
                    raise pybreaker.CircuitBreakerError(
                        f"circuit breaker {cb.name!r}: open, the upstream is not called"
                    )
                cb.half_open()
            self._trial = True
            return _TRIAL

    def exit(self, token: Any, exc: BaseException | None) -> None:
        """Count the call's end: a success, or a failure that may open the breaker."""
        cb = self.breaker
        failed = exc is not None and (
            not isinstance(exc, Exception) or (self.counts(exc) and cb.is_system_error(exc))
        )
        try:
            if failed:
                self._failure(cb, exc, token is _TRIAL)
            else:
                self._success(cb, token is _TRIAL)
        finally:
            if token is _TRIAL:
                with self._lock:
                    self._trial = False

    @staticmethod
    def _success(cb: pybreaker.CircuitBreaker, trial: bool) -> None:
        storage = cb._state_storage
        if trial:
            storage.increment_success_counter()
            if storage.success_counter >= cb.success_threshold:
                cb.close()
        elif storage.counter:  # a shared storage would pay a round trip to reset a zero
            storage.reset_counter()
        for listener in cb.listeners:
            listener.success(cb)

    @staticmethod
    def _failure(cb: pybreaker.CircuitBreaker, exc: Any, trial: bool) -> None:
        cb._inc_counter()
        for listener in cb.listeners:
            listener.failure(cb, exc)
        if trial or (cb.current_state == _CLOSED and cb.fail_counter >= cb.fail_max):
            cb.open()


class StateListener(pybreaker.CircuitBreakerListener):
    """Reports each state change of a breaker as ``report(name, code)``."""

    def __init__(self, name: str, report: Callable[[str, int], None]) -> None:
        self.name = name
        self.report = report

    def state_change(self, cb: pybreaker.CircuitBreaker, old_state: Any, new_state: Any) -> None:
        """Report the new state."""
        with contextlib.suppress(Exception):  # metrics never break a call
            self.report(self.name, state_code(new_state.name))
