"""The handler chain: what happens around the store on success and on failure.

Each layer wraps an inner one behind the same small `Handler` protocol (``base.py``). The chain,
assembled in ``failover/chain.py``, runs outside-in per call::

    MetricsHandler (metrics.py) -> ScatterGatherHandler (scatter.py) -> DefaultHandler (default.py)
        -> store chain
"""

from .base import Handler, envelope_key, expire_on, key_of
from .default import DefaultHandler
from .metrics import MetricsHandler
from .scatter import ScatterGatherHandler

__all__ = [
    "DefaultHandler",
    "Handler",
    "MetricsHandler",
    "ScatterGatherHandler",
    "envelope_key",
    "expire_on",
    "key_of",
]
