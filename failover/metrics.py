"""Counting what the library does. Layers report through the small `Metrics` interface;
`NullMetrics` is the no-op used when metrics are off. Metrics never raise into a call."""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable
from typing import Any, ParamSpec, Protocol, cast

from .errors import ConfigurationError

__all__ = [
    "NULL_METRICS",
    "Metrics",
    "NullMetrics",
    "PrometheusMetrics",
    "resolve_metrics",
]

log = logging.getLogger("failover")
P = ParamSpec("P")


class Metrics(Protocol):
    """What layers report. Every method must be cheap and must never raise.

    The methods do nothing by default: subclass to count only some things.
    """

    def stored(self, name: str, ok: bool, seconds: float) -> None:
        """A store of a live result: ``ok`` or failed."""
        return None

    def recovered(
        self, name: str, outcome: str, seconds: float, stale_age: float | None = None
    ) -> None:
        """A recovery: ``outcome`` is ``recovered``, ``not_recovered`` or ``error``."""
        return None

    def partial(self, name: str) -> None:
        """A scatter/gather recovery that found some slices only."""
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

    def circuit_state(self, name: str, state: int) -> None:
        """A failover's breaker is now ``state``: 0 closed, 1 half-open, 2 open."""
        return None

    def bulkhead_rejected(self, name: str) -> None:
        """A call found no bulkhead permit in time."""
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
            if not _warned:
                _warned.append(True)
                log.warning("failover: updating a metric failed", exc_info=True)

    return wrapper


_warned: list[bool] = []


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
        from prometheus_client import REGISTRY, Counter, Gauge, Histogram

        registry = REGISTRY if registry is None else registry
        self.registry = registry
        self.max_names = max_names
        self._names: set[str] = set()
        self._names_lock = threading.Lock()
        self._children: dict[tuple[Any, str, tuple[str, ...]], Any] = {}
        kw: dict[str, Any] = {"registry": registry}
        self._store = Counter("failover_store", "Stores of live results.", ["name", "result"], **kw)
        self._recover = Counter(
            "failover_recover", "Recoveries after an upstream failure.", ["name", "outcome"], **kw
        )
        self._partial = Counter(
            "failover_recovery_partial", "Scatter/gather recoveries missing slices.", ["name"], **kw
        )
        self._store_seconds = Histogram(
            "failover_store_seconds", "Time spent storing live results.", ["name"], **kw
        )
        self._recover_seconds = Histogram(
            "failover_recover_seconds", "Time spent recovering.", ["name"], **kw
        )
        self._stale_age = Histogram(
            "failover_stale_age_seconds",
            "Age of the values served stale.",
            ["name"],
            buckets=(1, 10, 60, 300, 900, 3600, 4 * 3600, 86400, 7 * 86400, float("inf")),
            **kw,
        )
        self._queue = Gauge("failover_async_store_queue", "Writes waiting in the queue.", **kw)
        self._dropped = Counter(
            "failover_async_store_dropped", "Writes discarded at a full queue.", **kw
        )
        self._failed = Counter(
            "failover_async_store_failed", "Queued writes the store refused.", **kw
        )
        self._cleanup_removed = Counter(
            "failover_cleanup_removed", "Expired entries removed by cleanups.", **kw
        )
        self._cleanup_seconds = Histogram(
            "failover_cleanup_seconds", "Time spent per cleanup.", **kw
        )
        self._circuit = Gauge(
            "failover_circuit_state",
            "Circuit breaker state: 0 closed, 1 half-open, 2 open.",
            ["name"],
            **kw,
        )
        self._rejected = Counter(
            "failover_bulkhead_rejected", "Calls that found no bulkhead permit.", ["name"], **kw
        )

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
        if name in self._names:
            return name
        with self._names_lock:
            if len(self._names) >= self.max_names:
                return _OTHER
            self._names.add(name)
            return name

    def _child(self, metric: Any, name: str, *labels: str) -> Any:
        """``metric.labels(name, *labels)``, cached: ``labels()`` costs more than the update.

        Only names under the cardinality guard are cached, so the cache is bounded too.
        """
        key = (metric, name, labels)
        child = self._children.get(key)
        if child is None:
            label = self._label(name)
            child = metric.labels(label, *labels)
            if label is name:
                self._children[key] = child
        return child

    @_safe
    def stored(self, name: str, ok: bool, seconds: float) -> None:
        """A store of a live result."""
        self._child(self._store, name, "stored" if ok else "failed").inc()
        self._child(self._store_seconds, name).observe(seconds)

    @_safe
    def recovered(
        self, name: str, outcome: str, seconds: float, stale_age: float | None = None
    ) -> None:
        """A recovery and, when a value was served stale, its age."""
        self._child(self._recover, name, outcome).inc()
        self._child(self._recover_seconds, name).observe(seconds)
        if stale_age is not None:
            self._child(self._stale_age, name).observe(stale_age)

    @_safe
    def partial(self, name: str) -> None:
        """A partial scatter/gather recovery."""
        self._child(self._partial, name).inc()

    @_safe
    def async_queue(self, size: int) -> None:
        """The async-writes queue length."""
        self._queue.set(size)

    @_safe
    def async_dropped(self, count: int = 1) -> None:
        """Writes discarded at a full queue."""
        self._dropped.inc(count)

    @_safe
    def async_failed(self, count: int = 1) -> None:
        """Queued writes that failed."""
        self._failed.inc(count)

    @_safe
    def cleanup(self, removed: int, seconds: float) -> None:
        """One cleanup run."""
        self._cleanup_removed.inc(removed)
        self._cleanup_seconds.observe(seconds)

    @_safe
    def circuit_state(self, name: str, state: int) -> None:
        """A breaker's state."""
        self._child(self._circuit, name).set(state)

    @_safe
    def bulkhead_rejected(self, name: str) -> None:
        """A call refused by the bulkhead."""
        self._child(self._rejected, name).inc()


def resolve_metrics(setting: Any) -> Metrics:
    """The engine's ``metrics=`` setting as a `Metrics`: ``True`` (default registry), ``False``,
    a `PrometheusMetrics`, any object with the `Metrics` methods, or a ``CollectorRegistry``."""
    if setting is True:
        return PrometheusMetrics.for_registry(None)
    if setting is False or setting is None:
        return NULL_METRICS
    if isinstance(setting, PrometheusMetrics) or type(setting) is NullMetrics:
        return setting
    from prometheus_client import CollectorRegistry

    if isinstance(setting, CollectorRegistry):
        return PrometheusMetrics.for_registry(setting)
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
