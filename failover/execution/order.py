"""The guards of a failover, outermost first: the one order that wiring
(`failover.engine.wiring.Wiring.execution`), the definition's description
(`failover.definition.FailoverDefinition.execution`) and the docs read.

A new guard is its own module, which defines its `Kind`, plus its line here.
"""

from __future__ import annotations

from ..definition import FailoverDefinition
from .base import Kind
from .breaker import BREAKER
from .bulkhead import BULKHEAD
from .rate import RATE
from .timeout import TIMEOUT

__all__ = ["ORDER", "Kind", "describe"]

ORDER: tuple[Kind, ...] = (RATE, BULKHEAD, BREAKER, TIMEOUT)
"""Outermost first: a call over the rate takes no permit and reaches no breaker; the soft
timeout, which runs the upstream, is always last."""


def describe(definition: FailoverDefinition) -> str:
    """``definition``'s guards as `FailoverDefinition.execution` shows them, outermost first:
    ``"basic"`` when it has none."""
    return " > ".join(k.shown(definition) for k in ORDER if k.wanted(definition)) or "basic"


FailoverDefinition.describe = describe  # one place knows the guards
