"""Engines on the real stores for the tests of issue 31 (throttle, adaptive durations, switches,
conditional refresh): process memory, cachetools, a SQLite file, the session's PostgreSQL,
redis-server and Redis Cluster, a tiered store (memory over SQLite) and a store per tenant, each
on the fake clock, with synchronous writes (what a test reads back was written)."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from failover import Failover
from failover.stores import (
    CachetoolsStore,
    InMemoryStore,
    MultiTenantStore,
    TieredStore,
    per_tenant_tables,
)
from failover.stores.backends.sql import SqlStore

from . import postgres, redis_ha, stores

STORES = [
    "memory",
    "cachetools",
    "sqlite",
    "postgresql",
    "redis",
    "redis-cluster",
    "tiered",
    "tenant",
]
"""The stores `real` (a fixture of conftest.py) runs on."""


def make_engine(kind: str, clock: Any, tmp_path: Path, **settings: Any) -> Failover:
    """An engine on store ``kind`` (skips when its server is missing)."""
    store: Any
    if kind == "memory":
        store = "memory://"
    elif kind == "cachetools":
        store = CachetoolsStore(clock=clock)
    elif kind == "tiered":  # a near copy in memory over a SQLite file
        store = TieredStore(InMemoryStore(), SqlStore(f"sqlite:///{tmp_path / 'far.db'}"))
    elif kind == "tenant":  # a store per tenant, the caller's resolved by the store
        store = MultiTenantStore(
            per_tenant_tables(f"sqlite:///{tmp_path / 'tenants.db'}"), lambda: "acme"
        )
    elif kind == "sqlite":
        store = f"sqlite:///{tmp_path / 'entries.db'}"
    elif kind == "postgresql":
        store = postgres.pg_store()
    elif kind == "redis-cluster":  # the session's cluster: 3 masters, 3 replicas
        store = stores.redis_store(clock, url=redis_ha.cluster().url)
    else:
        store = stores.redis_store(clock)
    settings.setdefault("metrics", False)
    # The entries are tested, not the deadline: a loaded host's write (a cluster's first, which
    # loads its script on every master) may take longer than the default 0.5 s.
    settings.setdefault("store_timeout", 10)
    return Failover(store, clock=clock, async_writes=False, **settings)


def unique(name: str) -> str:
    """A failover name of its own (the PostgreSQL and Redis stores outlive a test)."""
    return f"{name}-{uuid.uuid4().hex[:8]}"
