"""The state of an engine's stores, as their facts tell it, and its Prometheus families.

`StoreStates` observes the engine's stream (`failover.events`, the ``store_state`` fact its
deadline layers tell: `failover.stores.layers.deadline.DeadlineStore.watch`): a store is down
while any of its deadline layers is out. `HealthReport.stores` reads it, and so does
``failover_store_up{store}`` (0 while the store is out: its latest operations, queued writes
included, timed out or were refused at the connection, and its breaker is open), beside
``failover_store_errors_total{store,operation,reason}`` (reason ``timeout``, ``error`` or
``breaker_open``: the layers' counts), read at scrape time.
"""

from __future__ import annotations

import functools
import threading
import weakref
from collections import Counter
from collections.abc import Iterator
from typing import Any, ClassVar

from .events import Events, Observer
from .health import StoreHealth
from .stores.base import walk
from .stores.layers.deadline import DeadlineStore

__all__ = ["StoreMetrics", "StoreStates", "store_label"]

_by_registry: dict[int, StoreMetrics] = {}
_lock = threading.Lock()


def store_label(layer: DeadlineStore) -> str:
    """The ``store`` label of a deadline layer: the kind of the store under it (``sqlstore``,
    ``redisstore``), the same for every engine on that kind of store."""
    below = list(walk(layer))
    return type(below[-1]).__name__.lower()


class StoreStates(Observer):
    """The stores of one engine's store chain as their ``store_state`` facts left them: a
    ``store`` label is down while any of its deadline layers is out.

    Attached to the engine's stream, it has each deadline layer of the chain tell the stream
    its changes (`DeadlineStore.watch`): the layers there then, and those a router opens later
    (a tenant's store), found when the health is read.

    Args:
        store: the engine's store chain.
    """

    __slots__ = ("__weakref__", "_events", "_lock", "_seen", "_sources", "_up", "store", "tracked")

    safe: ClassVar[bool] = True

    def __init__(self, store: object) -> None:
        self.store = store
        self._lock = threading.Lock()
        self._up: weakref.WeakKeyDictionary[object, bool] = weakref.WeakKeyDictionary()
        self._seen: weakref.WeakSet[DeadlineStore] = weakref.WeakSet()  # layers watched
        # Shared dependencies that are not stores but tell their state as one (`watch_source`).
        self._sources: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()
        self._events: Events | None = None
        # What the metrics export: the layers of the chain as it was made.
        self.tracked: list[tuple[DeadlineStore, str]] = []

    def __repr__(self) -> str:
        return f"StoreStates({[label for _, label in self.tracked]!r})"

    def attach(self, events: Events) -> None:
        """Have the chain's deadline layers tell ``events`` their changes."""
        self._events = events
        self.tracked = self.layers()

    def store_state(self, store: str, up: bool, source: object) -> None:
        """``source``, a deadline layer of ``store``, went out, or answers again."""
        with self._lock:
            self._up[source] = up

    def watch_source(self, source: Any, label: str) -> None:
        """Have ``source`` (a `failover.RedisPermits`: ``watch(watcher)``, ``up`` and
        ``errors``), which is not a store of the chain, tell the stream its changes under
        ``store=label``; its record is then read with the stores'."""
        events = self._events
        with self._lock:
            if source in self._sources:
                return  # a pool declared again: watched already
            self._sources[source] = label
        if events is not None:
            source.watch(functools.partial(_tell, events, label, source))

    def layers(self) -> list[tuple[DeadlineStore, str]]:
        """The deadline layers of the chain now (a router's: its tenants' stores open now),
        with their labels; each new one is watched (it tells its state at once if out)."""
        found = [
            (layer, store_label(layer))
            for layer in walk(self.store)
            if isinstance(layer, DeadlineStore)
        ]
        events = self._events
        if events is not None:
            for layer, label in found:
                with self._lock:
                    new = layer not in self._seen
                    self._seen.add(layer)
                if new:
                    layer.watch(functools.partial(_tell, events, label, layer))
        return found

    def states(self, now: bool = True) -> list[tuple[str, bool, Counter[tuple[str, str]]]]:
        """Each deadline layer's label, whether its store is up, and its error counts by
        ``(operation, reason)``: of the chain now, or (``now=False``) as it was made; what a
        layer owes is counted first (`DeadlineStore.settle`)."""
        layers: list[tuple[Any, str]] = [*(self.layers() if now else self.tracked)]
        for layer, _ in layers:
            layer.settle()
        with self._lock:
            layers += list(self._sources.items())
            ups = [self._up.get(layer, True) for layer, _ in layers]
        return [(label, up, layer.errors) for (layer, label), up in zip(layers, ups, strict=True)]

    def health(self) -> list[StoreHealth]:
        """What ``HealthReport.stores`` shows: one per ``store`` label, down when any of its
        layers is."""
        found: dict[str, tuple[bool, Counter[str]]] = {}
        for label, up, counts in self.states():
            was, errors = found.get(label, (True, Counter()))
            for (_, reason), n in list(counts.items()):
                errors[reason] += n
            found[label] = (was and up, errors)
        return [
            StoreHealth(label, "up" if up else "down", dict(errors))
            for label, (up, errors) in found.items()
        ]


def _tell(events: Events, store: str, layer: object, up: bool) -> None:
    events.store_state(store, up, layer)  # read at each change: the stream may rebind it


class StoreMetrics:
    """The engines' stores (their `StoreStates`) and shared dependencies that are not stores,
    exported to one registry while they live.

    Args:
        registry: a `prometheus_client.CollectorRegistry`.
    """

    def __init__(self, registry: Any) -> None:
        self.registry = registry
        self._states: weakref.WeakSet[StoreStates] = weakref.WeakSet()  # the engines' stores
        # Shared dependencies with ``up`` and ``errors`` (`track_source`): an engine's fleet
        # (``store="fleet"``). A `failover.RedisPermits` source tells its state instead
        # (`StoreStates.watch_source`).
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

    def track(self, states: StoreStates) -> None:
        """Export an engine's stores (its `StoreStates`)."""
        self._states.add(states)

    def track_source(self, source: object, label: str) -> None:
        """Export a shared dependency that is not a store (an engine's `failover.fleet.Fleet`)
        as one: its ``up`` and ``errors`` (per operation and reason), under ``store=label``."""
        self._layers[source] = label

    def samples(self) -> tuple[dict[str, int], Counter[tuple[str, str, str]]]:
        """``store -> up`` (down when any engine's breaker on it is open) and the error counts."""
        up: dict[str, int] = {}
        errors: Counter[tuple[str, str, str]] = Counter()
        for states in list(self._states):
            for label, answers, counts in states.states(now=False):
                up[label] = min(up.get(label, 1), int(answers))
                for (operation, reason), n in list(counts.items()):
                    errors[(label, operation, reason)] += n
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
