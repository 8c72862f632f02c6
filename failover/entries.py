"""An engine's control over entries: ``.invalidate_all()``, ``engine.invalidate_tag(tag)`` and
``.expire(...)`` all go through `EntryControl`, the one place that changes entries on a
caller's request (a fleet backplane publishes them from here, for the other processes' near
copies). Each is one store operation on the engine's store chain (see
`failover.stores.base.Capabilities`: ``delete_all``, ``delete_tagged``, ``expire``), and then a
fact of the engine's stream (`failover.events.Observer.invalidated`), with what it removed:
the logs and the metrics observe it. ``.invalidate()`` deletes through the handler chain and
is told here afterwards (`EntryControl.invalidated`)."""

from __future__ import annotations

from collections.abc import Iterable

from .events import Events
from .stores.base import FailoverStore, delete_all, delete_tagged, expire
from .tags import check_tag

__all__ = ["EntryControl"]


class EntryControl:
    """The control over the entries of one engine's store chain.

    Args:
        store: the engine's store chain (outermost layer: a tenant router sends each operation
            to the current tenant's store).
        events: the engine's stream, told each operation that went through.
    """

    def __init__(self, store: FailoverStore, events: Events | None = None) -> None:
        self.store = store
        self.events = events

    def invalidate_all(self, name: str) -> int:
        """Delete every entry of the failover name ``name`` (its effective name); the count."""
        removed = delete_all(self.store, name)
        self._tell("invalidate_all", name, None, removed)
        return removed

    def invalidate_tag(self, tag: str) -> int:
        """Delete every entry carrying ``tag``, of every failover; the count.

        Raises:
            ValueError: ``tag`` is not a tag (a string of printable characters, 1 to 200).
            ConfigurationError: the store keeps no tags.
        """
        removed = delete_tagged(self.store, check_tag(tag))
        self._tell("tag", None, tag, removed)
        return removed

    def expire(self, name: str, keys: Iterable[str]) -> int:
        """End the fresh window of the entries ``keys`` of ``name``, keeping them for failing
        over; how many were there."""
        found = sum(expire(self.store, name, key) for key in dict.fromkeys(keys))
        self._tell("expire", name, None, found)
        return found

    def invalidated(self, name: str) -> None:
        """A ``.invalidate()`` of the failover name ``name`` deleted its entry (or its slices,
        through the handler chain): told on the stream."""
        self._tell("invalidate", name, None, None)

    def _tell(self, kind: str, name: str | None, tag: str | None, count: int | None) -> None:
        if self.events is not None:  # read at each operation: the stream may rebind it
            self.events.invalidated(kind, name, tag, count)
