"""What `PrometheusMetrics` counts per ``name`` label, in plain lists and floats: updated on
the call path without ``prometheus_client``, read at scrape time."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable

from .base import failed

__all__ = [
    "FIRST",
    "OTHER",
    "RECOVERY_OUTCOMES",
    "SECONDS_BUCKETS",
    "STALE_AGE_BUCKETS",
    "WRITE_RESULTS",
    "Histogram",
    "Tally",
]

OTHER = "__other__"
"""The ``name`` label of the names past ``max_names``."""

SECONDS_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)
STALE_AGE_BUCKETS = (1.0, 10.0, 60.0, 300.0, 900.0, 3600.0, 4 * 3600.0, 86400.0, 7 * 86400.0)
WRITE_RESULTS = ("queued", "written", "failed", "superseded")
"""``failover_writes_total``'s results: a write handed to the async-writes queue is ``queued``,
then ``written``, ``failed`` or ``superseded`` (per entry: a newer entry of its key was stored,
so it was not written); one made on the caller's thread is ``written`` or ``failed``, and its
entries a newer one kept out are ``superseded`` (a write all of whose entries were is not
``written`` too)."""
RECOVERY_OUTCOMES = ("recovered", "not_recovered", "error")
FIRST = SECONDS_BUCKETS[0]
"""The first bucket's bound: a write within it (a process-memory store's) needs no bisection."""


class Histogram:
    """Bucket counts (not cumulative) and a sum; updates are plain list and float operations."""

    __slots__ = ("bounds", "counts", "total")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.total = 0.0

    def observe(self, value: float) -> None:
        """Count ``value`` in its bucket and in the sum."""
        self.counts[bisect_left(self.bounds, value)] += 1
        self.total += value


class Tally:
    """What `PrometheusMetrics` counts for one ``name`` label.

    Updated without a lock: under the GIL an increment has no switch point between its read
    and its write, so none is lost in practice (monitoring counts, not accounting).
    """

    __slots__ = (
        "circuit",
        "circuit_probe",
        "hooks",
        "partial",
        "quick",
        "quick_seconds",
        "recoveries",
        "recovery_seconds",
        "refused",
        "stale_age",
        "write_seconds",
        "writes",
    )

    def __init__(self) -> None:
        self.writes = [0, 0, 0, 0]  # queued, written, failed, superseded (WRITE_RESULTS)
        self.write_seconds = Histogram(SECONDS_BUCKETS)
        self.recoveries = [0, 0, 0]  # recovered, not_recovered, error
        self.recovery_seconds = Histogram(SECONDS_BUCKETS)
        self.stale_age = Histogram(STALE_AGE_BUCKETS)
        self.partial = 0
        self.circuit: int | None = None
        self.circuit_probe: Callable[[], int] | None = None  # the state read at scrape time
        # Refusals per (guard, bulkhead pool or ""): counted once, read as two families.
        self.refused: dict[tuple[str, str], int] = {}
        self.hooks = 0
        # Writes within the first bucket (a process-memory store's): two increments on the
        # call path, folded into ``writes`` and ``write_seconds`` when read (`written`). The
        # count is a float too: a float's increment reuses a freed float, an int's allocates
        # (exact to 2**53 writes).
        self.quick = 0.0
        self.quick_seconds = 0.0

    def written(self) -> tuple[list[int], Histogram]:
        """``writes`` and ``write_seconds`` with the quick writes folded in."""
        quick = int(self.quick)
        writes = list(self.writes)
        writes[1] += quick
        h = self.write_seconds
        seconds = Histogram(h.bounds)
        seconds.counts = list(h.counts)
        seconds.counts[0] += quick
        seconds.total = h.total + self.quick_seconds
        return writes, seconds

    def stored(self, ok: bool, seconds: float) -> None:
        """A write of a live result, counted and timed in one step: the metered success path's
        one increment path (`failover.metrics_observer.MetricsObserver.method` hands this bound
        method to the event stream, so a success costs one frame here, no lookup by name; the
        plain path, `failover.plain`, makes its two increments in its own frame)."""
        try:
            if ok and seconds <= FIRST:  # the common case: no bisection, no list
                self.quick += 1.0
                self.quick_seconds += seconds
            else:
                self.writes[1 if ok else 2] += 1
                self.write_seconds.observe(seconds)
        except Exception:  # metrics never raise into a call
            failed()
