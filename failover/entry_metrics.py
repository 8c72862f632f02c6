"""``failover_invalidations_total{name,kind}``: the control over entries, as an observer of the
engine's stream (`failover.events.Observer.invalidated`).

One `EntryMetrics` per registry, shared by the engines on it (a registry refuses a family
twice), as their stores' (`failover.store_metrics`). ``kind`` is ``invalidate``,
``invalidate_all``, ``expire`` or ``tag``; ``name`` the failover's effective name (the name its
entries are stored under), empty for a tag (an invalidation by tag is of every failover; the
tag itself is no label: tags are unbounded). Names past the registry's ``max_names`` fold into
``__other__``, as every failover metric's.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from typing import Any, ClassVar

from .events import Observer
from .metrics.tally import OTHER

__all__ = ["KINDS", "EntryMetrics"]

KINDS = ("invalidate", "invalidate_all", "expire", "tag")
"""The ``kind`` label's values, one per operation of the control over entries."""

_by_registry: dict[int, EntryMetrics] = {}
_lock = threading.Lock()


class EntryMetrics(Observer):
    """Counts the invalidations the engines on one registry were told of.

    Args:
        registry: a `prometheus_client.CollectorRegistry`.
        max_names: distinct ``name`` label values before folding into ``__other__``.
    """

    __slots__ = ("_counts", "_lock", "max_names", "registry")

    safe: ClassVar[bool] = True

    def __init__(self, registry: Any, max_names: int = 1000) -> None:
        self.registry = registry
        self.max_names = max_names
        self._counts: Counter[tuple[str, str]] = Counter()
        self._lock = threading.Lock()
        registry.register(_Collector(self))

    def __repr__(self) -> str:
        return f"EntryMetrics({self.registry!r})"

    @classmethod
    def for_registry(cls, registry: Any, max_names: int = 1000) -> EntryMetrics:
        """The shared instance for ``registry``."""
        with _lock:
            found = _by_registry.get(id(registry))
            if found is None or found.registry is not registry:
                found = _by_registry[id(registry)] = cls(registry, max_names)
            return found

    def invalidated(self, kind: str, name: str | None, tag: str | None, count: int | None) -> None:
        """Count one operation of ``kind`` under ``name`` (empty for a tag)."""
        label = "" if name is None else name
        try:
            with self._lock:
                counts = self._counts
                if (label, kind) not in counts and len({n for n, _ in counts}) >= self.max_names:
                    label = OTHER
                counts[(label, kind)] += 1
        except Exception:  # a metric never breaks an operation
            pass

    def samples(self) -> list[tuple[tuple[str, str], int]]:
        """``((name, kind), count)`` of every operation counted."""
        with self._lock:
            return list(self._counts.items())


class _Collector:
    def __init__(self, metrics: EntryMetrics) -> None:
        self.metrics = metrics

    def describe(self) -> list[Any]:
        return [_family(None)]

    def collect(self) -> Iterator[Any]:
        return iter((_family(self.metrics),))


def _family(m: EntryMetrics | None) -> Any:
    from prometheus_client.core import CounterMetricFamily

    family = CounterMetricFamily(
        "failover_invalidations",
        "Entries invalidated or expired on a caller's request, by operation.",
        labels=["name", "kind"],
    )
    if m is not None:
        for labels, n in m.samples():
            family.add_metric(list(labels), n)
    return family
