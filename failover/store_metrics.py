"""The store's health in a Prometheus registry: ``failover_store_up{store}`` (0 while the store
is out: its latest operations, queued writes included, timed out or were refused at the
connection, and its breaker is open) and
``failover_store_errors_total{store,operation,reason}`` (reason ``timeout``, ``error`` or
``breaker_open``), read at scrape time from the engines' deadline layers
(`failover.stores.layers.deadline.DeadlineStore`)."""

from __future__ import annotations

import threading
import weakref
from collections import Counter
from collections.abc import Iterator
from typing import Any

from .health import StoreHealth
from .stores.base import walk
from .stores.layers.deadline import DeadlineStore

__all__ = ["StoreMetrics", "store_health", "store_label"]

_by_registry: dict[int, StoreMetrics] = {}
_lock = threading.Lock()


def store_label(layer: DeadlineStore) -> str:
    """The ``store`` label of a deadline layer: the kind of the store under it (``sqlstore``,
    ``redisstore``), the same for every engine on that kind of store."""
    below = list(walk(layer))
    return type(below[-1]).__name__.lower()


def store_health(store: object) -> list[StoreHealth]:
    """The health of each deadline layer of the store chain ``store`` (what
    ``HealthReport.stores`` shows), one per ``store`` label, down when any layer's breaker is."""
    found: dict[str, tuple[bool, Counter[str]]] = {}
    for layer in walk(store):
        if isinstance(layer, DeadlineStore):
            label = store_label(layer)
            up, errors = found.get(label, (True, Counter()))
            for (_, reason), n in list(layer.errors.items()):
                errors[reason] += n
            found[label] = (up and layer.up, errors)
    return [
        StoreHealth(label, "up" if up else "down", dict(errors))
        for label, (up, errors) in found.items()
    ]


class StoreMetrics:
    """The deadline layers exported to one registry while they live.

    Args:
        registry: a `prometheus_client.CollectorRegistry`.
    """

    def __init__(self, registry: Any) -> None:
        self.registry = registry
        # Deadline layers, and shared dependencies with ``up`` and ``errors`` (`track_source`):
        # a `failover.RedisPermits` source, an engine's fleet (``store="fleet"``).
        self._layers: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()
        registry.register(_Collector(self))

    @classmethod
    def for_registry(cls, registry: Any) -> StoreMetrics:
        """The shared instance for ``registry`` (a registry refuses the same family twice)."""
        with _lock:
            found = _by_registry.get(id(registry))
            if found is None or found.registry is not registry:
                found = _by_registry[id(registry)] = cls(registry)
            return found

    def track(self, store: object) -> None:
        """Export every deadline layer of the store chain ``store``."""
        for layer in walk(store):
            if isinstance(layer, DeadlineStore):
                self._layers[layer] = store_label(layer)

    def track_source(self, source: object, label: str) -> None:
        """Export a shared dependency that is not a store (a `failover.RedisPermits` source, an
        engine's `failover.fleet.Fleet`) as one: its ``up`` and ``errors`` (per operation and
        reason), under ``store=label``."""
        self._layers[source] = label

    def samples(self) -> tuple[dict[str, int], Counter[tuple[str, str, str]]]:
        """``store -> up`` (down when any engine's breaker on it is open) and the error counts."""
        up: dict[str, int] = {}
        errors: Counter[tuple[str, str, str]] = Counter()
        for layer, label in list(self._layers.items()):
            up[label] = min(up.get(label, 1), int(layer.up))
            for (operation, reason), n in list(layer.errors.items()):
                errors[(label, operation, reason)] += n
        return up, errors


class _Collector:
    def __init__(self, metrics: StoreMetrics) -> None:
        self.metrics = metrics

    def describe(self) -> list[Any]:
        return list(_families(None))

    def collect(self) -> Iterator[Any]:
        return _families(self.metrics)


def _families(m: StoreMetrics | None) -> Iterator[Any]:
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    up = GaugeMetricFamily(
        "failover_store_up",
        "The store answers (0: its latest operations timed out or were refused: it is out).",
        labels=["store"],
    )
    errors = CounterMetricFamily(
        "failover_store_errors",
        "Store operations that failed, timed out, or were skipped by the store breaker.",
        labels=["store", "operation", "reason"],
    )
    if m is not None:
        ups, counts = m.samples()
        for label, value in ups.items():
            up.add_metric([label], value)
        for labels, n in counts.items():
            errors.add_metric(list(labels), n)
    return iter((up, errors))
