"""The engine, by job: the public `Failover` (failover.py), its registered failovers
(registry.py), their runtimes and execution chains (wiring.py), its upkeep (maintenance.py),
its settings' checks (validation.py) and the process-wide default engine (default.py)."""

from .clock import utcnow
from .default import configure, get_engine, register_default
from .failover import Failover

__all__ = ["Failover", "configure", "get_engine", "register_default", "utcnow"]
