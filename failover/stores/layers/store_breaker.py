"""The store breaker of a `failover.stores.layers.deadline.DeadlineStore`: a store that is *out*
is skipped for a while.

The breaker opens when the store is *out*: ``after`` operations in a row (default 3) timed out
or were refused at the connection (`failover.stores.outages.out`), the queue's own writes
included, so that a dead database with healthy upstreams (nothing but writes) is seen too. One
slow read is not an outage; an error the store answered with resets the count, and one that is
the caller's own (a value the store cannot encode) says nothing about the store. Once open, the
breaker lets one operation through as a trial after ``open_for``; every way a trial ends
reaches `StoreBreaker._ended`, the one place that ends it: answered (closed), out or failed
(open for another ``open_for``), or without a verdict (refused a worker, cancelled,
interrupted: the next operation is the trial). An answer from any operation closes it.

The store going out (the breaker opening) and answering again (closing) are facts: `watch`ers
are told, on the thread whose operation changed it (the engine puts them on its stream, for
``failover_store_up``, ``HealthReport.stores`` and the logs).
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from datetime import datetime, timedelta
from logging import getLogger

from ...errors import SerializationError, StoreError
from ..outages import out

__all__ = ["StoreBreaker", "StoreUnavailable"]

log = getLogger(__name__)


class StoreUnavailable(StoreError):
    """A store operation skipped: the store breaker is open (the store is out)."""


class StoreBreaker:
    """The breaker's state and verdicts (the deadline layer runs the operations).

    Args:
        clock: the engine's clock, for the breaker's open time.
        open_for: how long the breaker skips the store once open; then one operation is let
            through as a trial, and its success closes the breaker.
        after: how many operations in a row must time out or be refused at the connection
            for the breaker to open (one slow read is not an outage).

    Attributes:
        errors: counts of ``(operation, reason)``, reason ``timeout``, ``error`` or
            ``breaker_open``.
    """

    def __init__(self, clock: Callable[[], datetime], open_for: float, after: int) -> None:
        self.clock = clock
        self.open_for = timedelta(seconds=open_for)
        self.after = after
        self._streak = 0  # operations in a row that were out (timed out, refused)
        self.errors: Counter[tuple[str, str]] = Counter()
        self._lock = threading.Lock()
        self._open_until: datetime | None = None
        # The trial operation under way (others are still skipped): its token, which only
        # that operation's end (or a close, or a fork) clears.
        self._trial: object | None = None
        # Told ``False`` when the store goes out (the breaker opens), ``True`` when it answers
        # again (`watch`).
        self._watchers: list[Callable[[bool], None]] = []

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
