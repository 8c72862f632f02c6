"""failover: keep answering with the last good result, marked stale, when an upstream fails.

Quick start::

    import failover

    @failover.failover("country-by-code", ttl="24h")
    def find_country(code: str) -> dict: ...
"""

import logging
import typing

from . import asgi as asgi  # submodules, reached as failover.asgi, failover.http...
from . import http as http
from . import served as served
from . import stores
from .cleanup import CleanupScheduler
from .context import RecoverContext
from .decorator import AsyncFailoverFunction, FailoverFunction, failover
from .definition import ExpiryPolicy, FailoverDefinition
from .engine import Failover, configure, get_engine
from .errors import (
    BulkheadFull,
    ConfigurationError,
    FailoverError,
    NothingToRenew,
    PartialWrite,
    RateLimited,
    SerializationError,
    SoftTimeoutError,
    SplitterError,
    StoreError,
    Throttled,
)
from .execution import LocalPermits, PermitSource
from .expiry import FixedTtl
from .metrics import PrometheusMetrics
from .payload import Referential, ReferentialAware, ReferentialPayload
from .policy import ExceptionPolicy
from .scatter import DictSplitter, ListSplitter, PayloadSplitter, StoreContext
from .serialization.crypto import FernetCipher
from .serialization.json_codec import JsonCodec
from .serialization.pickle_codec import PickleCodec
from .stores import (
    CachetoolsStore,
    CopyingStore,
    FailoverStore,
    InMemoryStore,
    TieredStore,
    make_store,
)
from .switches import disabled, refreshing
from .tenant import current_tenant, tenant

__all__ = [
    "AsyncFailoverFunction",
    "BulkheadFull",
    "CachetoolsStore",
    "CleanupScheduler",
    "ConfigurationError",
    "CopyingStore",
    "DictSplitter",
    "ExceptionPolicy",
    "ExpiryPolicy",
    "Failover",
    "FailoverDefinition",
    "FailoverError",
    "FailoverFunction",
    "FailoverStore",
    "FernetCipher",
    "FixedTtl",
    "InMemoryStore",
    "JsonCodec",
    "ListSplitter",
    "LocalPermits",
    "NotModified",
    "NothingToRenew",
    "PartialWrite",
    "PayloadSplitter",
    "PermitSource",
    "PickleCodec",
    "PrometheusMetrics",
    "RateLimited",
    "RecoverContext",
    "RedisPermits",
    "RedisStore",
    "Referential",
    "ReferentialAware",
    "ReferentialPayload",
    "SerializationError",
    "SoftTimeoutError",
    "SplitterError",
    "SqlStore",
    "StoreContext",
    "StoreError",
    "Throttled",
    "TieredStore",
    "configure",
    "current_tenant",
    "disabled",
    "failover",
    "get_engine",
    "make_store",
    "refreshing",
    "stale_entry",
    "tenant",
]

# The library's loggers ("failover", "failover.core", ...) print nothing unless the
# application configures logging (the convention for libraries).
logging.getLogger(__name__).addHandler(logging.NullHandler())

if typing.TYPE_CHECKING:
    from .conditional import NotModified, stale_entry
    from .execution.redis_permits import RedisPermits
    from .stores.backends.redis import RedisStore
    from .stores.backends.sql import SqlStore


def __getattr__(name: str) -> object:
    # Lazy, as in failover.stores: SqlStore loads SQLAlchemy, RedisStore needs redis-py.
    if name in ("RedisStore", "SqlStore"):
        value = getattr(stores, name)
        globals()[name] = value
        return value
    if name in ("NotModified", "stale_entry"):
        # Named, conditional refresh is armed: from then on each call's upstream knows its call
        # (a context variable per call, which no process that does not use it pays for).
        from . import conditional
        from .switches import arm_conditional

        arm_conditional()
        value = getattr(conditional, name)
        globals()[name] = value
        return value
    if name == "RedisPermits":  # needs redis-py, as RedisStore does
        from .execution.redis_permits import RedisPermits

        globals()[name] = RedisPermits
        return RedisPermits
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
