"""failover: keep answering with the last good result, marked stale, when an upstream fails.

Quick start::

    import failover

    @failover.failover("country-by-code", ttl="24h")
    def find_country(code: str) -> dict: ...
"""

from .cleanup import CleanupScheduler
from .decorator import AsyncFailoverFunction, FailoverFunction, failover
from .definition import FailoverDefinition
from .engine import Failover, configure, get_engine
from .errors import (
    BulkheadFull,
    ConfigurationError,
    FailoverError,
    SerializationError,
    SplitterError,
    StoreError,
)
from .expiry import ExpiryPolicy, FixedTtl
from .metrics import PrometheusMetrics
from .payload import Referential, ReferentialAware, ReferentialPayload
from .policy import ExceptionPolicy, RecoverContext
from .stores import (
    CachetoolsStore,
    CopyingStore,
    FailoverStore,
    InMemoryStore,
    make_store,
)

__all__ = [
    "AsyncFailoverFunction",
    "BulkheadFull",
    "CachetoolsStore",
    "CleanupScheduler",
    "ConfigurationError",
    "CopyingStore",
    "ExceptionPolicy",
    "ExpiryPolicy",
    "Failover",
    "FailoverDefinition",
    "FailoverError",
    "FailoverFunction",
    "FailoverStore",
    "FixedTtl",
    "InMemoryStore",
    "PrometheusMetrics",
    "RecoverContext",
    "Referential",
    "ReferentialAware",
    "ReferentialPayload",
    "SerializationError",
    "SplitterError",
    "StoreError",
    "configure",
    "failover",
    "get_engine",
    "make_store",
]
