"""The engine's guards, as its public methods: breakers, bulkheads and their pools (a base of
`Failover`)."""

from __future__ import annotations

import pybreaker

from ..definition import FailoverDefinition
from ..execution import Bulkhead, PermitSource, Pool, Pools
from ..metrics import Metrics
from ..store_metrics import StoreStates
from .wiring import Wiring

__all__ = ["Guards"]


class Guards:
    """The circuit breakers and bulkheads of an engine's failovers, and the shared pools."""

    wiring: Wiring
    pools: Pools
    metrics: Metrics
    stores: StoreStates

    def breaker(self, d: FailoverDefinition) -> pybreaker.CircuitBreaker:
        """The circuit breaker of failover ``d``: its own, or (``breaker=True``) the engine's
        one for its name, made from ``breaker_defaults``; its state changes reach the metrics."""
        return self.wiring.breaker(d)

    def bulkhead(self, d: FailoverDefinition) -> Bulkhead:
        """The bulkhead of failover ``d`` (one per name on this engine): its private pool
        (``max_concurrency``) or the declared pool it names (``bulkhead=``).

        Raises:
            ConfigurationError: ``bulkhead=`` names no declared pool, or one smaller than the
                failover's ``weight``.
        """
        return self.wiring.bulkhead(d)

    def bulkhead_pool(
        self, name: str, permits: int, fair: bool = True, source: PermitSource | None = None
    ) -> Pool:
        """Declare the bulkhead pool ``name``, which failovers share with ``bulkhead=name``.

        Declaring a name again with the same settings returns the same pool.

        Args:
            name: the pool's name.
            permits: permits in all (a call takes its failover's ``weight``).
            fair: waiters are served in arrival order (a newcomer never overtakes them).
            source: where the permits come from: default in-process (`LocalPermits`);
                `failover.RedisPermits` for one pool across every process of a cluster.

        Raises:
            ConfigurationError: a bad setting, or a name declared before with other settings.
        """
        pool = self.pools.declare(name, permits, fair, source)
        label = getattr(pool.source, "store_label", None)  # a shared source's health: a store's
        if isinstance(label, str):  # its changes on the engine's stream, its record the stores'
            self.stores.watch_source(pool.source, label)
        return pool
