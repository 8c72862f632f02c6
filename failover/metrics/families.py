"""The metric families of `PrometheusMetrics`, declared afresh at each scrape (a custom
collector's families carry that scrape's samples), in the order of the docs' table."""

from __future__ import annotations

from typing import Any

__all__ = ["declare"]


def declare() -> dict[str, Any]:
    """Every family, by its key, with no samples yet."""
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
            "failover_writes",
            "Writes of live results: queued, written, failed, superseded.",
            "name",
            "result",
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
        "refused": counter("failover_refused", "Calls a guard refused, by guard.", "name", "guard"),
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
        "cleanups": counter(
            "failover_cleanups",
            "Scheduled cleanup periods under a fleet: ran here, or skipped (another ran it).",
            "result",
        ),
        "fleet_flights": counter(
            "failover_fleet_flights",
            "Fleet single flights' leaders: led, waited, local (per process), alone.",
            "name",
            "result",
        ),
        "fleet_messages": counter(
            "failover_fleet_messages", "Messages on the fleet's bus, sent or received.", "direction"
        ),
        "fleet_resyncs": counter(
            "failover_fleet_resyncs", "Near copies all dropped after a backplane outage."
        ),
    }
