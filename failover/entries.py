"""An engine's control over entries: ``.invalidate_all()``, ``engine.invalidate_tag(tag)`` and
``.expire(...)`` all go through `EntryControl`, the one place that changes entries on a
caller's request (a fleet backplane publishes them from here, for the other processes' near
copies). Each is one store operation on the engine's store chain (see
`failover.stores.base.Capabilities`: ``delete_all``, ``delete_tagged``, ``expire``), logged
with what it removed."""

from __future__ import annotations

import logging
from collections.abc import Iterable

from .stores.base import FailoverStore, delete_all, delete_tagged, expire
from .tags import check_tag

__all__ = ["EntryControl"]

log = logging.getLogger("failover")


class EntryControl:
    """The control over the entries of one engine's store chain.

    Args:
        store: the engine's store chain (outermost layer: a tenant router sends each operation
            to the current tenant's store).
    """

    def __init__(self, store: FailoverStore) -> None:
        self.store = store

    def invalidate_all(self, name: str) -> int:
        """Delete every entry of the failover name ``name`` (its effective name); the count."""
        removed = delete_all(self.store, name)
        log.info("failover %r: invalidate_all removed %d entries", name, removed)
        return removed

    def invalidate_tag(self, tag: str) -> int:
        """Delete every entry carrying ``tag``, of every failover; the count.

        Raises:
            ValueError: ``tag`` is not a tag (a string of printable characters, 1 to 200).
            ConfigurationError: the store keeps no tags.
        """
        removed = delete_tagged(self.store, check_tag(tag))
        log.info("failover: invalidate_tag(%r) removed %d entries", tag, removed)
        return removed

    def expire(self, name: str, keys: Iterable[str]) -> int:
        """End the fresh window of the entries ``keys`` of ``name``, keeping them for failing
        over; how many were there."""
        return sum(expire(self.store, name, key) for key in dict.fromkeys(keys))
