"""The control over entries of a `failover.stores.layers.tiered.TieredStore`: each operation
reaches both tiers, the near one under the lock its refills take, counted as a delete so that
a refill read before it never undoes it. Under a fleet, the other processes are told (their
near copies go: the fleet's backplane) once the far store took the operation."""

from __future__ import annotations

import threading
from typing import Any

from ..base import FailoverStore, delete_all, delete_tagged, expire, keeps_tags

__all__ = ["TieredControl"]


class TieredControl:
    """Both tiers' control over entries (`TieredStore` sets the state declared here)."""

    near: FailoverStore
    far: FailoverStore
    _lock: threading.Lock
    _deletes: int
    _peers: Any = None  # the fleet's backplane, for this store (`CoherentNear.cohere`)

    def delete_all(self, name: str) -> int:
        """Remove every entry of ``name`` from both tiers; the far store's count."""
        with self._lock:
            self._deletes += 1
            delete_all(self.near, name)
        removed = delete_all(self.far, name)
        if self._peers is not None:
            self._peers.cleared(name)
        return removed

    @property
    def keeps_tags(self) -> bool:
        """Whether both tiers keep tags."""
        return keeps_tags(self.near) and keeps_tags(self.far)

    def delete_tagged(self, tag: str) -> int:
        """Remove every entry carrying ``tag`` from both tiers; the far store's count."""
        with self._lock:
            self._deletes += 1
            delete_tagged(self.near, tag)
        removed = delete_tagged(self.far, tag)
        if self._peers is not None:
            self._peers.tagged([tag])
        return removed

    def expire(self, name: str, key: str) -> bool:
        """End the entry's fresh window in both tiers; whether either had it."""
        with self._lock:
            self._deletes += 1  # a refill read before must not bring back the fresh entry
            near = expire(self.near, name, key)
        found = expire(self.far, name, key) or near
        if self._peers is not None:
            self._peers.expired(name, [key])
        return found
