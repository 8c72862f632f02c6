"""Stores and store layers: every one implements `FailoverStore`."""

import typing

from .backends.memory import InMemoryStore
from .backends.ttl import CachetoolsStore
from .base import Capabilities, FailoverStore, browsable, delete_many
from .browsing import Browsable, Page, StoredEntry, Summary
from .factory import make_store
from .layers.async_write import AsyncWriteStore
from .layers.copying import CopyingStore
from .layers.routing import MultiTenantStore
from .layers.tiered import TieredStore
from .schemes import register_scheme

__all__ = [
    "AsyncWriteStore",
    "Browsable",
    "CachetoolsStore",
    "Capabilities",
    "CopyingStore",
    "FailoverStore",
    "InMemoryStore",
    "MultiTenantStore",
    "Page",
    "RedisStore",
    "SqlStore",
    "StoredEntry",
    "Summary",
    "TieredStore",
    "browsable",
    "delete_many",
    "make_store",
    "per_tenant_databases",
    "per_tenant_tables",
    "register_scheme",
]

if typing.TYPE_CHECKING:
    from .backends.redis import RedisStore
    from .backends.sql import SqlStore, per_tenant_databases, per_tenant_tables

# Loaded when first asked for: the SQL ones load SQLAlchemy (a few hundred milliseconds), the
# Redis one needs redis-py (an optional extra).
_LAZY = {
    "SqlStore": "sql",
    "per_tenant_databases": "sql",
    "per_tenant_tables": "sql",
    "RedisStore": "redis",
}


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"{__name__}.backends.{module}"), name)
    globals()[name] = value
    return value
