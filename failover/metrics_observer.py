"""The Prometheus metrics as an observer of one failover's calls: the store's write and read
timings, the guards' refusals, the breaker's state changes and the failed hooks, passed on to
the engine's `failover.metrics.Metrics`.

The per-call counts are not pushed: the collector reads them from the failover's
`failover.recorder.FailoverStats` at scrape time, which keeps the call path cheap.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from datetime import datetime
from typing import ClassVar

from .errors import BulkheadFull
from .events import Observer
from .metrics import Metrics
from .metrics.prometheus import PrometheusMetrics
from .stores.base import Payload

__all__ = ["MetricsObserver"]


class MetricsObserver(Observer):
    """Counts and times one failover's stores and recoveries in ``metrics``.

    Args:
        metrics: the engine's metrics (never raising: `failover.metrics.resolve_metrics`).
        name: the failover's name.
        clock: the engine's clock: the age of a recovered value.
        queued: the engine's writes go to an async-writes queue, which counts what becomes of
            them (``failover_writes_total``'s ``queued``, ``written``, ``failed``): a write
            handed to it is only timed here; one it refused is counted failed.
    """

    __slots__ = ("clock", "metrics", "name", "queued")

    timed: ClassVar[bool] = True
    safe: ClassVar[bool] = True

    def __init__(
        self, metrics: Metrics, name: str, clock: Callable[[], datetime], queued: bool = False
    ) -> None:
        self.metrics = metrics
        self.name = name
        self.clock = clock
        self.queued = queued

    def __repr__(self) -> str:
        return f"MetricsObserver({self.name!r})"

    def method(self, fact: str) -> Callable[..., None]:
        """`stored` straight to the metrics, without a frame of its own: with Prometheus
        metrics, the failover's own tally (`failover.metrics.tally.Tally.stored`), so that a
        metered success is one increment path, with no lookup by name."""
        if fact == "stored" and not self.queued:
            metrics = self.metrics
            if isinstance(metrics, PrometheusMetrics):
                try:
                    return metrics.tally(self.name).stored
                except Exception:  # its own `stored` counts the failure, call by call
                    pass
            return functools.partial(metrics.stored, self.name)
        return super().method(fact)  # handed to the queue: `stored` tells a failure apart

    def stored(self, ok: bool, seconds: float) -> None:
        """Count a write: written or failed (handed to the queue: timed, the queue counts it)."""
        if ok and self.queued:
            self.metrics.write_queued(self.name, seconds)
        else:
            self.metrics.stored(self.name, ok, seconds)

    def superseded(self, count: int) -> None:
        """Count the entries of a write a newer stored entry kept out."""
        self.metrics.write_results(self.name, "superseded", count)

    def read(self, outcome: str, seconds: float, found: Payload | None) -> None:
        """Count a recovery's read, with the recovered value's age, and whether it found only
        some of a scatter/gather call's slices."""
        age = None
        if found is not None and found.as_of is not None:
            try:
                age = max(0.0, (self.clock() - found.as_of).total_seconds())
            except Exception:  # a failing clock costs the age, never the recovery
                age = None
        self.metrics.recovered(self.name, outcome, seconds, age)
        if found is not None and found.partial:
            self.metrics.partial(self.name)

    def refused(self, guard: str, cause: Exception) -> None:
        """Count a guard's refusal (``failover_refused_total``), once: a bulkhead's, by its pool,
        is ``failover_bulkhead_rejected_total`` too."""
        pool = cause.pool if isinstance(cause, BulkheadFull) else None
        self.metrics.refused(self.name, guard, pool)

    def breaker_state(self, state: int) -> None:
        """The breaker's state for ``failover_circuit_state`` (read from the breaker itself at
        scrape time when it can be)."""
        self.metrics.circuit_state(self.name, state)

    def hook_failed(self, error: Exception) -> None:
        """Count a failed ``on_recovered`` hook."""
        self.metrics.hook_failed(self.name)
