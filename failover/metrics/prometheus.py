"""`PrometheusMetrics`: the events layers report, tallied per failover name on the call path
(`failover.metrics.tally`), and the collector that turns the tallies into metric families at
scrape time (`failover.metrics.families` declares them, `failover.metrics.samples` fills them).
One instance per registry, shared by every engine on it."""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from .base import failed, safe
from .families import declare
from .fleet import FleetTally
from .samples import histogram, pool_samples, tally_samples, tracked_samples
from .tally import OTHER, RECOVERY_OUTCOMES, SECONDS_BUCKETS, WRITE_RESULTS, Histogram, Tally

if TYPE_CHECKING:
    from ..health import PoolStats
    from ..recorder import FailoverStats

__all__ = ["PrometheusMetrics"]

_by_registry: dict[int, PrometheusMetrics] = {}
_by_registry_lock = threading.Lock()


class PrometheusMetrics:
    """The library's metrics in a `prometheus_client` registry.

    One instance per registry (`PrometheusMetrics.for_registry`), shared by every engine on it,
    since a registry refuses the same metric twice. Names past ``max_names`` are folded into
    ``name="__other__"`` so a runaway set of failover names cannot explode cardinality.

    Args:
        registry: the registry (default: ``prometheus_client.REGISTRY``).
        max_names: distinct ``name`` label values before folding.
    """

    def __init__(self, registry: Any = None, max_names: int = 1000) -> None:
        from prometheus_client import REGISTRY

        registry = REGISTRY if registry is None else registry
        self.registry = registry
        self.max_names = max_names
        self._names: dict[str, Tally] = {}
        self._other = Tally()
        self._names_lock = threading.Lock()
        self._refusals_lock = threading.Lock()
        self._tracked: weakref.WeakKeyDictionary[FailoverStats, str] = weakref.WeakKeyDictionary()
        self._pools: weakref.WeakSet[PoolStats] = weakref.WeakSet()
        self._queue = 0
        self._dropped = 0
        self._async_failed = 0
        self._cleanup_removed = 0
        self._cleanup_seconds = Histogram(SECONDS_BUCKETS)
        self._cleanup_last: float | None = None
        self.fleet = FleetTally()  # told by the engines' fleets (`failover.fleet.observers`)
        registry.register(_Collector(self))

    def __repr__(self) -> str:
        return f"PrometheusMetrics({self.registry!r})"

    @classmethod
    def for_registry(cls, registry: Any = None) -> PrometheusMetrics:
        """The shared instance for ``registry`` (the default registry when ``None``)."""
        from prometheus_client import REGISTRY

        registry = REGISTRY if registry is None else registry
        with _by_registry_lock:
            metrics = _by_registry.get(id(registry))
            if metrics is None or metrics.registry is not registry:
                metrics = _by_registry[id(registry)] = cls(registry)
            return metrics

    def _label(self, name: str) -> str:
        """``name``, or ``__other__`` once ``max_names`` names are in use."""
        if name in self._names:
            return name
        with self._names_lock:
            if name in self._names:
                return name
            if len(self._names) >= self.max_names:
                return OTHER
            self._names[name] = Tally()
            return name

    def tally(self, name: str) -> Tally:
        """What is counted for ``name`` (``__other__``'s past ``max_names``): the same object
        for the life of these metrics, so an observer may keep it."""
        return self._names.get(name) or self._tally(name)

    def _tally(self, name: str) -> Tally:
        tally = self._names.get(name)
        if tally is None:
            label = self._label(name)
            tally = self._other if label == OTHER else self._names[label]
        return tally

    def stored(self, name: str, ok: bool, seconds: float) -> None:
        """A write of a live result."""
        try:
            tally = self._names.get(name) or self._tally(name)
        except Exception:
            failed()
        else:
            tally.stored(ok, seconds)  # never raises

    def write_queued(self, name: str, seconds: float) -> None:
        """A write handed to the async-writes queue: its time (the queue counts it)."""
        try:
            tally = self._names.get(name) or self._tally(name)
            tally.write_seconds.observe(seconds)
        except Exception:
            failed()

    @safe
    def write_results(self, name: str, result: str, count: int = 1) -> None:
        """Writes through the async-writes queue (``queued``, ``written``, ``failed``,
        ``superseded``), and superseded entries of writes on the caller's thread."""
        self._tally(name).writes[WRITE_RESULTS.index(result)] += count

    def recovered(
        self, name: str, outcome: str, seconds: float, stale_age: float | None = None
    ) -> None:
        """A recovery and, when a value was served stale, its age."""
        try:
            tally = self._tally(name)
            tally.recoveries[RECOVERY_OUTCOMES.index(outcome)] += 1
            tally.recovery_seconds.observe(seconds)
            if stale_age is not None:
                tally.stale_age.observe(stale_age)
        except Exception:
            failed()

    @safe
    def partial(self, name: str) -> None:
        """A partial scatter/gather recovery."""
        self._tally(name).partial += 1

    @safe
    def circuit_state(self, name: str, state: int) -> None:
        """The breaker's state: 0 closed, 1 half-open, 2 open."""
        self._tally(name).circuit = state

    @safe
    def circuit_probe(self, name: str, probe: Callable[[], int]) -> None:
        """Read the breaker state of ``name`` from ``probe`` at scrape time (what the breaker
        says now, not its last change: an open breaker past its reset timeout is half-open)."""
        self._tally(name).circuit_probe = probe

    @safe
    def refused(self, name: str, guard: str, pool: str | None = None) -> None:
        """A call refused by guard ``guard``: ``failover_refused_total``; a bulkhead's refusal
        (``pool``: its pool's name, a private pool named after its failover) is also read as
        ``failover_bulkhead_rejected_total``, from the same count."""
        refused = self._tally(name).refused
        key = (guard, (name if pool is None else pool) if guard == "bulkhead" else "")
        with self._refusals_lock:  # a read then a write: threads refused at once lost counts
            refused[key] = refused.get(key, 0) + 1

    @safe
    def hook_failed(self, name: str) -> None:
        """A raising ``on_recovered`` hook."""
        self._tally(name).hooks += 1

    @safe
    def async_queue(self, size: int) -> None:
        """The async-writes queue length."""
        self._queue = size

    @safe
    def async_dropped(self, count: int = 1) -> None:
        """Writes discarded at a full queue."""
        self._dropped += count

    @safe
    def async_failed(self, count: int = 1) -> None:
        """Queued writes that failed."""
        self._async_failed += count

    @safe
    def cleanup(self, removed: int, seconds: float) -> None:
        """One cleanup run."""
        self._cleanup_removed += removed
        self._cleanup_seconds.observe(seconds)
        self._cleanup_last = time.time()

    @safe
    def fleet_flight(self, name: str, result: str) -> None:
        """A fleet flight's leader of failover ``name``: ``led``, ``waited``, ``local`` or
        ``alone`` (``failover_fleet_flights_total``)."""
        self.fleet.flight(self._label(name), result)

    @safe
    def track(self, stats: FailoverStats) -> None:
        """Export ``stats`` (calls, upstream time and errors, info) while it lives."""
        self._tracked[stats] = self._label(stats.name)

    @safe
    def track_pool(self, pool: PoolStats) -> None:
        """Export ``pool``'s permits, permits in use and waiters while it lives."""
        self._pools.add(pool)


class _Collector:
    """Turns the tallies of a `PrometheusMetrics` into metric families, at scrape time."""

    def __init__(self, metrics: PrometheusMetrics) -> None:
        self.metrics = metrics

    def describe(self) -> list[Any]:
        """The families, without samples (what the registry checks for duplicates)."""
        return list(_families(None))

    def collect(self) -> Iterator[Any]:
        """The families with their samples."""
        return _families(self.metrics)


def _families(m: PrometheusMetrics | None) -> Iterator[Any]:
    """Every family, in the order of the docs' table, with ``m``'s samples (none for ``None``)."""
    f = declare()
    if m is not None:
        tracked_samples(f, list(m._tracked.items()))
        tally_samples(f, [*m._names.items(), (OTHER, m._other)])
        pool_samples(f, list(m._pools))
        f["queued"].add_metric((), m._queue)
        f["dropped"].add_metric((), m._dropped)
        f["failed"].add_metric((), m._async_failed)
        f["removed"].add_metric((), m._cleanup_removed)
        histogram(f["cleanup_seconds"], (), m._cleanup_seconds, always=True)
        if m._cleanup_last is not None:
            f["cleanup_last"].add_metric((), m._cleanup_last)
        m.fleet.samples(f)
    return iter(f.values())
