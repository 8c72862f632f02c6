"""What `PrometheusMetrics` counts per ``name`` label, in plain lists and floats: updated on
the call path without ``prometheus_client``, read at scrape time."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable

from .base import failed

__all__ = [
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
_FIRST = SECONDS_BUCKETS[0]


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

    def stored(self, ok: bool, seconds: float) -> None:
        """A write of a live result, counted and timed in one step: the metered success path's
        one increment (`failover.metrics_observer.MetricsObserver.method` hands this bound
        method to the event stream, so a success costs one frame here, no lookup by name)."""
        try:
            self.writes[1 if ok else 2] += 1
            h = self.write_seconds  # `Histogram.observe`, inlined
            # A store within the first bucket (5 ms: a process-memory one) is the common case:
            # one float comparison instead of a bisection.
            h.counts[0 if seconds <= _FIRST else bisect_left(h.bounds, seconds)] += 1
            h.total += seconds
        except Exception:  # metrics never raise into a call
            failed()
