"""`InMemoryStore`: a bounded LRU dictionary in process memory."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import Any

from ...errors import ConfigurationError
from ...payload import Building, ReferentialPayload
from ..base import Capabilities, Payload
from .in_process import InProcessEntries

__all__ = ["Entry", "InMemoryStore"]

Entry = tuple[Any, datetime | None, datetime | None, bool, Any, str | None, bool, Any, bool]
"""How the store keeps an entry: its envelope's fields but the name and key (the table's key),
``(payload, as_of, expire_on, up_to_date, cause, label, partial, tags, fresh_ended)``. A tuple
is made in one step, where an envelope takes a step per field: it is made on every success, and
the envelope only on the rarer read."""

_new = object.__new__


def _entry(p: Payload) -> Entry:
    return (
        p.payload,
        p.as_of,
        p.expire_on,
        p.up_to_date,
        p.cause,
        p.label,
        p.partial,
        p.tags,
        p.fresh_ended,
    )


def _payload(ident: tuple[str, str], e: Entry, value: Any) -> Payload:
    """The envelope of entry ``e`` with ``value`` as its payload (``e``'s own, or a copy)."""
    obj: Any = _new(Building)  # `envelope`, inlined: every read builds one
    obj.name, obj.key = ident
    (
        _,
        obj.as_of,
        obj.expire_on,
        obj.up_to_date,
        obj.cause,
        obj.label,
        obj.partial,
        obj.tags,
        obj.fresh_ended,
    ) = e
    obj.payload = value
    obj.__class__ = ReferentialPayload
    built: Payload = obj
    return built


class InMemoryStore(InProcessEntries, Capabilities):
    """Entries in process memory; past ``max_entries`` the least recently used leaves.

    Args:
        max_entries: the cap (``0``: unbounded).
        copy: an engine copies what it stores here and what it reads back (the default), so
            that a caller changing a result changes nothing stored. ``False``: callers share
            the stored objects, as with ``functools.lru_cache`` or cachetools; the fastest
            answers (a ``fresh_for`` hit costs about half), for results nobody changes.
    """

    does_io = False
    browsable = True
    keeps_tags = True

    def __init__(self, max_entries: int = 10_000, copy: bool = True) -> None:
        if not isinstance(max_entries, int) or max_entries < 0:
            raise ConfigurationError(
                f"InMemoryStore: max_entries must be an int >= 0, got {max_entries!r}"
            )
        if not isinstance(copy, bool):
            raise ConfigurationError(f"InMemoryStore: copy must be True or False, got {copy!r}")
        self.max_entries = max_entries
        self.copy = copy
        self._entries: OrderedDict[tuple[str, str], Entry] = OrderedDict()
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        shared = "" if self.copy else ", copy=False"
        return f"InMemoryStore(max_entries={self.max_entries}{shared})"

    @property
    def shares_results(self) -> bool:
        """With ``copy=False``: callers share the stored objects (no copying layer)."""
        return not self.copy

    def __len__(self) -> int:
        return len(self._entries)

    def store(self, payload: Payload) -> int:
        """Insert or replace one entry, evicting the least recently used past the cap; 1 (not
        written) when the stored entry is newer."""
        return self.put((payload.name, payload.key), _entry(payload))

    def table(self) -> tuple[OrderedDict[tuple[str, str], Entry], threading.Lock, int]:
        """The entries, their lock and the cap, for the engine's plain success path
        (`failover.plain`), which puts an entry as `put` does, in its own frame."""
        return self._entries, self._lock, self.max_entries

    def put(self, ident: tuple[str, str], entry: Entry) -> int:
        """`store` of an entry already in the store's form (`Entry`) under ``(name, key)``:
        the engine's plain success path (`failover.plain`) makes it without an envelope."""
        entries = self._entries
        lock = self._lock
        lock.acquire()  # not `with`: half the cost, and this is on every success's path
        try:
            # Taken out and put back last: the LRU move in two table steps, not three.
            stored = entries.pop(ident, None)
            if stored is None:
                entries[ident] = entry
                if self.max_entries and len(entries) > self.max_entries:
                    entries.popitem(last=False)
                return 0
            new, old = entry[1], stored[1]  # `older`, inlined: this runs on every success
            if new is not None and old is not None and new < old:
                entries[ident] = stored  # the newer one stays
                return 1
            entries[ident] = entry
        finally:
            lock.release()
        return 0

    def store_many(self, payloads: Sequence[Payload]) -> int:
        """Insert or replace several entries; how many a newer stored entry kept out."""
        return sum(self.store(payload) for payload in payloads)

    def find(self, name: str, key: str) -> Payload | None:
        """The entry or ``None``; a hit counts as a use for the LRU order."""
        ident = (name, key)
        entries = self._entries
        lock = self._lock
        lock.acquire()  # as in `put`: this is on every recovery's path
        try:
            found = entries.get(ident)
            if found is None:
                return None
            entries.move_to_end(ident)
        finally:
            lock.release()
        return _payload(ident, found, found[0])

    def find_copy(self, name: str, key: str, copy: Callable[[Any], Any]) -> Payload | None:
        """`find`, its value ``copy(value)``: the copying layer's read (`CopyingStore`), in one
        envelope where a `find` and a copy of its envelope make two."""
        ident = (name, key)
        entries = self._entries
        lock = self._lock
        lock.acquire()
        try:
            found = entries.get(ident)
            if found is None:
                return None
            entries.move_to_end(ident)
        finally:
            lock.release()
        obj: Any = _new(Building)  # `_payload`, inlined: the frame every recovery would add
        obj.name, obj.key = ident
        (
            _,
            obj.as_of,
            obj.expire_on,
            obj.up_to_date,
            obj.cause,
            obj.label,
            obj.partial,
            obj.tags,
            obj.fresh_ended,
        ) = found
        obj.payload = copy(found[0])
        obj.__class__ = ReferentialPayload
        built: Payload = obj
        return built

    def find_many(self, name: str, keys: Iterable[str]) -> dict[str, Payload]:
        """The entries found among ``keys``."""
        found = {}
        for key in keys:
            payload = self.find(name, key)
            if payload is not None:
                found[key] = payload
        return found

    def find_all(self, name: str) -> list[Payload]:
        """Every entry of ``name``."""
        with self._lock:
            found = [(i, e) for i, e in self._entries.items() if i[0] == name]
        return [_payload(i, e, e[0]) for i, e in found]

    def clean_by_expiry(self, now: datetime) -> int:
        """Remove expired entries; return the count."""
        with self._lock:
            expired = [
                ident for ident, e in self._entries.items() if e[2] is not None and e[2] <= now
            ]
            for ident in expired:
                del self._entries[ident]
            return len(expired)

    def delete_tagged(self, tag: str) -> int:
        """Remove every entry carrying ``tag``, of every name; how many there were."""
        with self._lock:
            entries = self._entries
            tagged = [i for i, e in entries.items() if e[7] and tag in e[7]]
            for ident in tagged:
                del entries[ident]
            return len(tagged)

    def expire(self, name: str, key: str) -> bool:
        """End the entry's fresh window in place (``fresh_ended``); whether there was one."""
        with self._lock:
            found = self._entries.get((name, key))
            if found is None:
                return False
            if not found[8]:
                self._entries[name, key] = (*found[:4], None, found[5], False, found[7], True)
            return True

    def names(self) -> list[str]:
        """Every name that has entries, sorted."""
        with self._lock:
            return sorted({n for n, _ in self._entries})
