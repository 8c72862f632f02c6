"""The guards of a failover, outermost first: the one order that wiring
(`failover.engine.wiring.Wiring.execution`), the definition's description
(`failover.definition.FailoverDefinition.execution`) and the docs read.

A new guard is its own module, which defines its `Kind`, plus its line here.
"""

from __future__ import annotations

from .base import Kind
from .breaker import BREAKER
from .bulkhead import BULKHEAD
from .timeout import TIMEOUT

__all__ = ["ORDER", "Kind"]

ORDER: tuple[Kind, ...] = (BULKHEAD, BREAKER, TIMEOUT)
"""Outermost first; the soft timeout, which runs the upstream, is always last."""
