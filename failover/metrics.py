"""Counting what the library does. Layers report through the small `Metrics` interface;
`NullMetrics` is the no-op used when metrics are off. Metrics never raise into a call.

`PrometheusMetrics` keeps plain tallies per failover name, updated on the call path without
``prometheus_client`` (whose every ``inc``/``observe`` takes a lock and costs more than the
rest of a metered call), and a custom collector turns them into metric families at scrape time.
The per-call counts (``failover_calls_total``, ``failover_upstream_*``, ``failover_info``) are
read from each failover's `failover.recorder.FailoverStats`, which the engine hands over with
`Metrics.track`.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
import weakref
from bisect import bisect_left
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, ParamSpec, Protocol, cast

from .errors import ConfigurationError
from .health import OUTCOMES
from .recorder import UPSTREAM_BUCKETS

if TYPE_CHECKING:
    from .health import PoolStats
    from .recorder import FailoverStats

__all__ = [
    "NULL_METRICS",
    "Metrics",
    "NullMetrics",
    "PrometheusMetrics",
    "resolve_metrics",
]

log = logging.getLogger(__name__)
P = ParamSpec("P")


class Metrics(Protocol):
    """What layers report. Every method must be cheap and must never raise.

    The methods do nothing by default: subclass to count only some things.
    """

    def stored(self, name: str, ok: bool, seconds: float) -> None:
        """A write of a live result to the store: ``ok`` or failed."""
        return None

    def recovered(
        self, name: str, outcome: str, seconds: float, stale_age: float | None = None
    ) -> None:
        """A recovery: ``outcome`` is ``recovered``, ``not_recovered`` or ``error``."""
        return None

    def partial(self, name: str) -> None:
        """A scatter/gather recovery that found some slices only."""
        return None

    def circuit_state(self, name: str, state: int) -> None:
        """The circuit breaker of ``name`` is now closed (0), half-open (1) or open (2)."""
        return None

    def bulkhead_rejected(self, name: str, pool: str | None = None) -> None:
        """A call of ``name`` found no permit in bulkhead ``pool`` and went to recovery."""
        return None

    def hook_failed(self, name: str) -> None:
        """The ``on_recovered`` hook of ``name`` raised (the caller got the recovered value)."""
        return None

    def async_queue(self, size: int) -> None:
        """The async-writes queue now holds ``size`` writes."""
        return None

    def async_dropped(self, count: int = 1) -> None:
        """Writes discarded at a full async-writes queue."""
        return None

    def async_failed(self, count: int = 1) -> None:
        """Writes the async-writes worker could not write."""
        return None

    def cleanup(self, removed: int, seconds: float) -> None:
        """One cleanup run."""
        return None

    def track(self, stats: FailoverStats) -> None:
        """A registered failover's call statistics, to read when collecting (per-call counts
        are not pushed: reading them at collection keeps the call path cheap)."""
        return None

    def track_pool(self, pool: PoolStats) -> None:
        """A bulkhead pool, whose permits in use and waiters are read when collecting."""
        return None


_METHODS = tuple(name for name in vars(Metrics) if not name.startswith("_"))


class NullMetrics(Metrics):
    """Counts nothing."""


NULL_METRICS = NullMetrics()


_OTHER = "__other__"
_by_registry: dict[int, PrometheusMetrics] = {}
_by_registry_lock = threading.Lock()


def _safe(method: Callable[P, None]) -> Callable[P, None]:
    """Metrics never raise into a call: a failing update is logged once and dropped."""

    @functools.wraps(method)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> None:
        try:
            method(*args, **kwargs)
        except Exception:
            _failed()

    return wrapper


_warned: list[bool] = []


def _failed() -> None:
    if not _warned:
        _warned.append(True)
        log.warning("failover: updating a metric failed", exc_info=True)


SECONDS_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)
STALE_AGE_BUCKETS = (1.0, 10.0, 60.0, 300.0, 900.0, 3600.0, 4 * 3600.0, 86400.0, 7 * 86400.0)
RECOVERY_OUTCOMES = ("recovered", "not_recovered", "error")


class _Histogram:
    """Bucket counts (not cumulative) and a sum; updates are plain list and float operations."""

    __slots__ = ("bounds", "counts", "total")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.total = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.total += value


class _Tally:
    """What `PrometheusMetrics` counts for one ``name`` label.

    Updated without a lock: under the GIL an increment has no switch point between its read
    and its write, so none is lost in practice (monitoring counts, not accounting).
    """

    __slots__ = (
        "bulkhead",
        "circuit",
        "circuit_probe",
        "hooks",
        "partial",
        "recoveries",
        "recovery_seconds",
        "stale_age",
        "write_seconds",
        "writes",
    )

    def __init__(self) -> None:
        self.writes = [0, 0]  # ok, error
        self.write_seconds = _Histogram(SECONDS_BUCKETS)
        self.recoveries = [0, 0, 0]  # recovered, not_recovered, error
        self.recovery_seconds = _Histogram(SECONDS_BUCKETS)
        self.stale_age = _Histogram(STALE_AGE_BUCKETS)
        self.partial = 0
        self.circuit: int | None = None
        self.circuit_probe: Callable[[], int] | None = None  # the state read at scrape time
        self.bulkhead: dict[str, int] = {}  # refusals per pool
        self.hooks = 0


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
        self._names: dict[str, _Tally] = {}
        self._other = _Tally()
        self._names_lock = threading.Lock()
        self._tracked: weakref.WeakKeyDictionary[FailoverStats, str] = weakref.WeakKeyDictionary()
        self._pools: weakref.WeakSet[PoolStats] = weakref.WeakSet()
        self._queue = 0
        self._dropped = 0
        self._async_failed = 0
        self._cleanup_removed = 0
        self._cleanup_seconds = _Histogram(SECONDS_BUCKETS)
        self._cleanup_last: float | None = None
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
                return _OTHER
            self._names[name] = _Tally()
            return name

    def _tally(self, name: str) -> _Tally:
        tally = self._names.get(name)
        if tally is None:
            label = self._label(name)
            tally = self._other if label == _OTHER else self._names[label]
        return tally

    def stored(self, name: str, ok: bool, seconds: float) -> None:
        """A write of a live result."""
        try:
            tally = self._names.get(name) or self._tally(name)
            tally.writes[0 if ok else 1] += 1
            tally.write_seconds.observe(seconds)
        except Exception:
            _failed()

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
            _failed()

    @_safe
    def partial(self, name: str) -> None:
        """A partial scatter/gather recovery."""
        self._tally(name).partial += 1

    @_safe
    def circuit_state(self, name: str, state: int) -> None:
        """The breaker's state: 0 closed, 1 half-open, 2 open."""
        self._tally(name).circuit = state

    @_safe
    def circuit_probe(self, name: str, probe: Callable[[], int]) -> None:
        """Read the breaker state of ``name`` from ``probe`` at scrape time (what the breaker
        says now, not its last change: an open breaker past its reset timeout is half-open)."""
        self._tally(name).circuit_probe = probe

    @_safe
    def bulkhead_rejected(self, name: str, pool: str | None = None) -> None:
        """A call refused by the bulkhead (``pool``: its pool's name; a private pool is named
        after its failover)."""
        refused = self._tally(name).bulkhead
        pool = name if pool is None else pool
        refused[pool] = refused.get(pool, 0) + 1

    @_safe
    def hook_failed(self, name: str) -> None:
        """A raising ``on_recovered`` hook."""
        self._tally(name).hooks += 1

    @_safe
    def async_queue(self, size: int) -> None:
        """The async-writes queue length."""
        self._queue = size

    @_safe
    def async_dropped(self, count: int = 1) -> None:
        """Writes discarded at a full queue."""
        self._dropped += count

    @_safe
    def async_failed(self, count: int = 1) -> None:
        """Queued writes that failed."""
        self._async_failed += count

    @_safe
    def cleanup(self, removed: int, seconds: float) -> None:
        """One cleanup run."""
        self._cleanup_removed += removed
        self._cleanup_seconds.observe(seconds)
        self._cleanup_last = time.time()

    @_safe
    def track(self, stats: FailoverStats) -> None:
        """Export ``stats`` (calls, upstream time and errors, info) while it lives."""
        self._tracked[stats] = self._label(stats.name)

    @_safe
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
    f = _declare()
    if m is not None:
        _tracked_samples(m, f)
        _tally_samples(m, f)
        _pool_samples(m, f)
        f["queued"].add_metric((), m._queue)
        f["dropped"].add_metric((), m._dropped)
        f["failed"].add_metric((), m._async_failed)
        f["removed"].add_metric((), m._cleanup_removed)
        _histogram(f["cleanup_seconds"], (), m._cleanup_seconds, always=True)
        if m._cleanup_last is not None:
            f["cleanup_last"].add_metric((), m._cleanup_last)
    return iter(f.values())


def _declare() -> dict[str, Any]:
    from prometheus_client.core import (
        CounterMetricFamily,
        GaugeMetricFamily,
        HistogramMetricFamily,
        InfoMetricFamily,
    )

    def counter(name: str, doc: str, *labels: str) -> Any:
        return CounterMetricFamily(name, doc, labels=labels)

    def gauge(name: str, doc: str, *labels: str) -> Any:
        return GaugeMetricFamily(name, doc, labels=labels)

    def histogram(name: str, doc: str, *labels: str) -> Any:
        return HistogramMetricFamily(name, doc, labels=labels)

    return {
        "calls": counter("failover_calls", "Calls by what the caller got.", "name", "outcome"),
        "upstream": histogram(
            "failover_upstream_seconds", "Time spent in the upstream.", "name", "result"
        ),
        "errors": counter(
            "failover_upstream_errors", "Upstream exceptions by class.", "name", "exception"
        ),
        "info": InfoMetricFamily(
            "failover",
            "A registered failover's settings.",
            labels=("name", "effective_name", "ttl_seconds", "policy", "execution", "store"),
        ),
        "ttl": gauge("failover_ttl_seconds", "A registered failover's time to live.", "name"),
        "writes": counter(
            "failover_writes", "Writes of live results to the store.", "name", "result"
        ),
        "write_seconds": histogram(
            "failover_write_seconds", "Time spent writing live results.", "name"
        ),
        "recoveries": counter(
            "failover_recoveries", "Recoveries after an upstream failure.", "name", "outcome"
        ),
        "partial": counter(
            "failover_recoveries_partial", "Scatter/gather recoveries missing slices.", "name"
        ),
        "recovery_seconds": histogram(
            "failover_recovery_seconds", "Time spent recovering.", "name"
        ),
        "stale_age": histogram(
            "failover_stale_age_seconds", "Age of the values served stale.", "name"
        ),
        "circuit": gauge(
            "failover_circuit_state", "Circuit breaker: 0 closed, 1 half-open, 2 open.", "name"
        ),
        "bulkhead": counter(
            "failover_bulkhead_rejected", "Calls refused by the bulkhead.", "name", "pool"
        ),
        "permits": gauge("failover_bulkhead_permits", "A bulkhead pool's permits.", "pool"),
        "in_use": gauge(
            "failover_bulkhead_permits_in_use", "A bulkhead pool's permits taken now.", "pool"
        ),
        "waiting": gauge(
            "failover_bulkhead_waiting", "Calls of this process waiting for permits.", "pool"
        ),
        "hooks": counter("failover_hook_errors", "Raising on_recovered hooks.", "name", "hook"),
        "queued": gauge("failover_async_writes_queued", "Writes waiting in the queue."),
        "dropped": counter("failover_async_writes_dropped", "Writes discarded at a full queue."),
        "failed": counter("failover_async_writes_failed", "Queued writes the store refused."),
        "removed": counter("failover_cleanup_removed", "Expired entries removed by cleanups."),
        "cleanup_seconds": histogram("failover_cleanup_seconds", "Time spent per cleanup."),
        "cleanup_last": gauge(
            "failover_cleanup_last_run_timestamp_seconds",
            "When the latest cleanup ended (Unix time).",
        ),
    }


def _tally_samples(m: PrometheusMetrics, f: dict[str, Any]) -> None:
    """The samples of what `PrometheusMetrics` counts itself, per ``name`` label."""
    for name, t in [*m._names.items(), (_OTHER, m._other)]:
        for result, n in zip(("ok", "error"), t.writes, strict=True):
            if n:
                f["writes"].add_metric((name, result), n)
        _histogram(f["write_seconds"], (name,), t.write_seconds)
        for outcome, n in zip(RECOVERY_OUTCOMES, t.recoveries, strict=True):
            if n:
                f["recoveries"].add_metric((name, outcome), n)
        _histogram(f["recovery_seconds"], (name,), t.recovery_seconds)
        _histogram(f["stale_age"], (name,), t.stale_age)
        if t.partial:
            f["partial"].add_metric((name,), t.partial)
        circuit = t.circuit
        if circuit is not None and t.circuit_probe is not None:
            try:
                circuit = t.circuit_probe()
            except Exception:  # a shared storage out of reach: its last change stands
                circuit = t.circuit
        if circuit is not None:
            f["circuit"].add_metric((name,), circuit)
        for pool, n in t.bulkhead.items():
            f["bulkhead"].add_metric((name, pool), n)
        if t.hooks:
            f["hooks"].add_metric((name, "on_recovered"), t.hooks)


def _pool_samples(m: PrometheusMetrics, f: dict[str, Any]) -> None:
    """Each pool's permits, in use and waiting, added up per pool name (two engines may declare
    one name on one registry). A pool that cannot be read (its Redis is down) is left out."""
    sums: dict[str, list[int]] = {}
    for pool in list(m._pools):
        try:
            counts = pool.permits, pool.source.in_use(), pool.source.waiting()
        except Exception:  # a shared source unreachable now: its trouble is logged where used
            log.debug("failover: counting the permits of pool %r failed", pool.name, exc_info=True)
            continue
        total = sums.setdefault(pool.name, [0, 0, 0])
        for i, n in enumerate(counts):
            total[i] += n
    for name, (permits, in_use, waiting) in sums.items():
        f["permits"].add_metric((name,), permits)
        f["in_use"].add_metric((name,), in_use)
        f["waiting"].add_metric((name,), waiting)


class _Sum:
    """The tracked statistics of one label, added up."""

    def __init__(self) -> None:
        self.calls = [0, 0, 0]
        self.ok = [0] * (len(UPSTREAM_BUCKETS) + 1)
        self.error = [0] * (len(UPSTREAM_BUCKETS) + 1)
        self.ok_sum = 0.0
        self.error_sum = 0.0
        self.kinds: dict[str, int] = {}

    def add(self, stats: FailoverStats) -> None:
        with stats.lock:  # a consistent copy; the call path never waits on this lock
            calls, ok, error = (
                list(stats.calls),
                list(stats.upstream_ok),
                list(stats.upstream_error),
            )
            ok_sum, error_sum, kinds = (
                stats.upstream_ok_sum,
                stats.upstream_error_sum,
                dict(stats.errors),
            )
        self.calls = [a + b for a, b in zip(self.calls, calls, strict=True)]
        self.ok = [a + b for a, b in zip(self.ok, ok, strict=True)]
        self.error = [a + b for a, b in zip(self.error, error, strict=True)]
        self.ok_sum += ok_sum
        self.error_sum += error_sum
        for kind, n in kinds.items():
            self.kinds[kind] = self.kinds.get(kind, 0) + n


def _tracked_samples(m: PrometheusMetrics, f: dict[str, Any]) -> None:
    """The samples read from the tracked call statistics, summed per label (two engines may
    share a name and a registry)."""
    sums: dict[str, _Sum] = {}
    infos: dict[str, dict[str, str]] = {}
    for stats, label in list(m._tracked.items()):
        sums.setdefault(label, _Sum()).add(stats)
        if label != _OTHER and stats.info:
            infos[label] = stats.info
    for label, t in sums.items():
        for outcome, n in zip(OUTCOMES, t.calls, strict=True):
            f["calls"].add_metric((label, outcome), n)
        f["upstream"].add_metric((label, "ok"), _cumulative(UPSTREAM_BUCKETS, t.ok), t.ok_sum)
        f["upstream"].add_metric(
            (label, "error"), _cumulative(UPSTREAM_BUCKETS, t.error), t.error_sum
        )
        for kind, n in t.kinds.items():
            f["errors"].add_metric((label, kind), n)
    for label, settings in infos.items():
        labels = [settings.get(k, "") for k in ("ttl_seconds", "policy", "execution", "store")]
        f["info"].add_metric((label, settings.get("effective_name", label), *labels), {})
        if settings.get("ttl_seconds"):
            f["ttl"].add_metric((label,), float(settings["ttl_seconds"]))


def _cumulative(bounds: tuple[float, ...], counts: list[int]) -> list[tuple[str, float]]:
    buckets: list[tuple[str, float]] = []
    running = 0
    for bound, n in zip((*bounds, float("inf")), counts, strict=True):
        running += n
        buckets.append(("+Inf" if bound == float("inf") else repr(bound), running))
    return buckets


def _histogram(family: Any, labels: tuple[str, ...], h: _Histogram, always: bool = False) -> None:
    if always or any(h.counts):
        family.add_metric(labels, _cumulative(h.bounds, h.counts), h.total)


def resolve_metrics(setting: Any) -> Metrics:
    """The engine's ``metrics=`` setting as a `Metrics`: ``True`` (default registry), ``False``,
    a `PrometheusMetrics`, any object with the `Metrics` methods, or a ``CollectorRegistry``."""
    if setting is True:
        return PrometheusMetrics.for_registry(None)
    if setting is False or setting is None:
        return NULL_METRICS
    if isinstance(setting, PrometheusMetrics) or type(setting) is NullMetrics:
        return cast(Metrics, setting)
    from prometheus_client import CollectorRegistry

    if isinstance(setting, CollectorRegistry):
        return cast(Metrics, PrometheusMetrics.for_registry(setting))
    missing = [name for name in _METHODS if not callable(getattr(setting, name, None))]
    if not missing:
        return _Guarded(cast(Metrics, setting))
    if len(missing) < len(_METHODS):  # meant as a Metrics, but incomplete: say what is missing
        raise ConfigurationError(
            f"Failover: metrics object {setting!r} lacks {', '.join(missing)}; subclass "
            "failover.metrics.Metrics, whose methods do nothing by default"
        )
    raise ConfigurationError(
        f"Failover: metrics must be a bool, a CollectorRegistry, a PrometheusMetrics or a "
        f"failover.metrics.Metrics, got {setting!r}"
    )


class _Guarded(Metrics):
    """A custom `Metrics` behind `_safe`: its failures are dropped, never raised into a call
    (a raising ``recovered`` would otherwise turn a hit into a miss)."""

    def __init__(self, inner: Metrics) -> None:
        self.inner = inner
        for name in _METHODS:  # instance attributes: they take precedence over the methods
            setattr(self, name, _safe(getattr(inner, name)))

    def __repr__(self) -> str:
        return repr(self.inner)
