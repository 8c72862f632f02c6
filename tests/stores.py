"""Store factories the contract suite runs over. Each later store (SQL, chains) adds its own.

A factory receives the fake clock and a temporary directory and returns a fresh store; the
contract suite closes it at the end.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from failover.stores import CachetoolsStore, CopyingStore, FailoverStore, InMemoryStore

StoreFactory = Callable[[Any, Path], FailoverStore]

FACTORIES: dict[str, StoreFactory] = {
    "memory": lambda clock, tmp: InMemoryStore(),
    "cachetools": lambda clock, tmp: CachetoolsStore(clock=clock),
    "copying(memory)": lambda clock, tmp: CopyingStore(InMemoryStore()),
}
