"""Store factories the contract suite runs over. Each later store (SQL, chains) adds its own.

A factory receives the fake clock and a temporary directory and returns a fresh store; the
contract suite closes it at the end.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from failover.crypto import FernetCipher
from failover.stores import (
    AsyncWriteStore,
    CachetoolsStore,
    CopyingStore,
    FailoverStore,
    InMemoryStore,
    MultiTenantStore,
    per_tenant_tables,
)
from failover.stores.sql import SqlStore

from . import postgres

StoreFactory = Callable[[Any, Path], FailoverStore]

FACTORIES: dict[str, StoreFactory] = {
    "memory": lambda clock, tmp: InMemoryStore(),
    "cachetools": lambda clock, tmp: CachetoolsStore(clock=clock),
    "copying(memory)": lambda clock, tmp: CopyingStore(InMemoryStore()),
    "async(memory)": lambda clock, tmp: AsyncWriteStore(InMemoryStore()),
    # A queue of 2 fills at once under the concurrent test: caller_runs and the queue interleave.
    "async(memory, caller_runs)": lambda clock, tmp: AsyncWriteStore(
        InMemoryStore(), queue_size=2, batch_size=1, rejection="caller_runs"
    ),
    "tenant(memory)": lambda clock, tmp: MultiTenantStore(lambda t: InMemoryStore(), lambda: "a"),
    "tenant(copying(async(memory)))": lambda clock, tmp: MultiTenantStore(
        lambda t: CopyingStore(AsyncWriteStore(InMemoryStore())), default_tenant="a"
    ),
    "sql(sqlite)": lambda clock, tmp: SqlStore(f"sqlite:///{tmp / 'store.db'}"),
    "sql(sqlite, fernet)": lambda clock, tmp: SqlStore(
        f"sqlite:///{tmp / 'store.db'}", cipher=FernetCipher(FernetCipher.generate_key())
    ),
    # Skipped, saying why, where the PostgreSQL server binaries are missing.
    "sql(postgresql)": lambda clock, tmp: postgres.pg_store(),
    "async(sql(sqlite))": lambda clock, tmp: AsyncWriteStore(
        SqlStore(f"sqlite:///{tmp / 'store.db'}")
    ),
    "async(sql(postgresql))": lambda clock, tmp: AsyncWriteStore(postgres.pg_store()),
    "tenant(tables(sqlite))": lambda clock, tmp: MultiTenantStore(
        per_tenant_tables(f"sqlite:///{tmp / 'store.db'}"), lambda: "acme"
    ),
}
