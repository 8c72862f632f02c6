"""Stores and store layers: every one implements `FailoverStore`."""

import typing

from .async_write import AsyncWriteStore
from .base import FailoverStore
from .copying import CopyingStore
from .factory import make_store
from .memory import InMemoryStore
from .tenant import MultiTenantStore, per_tenant_databases, per_tenant_tables
from .ttl import CachetoolsStore

__all__ = [
    "AsyncWriteStore",
    "CachetoolsStore",
    "CopyingStore",
    "FailoverStore",
    "InMemoryStore",
    "MultiTenantStore",
    "SqlStore",
    "make_store",
    "per_tenant_databases",
    "per_tenant_tables",
]

if typing.TYPE_CHECKING:
    from .sql import SqlStore


def __getattr__(name: str) -> object:
    # SqlStore loads SQLAlchemy, a few hundred milliseconds: only when it is first asked for.
    if name == "SqlStore":
        from .sql import SqlStore

        globals()[name] = SqlStore
        return SqlStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
