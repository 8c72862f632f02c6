"""Counting what the library does. Layers report through the small `Metrics` interface;
`NullMetrics` is the no-op used when metrics are off. Metrics never raise into a call.

`PrometheusMetrics` keeps plain tallies per failover name, updated on the call path without
``prometheus_client`` (whose every ``inc``/``observe`` takes a lock and costs more than the
rest of a metered call), and a custom collector turns them into metric families at scrape time.
The per-call counts (``failover_calls_total``, ``failover_upstream_*``, ``failover_info``) are
read from each failover's `failover.recorder.FailoverStats`, which the engine hands over with
`Metrics.track`.

- ``base``: `Metrics`, `NullMetrics` and the guard that keeps a failing metric out of a call;
- ``tally``: what is counted per name on the call path;
- ``prometheus``: `PrometheusMetrics` and its collector;
- ``families``: the metric families declared; ``samples``: their samples at scrape time;
- ``resolve``: the engine's ``metrics=`` setting.
"""

from .base import NULL_METRICS, Metrics, NullMetrics
from .prometheus import PrometheusMetrics
from .resolve import resolve_metrics

__all__ = [
    "NULL_METRICS",
    "Metrics",
    "NullMetrics",
    "PrometheusMetrics",
    "resolve_metrics",
]
