"""The engine's ``metrics=`` setting made a `Metrics`."""

from __future__ import annotations

from typing import Any, cast

from ..errors import ConfigurationError
from .base import METHODS, NULL_METRICS, Metrics, NullMetrics, SafeMetrics
from .prometheus import PrometheusMetrics

__all__ = ["resolve_metrics"]


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
    missing = [name for name in METHODS if not callable(getattr(setting, name, None))]
    if not missing:
        return SafeMetrics(cast(Metrics, setting))
    if len(missing) < len(METHODS):  # meant as a Metrics, but incomplete: say what is missing
        raise ConfigurationError(
            f"Failover: metrics object {setting!r} lacks {', '.join(missing)}; subclass "
            "failover.metrics.Metrics, whose methods do nothing by default"
        )
    raise ConfigurationError(
        f"Failover: metrics must be a bool, a CollectorRegistry, a PrometheusMetrics or a "
        f"failover.metrics.Metrics, got {setting!r}"
    )
