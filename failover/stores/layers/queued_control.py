"""The control over entries of an `failover.stores.layers.async_write.AsyncWriteStore`, ordered
with the writes still queued: a write queued before a delete of every entry of a name, of a
tag's entries, or before an ``expire``, never lands after it and undoes it."""

from __future__ import annotations

from collections.abc import Callable

from ..base import FailoverStore, Payload, delete_all, delete_many, delete_tagged, expire
from ..control import fresh_ended
from .write_queue import DELETED, Tombstone, Write, WriteQueue

__all__ = ["QueuedControl"]


class QueuedControl:
    """The queue's side of the control over entries (`AsyncWriteStore` sets the state
    declared here)."""

    inner: FailoverStore
    _q: WriteQueue

    def delete_all(self, name: str) -> int:
        """Remove every entry of ``name``: the queued writes of ``name`` are overtaken by
        deletes (queued after them, so that none lands after this and brings its entry back),
        then the inner store's entries go at once. How many the inner store removed."""
        # The deletes queued before this first: the cancels below queue deletes too, of entries
        # callers still see (a queued write's), which this clear removes and counts.
        self._settle_deletes(lambda w: w[0] == name)
        self._cancel(lambda w: w[0] == name)
        return delete_all(self.inner, name)

    def delete_tagged(self, tag: str) -> int:
        """Remove every entry carrying ``tag``: the queued writes of such entries are overtaken
        by deletes, as in `delete_all`, then the inner store's go. How many it removed."""
        self._settle_deletes(lambda w: True)  # which of them carried the tag is not known here
        self._cancel(lambda w: _tagged(w[2], tag))
        return delete_tagged(self.inner, tag)

    def _cancel(self, which: Callable[[Write], bool]) -> None:
        """Queue a delete behind each pending write ``which`` picks out."""
        q = self._q
        with q.lock:
            doomed: list[Write] = [(w[0], w[1], DELETED) for w in q.pending.values() if which(w)]
        if doomed:
            self._q.submit(doomed)

    def _settle_deletes(self, which: Callable[[Write], bool]) -> None:
        """Make in the inner store the deletes still queued that ``which`` picks out: those
        entries are gone for the callers already, and a clear must not count them among what
        it removed. Each is its key's newest write (a later one would have replaced it), so
        making it now changes nothing the queue would not."""
        q = self._q
        by_name: dict[str, list[str]] = {}
        with q.lock:
            for w in q.pending.values():
                if isinstance(w[2], Tombstone) and which(w):
                    by_name.setdefault(w[0], []).append(w[1])
        for name, keys in by_name.items():
            delete_many(self.inner, name, keys)

    def expire(self, name: str, key: str) -> bool:
        """End the entry's fresh window: a queued write of it is overtaken by the same entry
        flagged ``fresh_ended`` (queued after it: the flag lands last), and the inner store's
        entry is flagged at once. Whether there was an entry (queued or stored)."""
        write = self._q.pending.get((name, key))
        if write is None:
            return expire(self.inner, name, key)
        queued = write[2]
        if isinstance(queued, Tombstone):
            return False  # deleted: the stored entry goes too
        if not queued.fresh_ended:
            self._q.submit([(name, key, fresh_ended(queued))])
        expire(self.inner, name, key)
        return True


def _tagged(value: Payload | Tombstone, tag: str) -> bool:
    """Whether a queued write is of an entry carrying ``tag``."""
    if isinstance(value, Tombstone):
        return False
    tags = value.tags
    return tags is not None and tag in tags
