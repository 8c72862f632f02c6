"""The handler chain: what happens around the store on success and on failure.

Each layer wraps an inner one behind the same small `Handler` protocol (``base.py``). The chain,
assembled in ``failover/chain.py``, runs outside-in per call::

    ScatterGatherHandler (scatter.py) -> DefaultHandler (default.py) -> store chain

What the layers do is observed by the core's event stream (``failover/events.py``), not by a
layer of its own.
"""

from .base import Handler, Partial, Superseded, envelope_key, expire_on, key_of
from .default import DefaultHandler
from .scatter import ScatterGatherHandler

__all__ = [
    "DefaultHandler",
    "Handler",
    "Partial",
    "ScatterGatherHandler",
    "Superseded",
    "envelope_key",
    "expire_on",
    "key_of",
]
