"""One failover's record on one engine: what its callers got, in constant time and memory.

`FailoverStats` observes the core's event stream (`failover.events`): exactly one of `live`,
`recovered`, `not_recovered` or `raised` per call, and `refused` before a guard's refusal is
recovered. Two readers share it: `Failover.health` (a ring of one-second slots over the last
minute, turned into a `failover.health.FailoverHealth`) and the Prometheus collector (monotonic
totals, read at scrape time). The log lines of the failover's state changes are another observer's
(`failover.log_observer`).
"""

from __future__ import annotations

import logging
import math
import threading
from bisect import bisect_left
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import ClassVar

from .events import Observer
from .health import (
    BREAKER_STATES,
    DOWN_MIN,
    DOWN_RATIO,
    OUTCOMES,
    WINDOW,
    FailoverHealth,
    Failure,
    Status,
)

__all__ = [
    "MAX_ERROR_KINDS",
    "OTHER",
    "UPSTREAM_BUCKETS",
    "UPSTREAM_FIRST",
    "FailoverStats",
    "dropped",
]

log = logging.getLogger("failover.health")


UPSTREAM_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)
"""Upper bounds of the upstream-time histogram (seconds; ``+Inf`` follows)."""

MAX_ERROR_KINDS = 20
"""Distinct exception class names counted per failover; further kinds count as ``__other__``."""

OTHER = "__other__"

_LIVE, _RECOVERED, _NOT_RECOVERED, _FRESH = 0, 1, 2, 3
_K = len(OUTCOMES)  # counts per slot of the window
_ZEROS = (0,) * _K

_N = len(UPSTREAM_BUCKETS) + 1
UPSTREAM_FIRST = _FIRST = UPSTREAM_BUCKETS[0]
"""The first bucket's bound of the upstream's time, in seconds (no lookup below it)."""
_SECOND = timedelta(seconds=1)
_NEVER = datetime.min.replace(tzinfo=UTC)


class FailoverStats(Observer):
    """One failover's calls on one engine, in constant memory and constant time per call.

    It observes the core's events (`failover.events`): exactly one of `live`, `recovered`,
    `not_recovered` or `raised` per call, with the seconds spent in the upstream, and
    `hook_failed`, and its breaker's state changes (`breaker_state`). None of them ever
    raises. The metrics read the per-call counts from here, at scrape time.

    Args:
        name: the failover's name.
        clock: the engine's clock (aware datetimes).
    """

    safe: ClassVar[bool] = True

    __slots__ = (
        "__weakref__",
        "_at",
        "_end",
        "_failure",
        "_latest",
        "_refusals",
        "_ring",
        "_slot",
        "_stale",
        "_stamps",
        "_start",
        "_until",
        "breaker",
        "calls",
        "clock",
        "errors",
        "hook_errors",
        "info",
        "lock",
        "name",
        "refused_pools",
        "seconds",
        "upstream_error",
        "upstream_error_sum",
        "upstream_ok",
        "upstream_ok_sum",
    )

    def __init__(
        self,
        name: str,
        clock: Callable[[], datetime],
        seconds: Callable[[], float] | None = None,
    ) -> None:
        self.name = name
        self.clock = clock
        # The clock as seconds since the epoch (a recovery's time: no datetime made for it).
        self.seconds: Callable[[], float] = (
            (lambda: clock().timestamp()) if seconds is None else seconds
        )
        self.lock = threading.Lock()  # state changes, the error kinds; other counts take none
        # Monotonic totals, for metrics collectors.
        self.calls = [0] * _K  # live, recovered, not_recovered, fresh
        self.upstream_ok = [0] * _N  # per histogram bucket, not cumulative
        self.upstream_error = [0] * _N
        self.upstream_ok_sum = 0.0
        self.upstream_error_sum = 0.0
        self.errors: dict[str, int] = {}
        self.hook_errors = 0
        # The window: slot i counts the calls of one second (stamp: which), one count per outcome.
        self._stamps = [-1] * WINDOW
        self._ring = [0] * (_K * WINDOW)
        self._slot = 0  # the current slot's first index in _ring
        self._latest = -1  # the latest second counted: older than the window means idle
        self._start = self._end = _NEVER  # the current slot's second: no call yet
        self._at = self._until = 0.0  # the same, in seconds since the epoch (`live_at`)
        self._failure: tuple[str, float] | None = None  # the upstream's latest: kind, when
        # Refusals per guard, per second of the window: guard -> {second: count} (refusals only).
        self._refusals: dict[str, dict[int, int]] = {}
        # Refusals since the start by the pool whose permits were not free (the refusal's
        # ``pool``): a pool's health reads them (`failover.health.PoolHealth`).
        self.refused_pools: dict[str, int] = {}
        self._stale: tuple[datetime, float] | None = None  # the latest stale value: as_of, when
        self.breaker: str | None = None
        self.info: dict[str, str] = {}

    def __repr__(self) -> str:
        return f"FailoverStats({self.name!r})"

    # -- per call (the core) ----------------------------------------------------------------

    def live(self, now: datetime | None, seconds: float) -> None:
        """The upstream answered: the caller got a live result.

        Args:
            now: the call's time (the engine's clock, read by the core already); ``None`` when
                the clock failed: counted, outside the window.
            seconds: time spent in the upstream.
        """
        # The success path of every call: no lock and no time arithmetic. Under the GIL, the
        # increments below have no switch point between read and write (no call, no loop), so
        # they are not lost in practice; these are monitoring counts, not accounting. The
        # current one-second slot is found by comparing datetimes (cheap) with its bounds.
        try:
            # An upstream under 5 ms (the first bucket) is where this overhead shows: one
            # float comparison instead of a bisection for it; bisect_left's bucket otherwise.
            bucket = 0 if seconds <= _FIRST else bisect_left(UPSTREAM_BUCKETS, seconds)
            if now is not None:  # None: the clock failed (store trouble, logged)
                if not self._start <= now < self._end:
                    self._advance(now)
                self._ring[self._slot] += 1
            self.calls[0] += 1
            self.upstream_ok[bucket] += 1
            self.upstream_ok_sum += seconds
        except Exception:
            dropped()

    def live_at(self, at: float, seconds: float) -> None:
        """`live` of a call made ``at`` seconds since the epoch: the plain success path
        (`failover.plain`) reads the time as a float, and its slot is found by comparing
        floats."""
        try:
            bucket = 0 if seconds <= _FIRST else bisect_left(UPSTREAM_BUCKETS, seconds)
            if not self._at <= at < self._until:
                self._advance(datetime.fromtimestamp(at, UTC))
            self._ring[self._slot] += 1
            self.calls[0] += 1
            self.upstream_ok[bucket] += 1
            self.upstream_ok_sum += seconds
        except Exception:
            dropped()

    def fresh(self, now: datetime | None) -> None:
        """The caller got a stored value within ``fresh_for``: the upstream was not called."""
        try:
            if now is not None:  # None: the clock failed (store trouble, logged)
                if not self._start <= now < self._end:
                    self._advance(now)
                self._ring[self._slot + _FRESH] += 1
            self.calls[_FRESH] += 1
        except Exception:
            dropped()

    def recovered(
        self,
        seconds: float | None,
        cause: BaseException,
        as_of: datetime | None,
        outcome: int = _RECOVERED,
    ) -> None:
        """The upstream failed and the caller got the value stored at ``as_of``.

        ``seconds`` is ``None`` when the execution layer refused the call (an open breaker, a
        full bulkhead): the call is counted, the upstream's time and errors are not.
        `not_recovered` and `raised` are counted here too, as their ``outcome`` (one body:
        `recovered_at`, at the clock's time)."""
        try:
            at = self.seconds()
        except Exception:
            dropped()
            return
        self.recovered_at(at, seconds, cause, as_of, outcome)

    def recovered_at(
        self,
        at: float,
        seconds: float | None,
        cause: BaseException,
        as_of: datetime | None,
        outcome: int = _RECOVERED,
    ) -> None:
        """`recovered` at ``at`` seconds since the epoch: the plain path's recovery
        (`failover.plain`) has read the time as a float, and its slot is found by comparing
        floats, as `live_at` does."""
        # Lock-free as `live` is (the same reasoning); only a state change and an error kind
        # not counted before take the lock.
        try:
            kind = cause.__class__.__name__  # an attribute: cheaper than calling type()
            if not self._at <= at < self._until:
                self._advance(datetime.fromtimestamp(at, UTC))
            self._ring[self._slot + outcome] += 1
            self.calls[outcome] += 1
            if seconds is not None:  # None: refused before the upstream was called
                fast = seconds <= _FIRST  # as in `live`
                self.upstream_error[0 if fast else bisect_left(UPSTREAM_BUCKETS, seconds)] += 1
                self.upstream_error_sum += seconds
                errors = self.errors
                try:  # a kind seen before: an increment, as the counts above
                    errors[kind] += 1
                except KeyError:  # a new kind, under the lock: `errors.get` is a call, where
                    # another thread may add the same kind between this read and the write
                    self._new_error(kind)
            if outcome == _LIVE:
                return
            # A guard's refusal is not the upstream's failure (`refused_by`, inlined: no frame).
            if not isinstance(getattr(cause, "guard", None), str):
                self._failure = (kind, at)
            if as_of is not None:
                self._stale = (as_of, at)
        except Exception:
            dropped()

    def _new_error(self, kind: str) -> None:
        with self.lock:
            errors = self.errors
            n = errors.get(kind)
            if n is None and len(errors) >= MAX_ERROR_KINDS:
                kind = OTHER
                n = errors.get(kind)
            errors[kind] = 1 if n is None else n + 1

    def not_recovered(self, seconds: float | None, cause: BaseException) -> None:
        """The upstream failed and nothing usable was recovered (the policy answered)."""
        self.recovered(seconds, cause, None, _NOT_RECOVERED)

    def raised(self, seconds: float, cause: BaseException) -> None:
        """The upstream raised an exception that does not trigger recovery (``exclude=``).

        The caller got the upstream's own answer: counted ``live``, with the error recorded.
        """
        self.recovered(seconds, cause, None, _LIVE)

    def _advance(self, now: datetime) -> None:
        """Make the slot of ``now``'s second current, cleared if it held an older second."""
        second = math.floor(now.timestamp())
        slot = second % WINDOW
        i = _K * slot
        if self._stamps[slot] != second:
            self._stamps[slot] = second
            self._ring[i : i + _K] = _ZEROS
        self._latest = max(self._latest, second)
        self._start = datetime.fromtimestamp(second, now.tzinfo)
        self._end = self._start + _SECOND
        self._at, self._until = float(second), second + 1.0
        self._slot = i

    # -- rare events (execution layer, hooks) ------------------------------------------------

    def breaker_state(self, state: int) -> None:
        """The failover's circuit breaker is now closed (0), half-open (1) or open (2)."""
        self.breaker = BREAKER_STATES[state] if 0 <= state < len(BREAKER_STATES) else None

    def refused(self, guard: str, cause: Exception) -> None:
        """Guard ``guard`` refused a call: counted apart, per guard, over the window (the call's
        recovery is counted by its own fact)."""
        try:
            second = math.floor(self.clock().timestamp())
            with self.lock:  # refusals only: never on the success path
                seconds = self._refusals.get(guard)
                if seconds is None:
                    seconds = self._refusals[guard] = {}
                seconds[second] = seconds.get(second, 0) + 1
                pool = getattr(cause, "pool", None)
                if isinstance(pool, str):
                    self.refused_pools[pool] = self.refused_pools.get(pool, 0) + 1
                if len(seconds) > WINDOW:  # keep the window's seconds only
                    for old in [s for s in seconds if second - s >= WINDOW]:
                        del seconds[old]
        except Exception:
            dropped()

    def refused_counts(self, now: datetime) -> dict[str, int]:
        """Refusals per guard over the `WINDOW` seconds up to ``now`` (guards with none left
        out)."""
        second = math.floor(now.timestamp())
        with self.lock:
            counts = {
                guard: sum(n for s, n in seconds.items() if 0 <= second - s < WINDOW)
                for guard, seconds in self._refusals.items()
            }
        return {guard: n for guard, n in sorted(counts.items()) if n}

    def hook_failed(self, error: Exception) -> None:
        """The ``on_recovered`` hook raised (the caller got the recovered value)."""
        self.hook_errors += 1  # the metrics observer counts it there

    # -- reading ------------------------------------------------------------------------------

    def window_counts(self, now: datetime) -> dict[str, int]:
        """Calls per outcome over the `WINDOW` seconds up to ``now``."""
        second = math.floor(now.timestamp())
        counts = [0] * _K
        if second - self._latest >= WINDOW:  # idle: the common case among many failovers
            return dict(zip(OUTCOMES, counts, strict=True))
        stamps, ring = list(self._stamps), list(self._ring)  # copies: writers take no lock
        for slot in range(WINDOW):
            if 0 <= second - stamps[slot] < WINDOW:
                i = _K * slot
                for k in range(_K):
                    counts[k] += ring[i + k]
        return dict(zip(OUTCOMES, counts, strict=True))

    def health(
        self, now: datetime, down_ratio: float = DOWN_RATIO, down_min: int = DOWN_MIN
    ) -> FailoverHealth:
        """This failover's health at ``now``: ``down`` only when at least ``down_ratio`` of the
        window's calls, and at least ``down_min``, got nothing usable; fewer is ``degraded``."""
        counts = self.window_counts(now)
        status: Status
        failed = counts["not_recovered"]
        if failed >= down_min and failed >= down_ratio * sum(counts.values()):
            status = "down"
        elif failed or counts["recovered"] or self.breaker == "open":
            status = "degraded"
        elif counts["live"] or counts["fresh"]:
            status = "up"
        else:
            status = "idle"
        kept = self._failure  # its time as seconds since the epoch: made a datetime here
        failure = None if kept is None else Failure(kept[0], datetime.fromtimestamp(kept[1], UTC))
        stale = self._stale
        age = None if stale is None else max(0.0, stale[1] - stale[0].timestamp())
        refused = self.refused_counts(now) if self._refusals else {}
        return FailoverHealth(self.name, status, counts, failure, self.breaker, age, refused)


_warned: list[bool] = []


def dropped() -> None:
    """Say that recording a call's statistics failed (logged the first time only)."""
    # Statistics never raise into a call: the first failure is logged, later ones dropped.
    if not _warned:
        _warned.append(True)
        log.warning("failover: recording a call's statistics failed", exc_info=True)
