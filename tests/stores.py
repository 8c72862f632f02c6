"""Store factories the contract suite runs over. Each later store (SQL, chains) adds its own.

A factory receives the fake clock and a temporary directory and returns a fresh store; the
contract suite closes it at the end.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from failover.serialization.crypto import FernetCipher
from failover.stores import (
    AsyncWriteStore,
    CachetoolsStore,
    CopyingStore,
    FailoverStore,
    InMemoryStore,
    MultiTenantStore,
    TieredStore,
    per_tenant_tables,
)
from failover.stores.backends.sql import SqlStore

from . import pgbouncer, postgres, redis_ha, redis_server

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


def redis_store(clock: Any, **kwargs: Any) -> FailoverStore:
    """A `RedisStore` on the session's server, under a key prefix of its own; skips the test
    where ``redis-server`` is missing."""
    from failover.stores.backends.redis import RedisStore

    kwargs.setdefault("prefix", redis_server.unique_prefix())
    url = kwargs.pop("url", None) or redis_server.server().url
    return RedisStore(url, clock=clock, **kwargs)


def redis_tenants(clock: Any) -> FailoverStore:
    from failover.stores.backends.redis import RedisStore

    factory = RedisStore.per_tenant(
        redis_server.server().url, prefix=redis_server.unique_prefix(), clock=clock
    )
    return MultiTenantStore(factory, lambda: "acme")


FACTORIES.update(
    {
        # Skipped, saying why, where redis-server is missing.
        "redis": lambda clock, tmp: redis_store(clock),
        "redis(fernet)": lambda clock, tmp: redis_store(
            clock, cipher=FernetCipher(FernetCipher.generate_key())
        ),
        "async(redis)": lambda clock, tmp: AsyncWriteStore(redis_store(clock)),
        "tenant(redis)": lambda clock, tmp: redis_tenants(clock),
        "tiered(memory, memory)": lambda clock, tmp: TieredStore(InMemoryStore(), InMemoryStore()),
        "tiered(cachetools, redis)": lambda clock, tmp: TieredStore(
            CachetoolsStore(clock=clock), redis_store(clock)
        ),
        "tiered(memory, sql(sqlite))": lambda clock, tmp: TieredStore(
            InMemoryStore(), SqlStore(f"sqlite:///{tmp / 'store.db'}")
        ),
    }
)

FACTORIES.update(
    {
        # The session's Redis Cluster (3 masters, 3 replicas), Sentinel set, and PgBouncer in
        # transaction mode in front of the session's PostgreSQL (tests/redis_ha.py,
        # tests/pgbouncer.py); skipped, saying why, where their binaries are missing.
        "redis(cluster)": lambda clock, tmp: redis_store(clock, url=redis_ha.cluster().url),
        "redis(sentinel)": lambda clock, tmp: redis_store(clock, url=redis_ha.sentinels().url),
        "sql(pgbouncer)": lambda clock, tmp: postgres.pg_store(engine=pgbouncer.engine()),
    }
)

EXPIRED_BY_THE_SERVER = {
    "redis(cluster)",
    "redis(sentinel)",
    "redis",
    "redis(fernet)",
    "async(redis)",
    "tenant(redis)",
    "tiered(cachetools, redis)",  # counts what its far store removed
}
"""Stores whose entries leave when Redis's clock, not the test's fake one, reaches their
``expire_on``: moving the fake clock on expires nothing there, and cleaning has nothing to do."""
