"""The samples of a scrape: what `PrometheusMetrics` tallied per name, the bulkhead pools'
permits, and the call statistics of the tracked failovers, added into the declared families."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from ..health import OUTCOMES
from ..recorder import UPSTREAM_BUCKETS
from .tally import OTHER, RECOVERY_OUTCOMES, WRITE_RESULTS, Histogram, Tally

if TYPE_CHECKING:
    from ..health import PoolStats
    from ..recorder import FailoverStats

__all__ = ["cumulative", "histogram", "pool_samples", "tally_samples", "tracked_samples"]

log = logging.getLogger("failover.metrics")


def tally_samples(f: dict[str, Any], tallies: Iterable[tuple[str, Tally]]) -> None:
    """The samples of what `PrometheusMetrics` counts itself, per ``name`` label."""
    for name, t in tallies:
        writes, write_seconds = t.written()
        for result, n in zip(WRITE_RESULTS, writes, strict=True):
            if n:
                f["writes"].add_metric((name, result), n)
        histogram(f["write_seconds"], (name,), write_seconds)
        for outcome, n in zip(RECOVERY_OUTCOMES, t.recoveries, strict=True):
            if n:
                f["recoveries"].add_metric((name, outcome), n)
        histogram(f["recovery_seconds"], (name,), t.recovery_seconds)
        histogram(f["stale_age"], (name,), t.stale_age)
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
        guards: dict[str, int] = {}
        for (guard, pool), n in list(t.refused.items()):
            guards[guard] = guards.get(guard, 0) + n
            if guard == "bulkhead":  # the same count, by pool, for the dashboards of old
                f["bulkhead"].add_metric((name, pool), n)
        for guard, n in guards.items():
            f["refused"].add_metric((name, guard), n)
        if t.hooks:
            f["hooks"].add_metric((name, "on_recovered"), t.hooks)


def pool_samples(f: dict[str, Any], pools: Iterable[PoolStats]) -> None:
    """Each pool's permits, in use and waiting, added up per pool name (two engines may declare
    one name on one registry). A pool that cannot be read (its Redis is down) is left out."""
    sums: dict[str, list[int]] = {}
    for pool in pools:
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


class Sum:
    """The tracked statistics of one label, added up."""

    def __init__(self) -> None:
        self.calls = [0] * len(OUTCOMES)
        self.ok = [0] * (len(UPSTREAM_BUCKETS) + 1)
        self.error = [0] * (len(UPSTREAM_BUCKETS) + 1)
        self.ok_sum = 0.0
        self.error_sum = 0.0
        self.kinds: dict[str, int] = {}

    def add(self, stats: FailoverStats) -> None:
        """Add ``stats``, copied under its lock."""
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


def tracked_samples(f: dict[str, Any], tracked: Iterable[tuple[FailoverStats, str]]) -> None:
    """The samples read from the tracked call statistics, summed per label (two engines may
    share a name and a registry)."""
    sums: dict[str, Sum] = {}
    infos: dict[str, dict[str, str]] = {}
    for stats, label in tracked:
        sums.setdefault(label, Sum()).add(stats)
        if label != OTHER and stats.info:
            infos[label] = stats.info
    for label, t in sums.items():
        for outcome, n in zip(OUTCOMES, t.calls, strict=True):
            f["calls"].add_metric((label, outcome), n)
        f["upstream"].add_metric((label, "ok"), cumulative(UPSTREAM_BUCKETS, t.ok), t.ok_sum)
        f["upstream"].add_metric(
            (label, "error"), cumulative(UPSTREAM_BUCKETS, t.error), t.error_sum
        )
        for kind, n in t.kinds.items():
            f["errors"].add_metric((label, kind), n)
    for label, settings in infos.items():
        labels = [settings.get(k, "") for k in ("ttl_seconds", "policy", "execution", "store")]
        f["info"].add_metric((label, settings.get("effective_name", label), *labels), {})
        if settings.get("ttl_seconds"):
            f["ttl"].add_metric((label,), float(settings["ttl_seconds"]))


def cumulative(bounds: tuple[float, ...], counts: list[int]) -> list[tuple[str, float]]:
    """``counts`` per bucket as the cumulative buckets Prometheus expects."""
    buckets: list[tuple[str, float]] = []
    running = 0
    for bound, n in zip((*bounds, float("inf")), counts, strict=True):
        running += n
        buckets.append(("+Inf" if bound == float("inf") else repr(bound), running))
    return buckets


def histogram(family: Any, labels: tuple[str, ...], h: Histogram, always: bool = False) -> None:
    """Add ``h`` to ``family`` under ``labels``, when it has observations (or ``always``)."""
    if always or any(h.counts):
        family.add_metric(labels, cumulative(h.bounds, h.counts), h.total)
