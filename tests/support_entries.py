"""Engines on the real stores for the tests of issue 31 (throttle, adaptive durations, switches,
conditional refresh): process memory, a SQLite file, the session's PostgreSQL and redis-server,
each on the fake clock, with synchronous writes (what a test reads back was written)."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from failover import Failover

from . import postgres, stores

STORES = ["memory", "sqlite", "postgresql", "redis"]
"""The stores `real` (a fixture of conftest.py) runs on."""


def make_engine(kind: str, clock: Any, tmp_path: Path, **settings: Any) -> Failover:
    """An engine on store ``kind`` (skips when its server is missing)."""
    store: Any
    if kind == "memory":
        store = "memory://"
    elif kind == "sqlite":
        store = f"sqlite:///{tmp_path / 'entries.db'}"
    elif kind == "postgresql":
        store = postgres.pg_store()
    else:
        store = stores.redis_store(clock)
    settings.setdefault("metrics", False)
    return Failover(store, clock=clock, async_writes=False, **settings)


def unique(name: str) -> str:
    """A failover name of its own (the PostgreSQL and Redis stores outlive a test)."""
    return f"{name}-{uuid.uuid4().hex[:8]}"
