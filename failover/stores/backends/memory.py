"""`InMemoryStore`: a bounded LRU dictionary in process memory."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

from ...errors import ConfigurationError
from ...payload import Building, ReferentialPayload
from ..base import Capabilities, Payload
from .in_process import FORKS, InProcessEntries

__all__ = ["Entry", "InMemoryStore", "dated", "seconds_of"]

Entry = tuple[
    Any, datetime | float | None, datetime | float | None, bool, Any, str | None, bool, Any, bool
]
"""How the store keeps an entry: its envelope's fields but the name and key (the table's key),
``(payload, as_of, expire_on, up_to_date, cause, label, partial, tags, fresh_ended)``. A tuple
is made in one step, where an envelope takes a step per field: it is made on every success, and
the envelope only on the rarer read. The engine's plain success path (`failover.plain`) keeps
``as_of`` and ``expire_on`` as floats, seconds since the epoch, and a read gives them back as
aware UTC datetimes."""

_new = object.__new__
_at = datetime.fromtimestamp


def dated(e: Entry) -> Entry:
    """Entry ``e`` with its times as aware UTC datetimes: made on its first read, and kept, so
    that the reads of an outage (many, of the same entries) make them once."""
    as_of, expire_on = e[1], e[2]
    return (
        e[0],
        _at(as_of, UTC) if type(as_of) is float else as_of,
        _at(expire_on, UTC) if type(expire_on) is float else expire_on,
        *e[3:],
    )


def seconds_of(t: datetime | float) -> float:
    """An entry's time (not ``None``) in seconds since the epoch, to compare with another."""
    return t if type(t) is float else t.timestamp()  # type: ignore[union-attr]


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
    obj.payload = value
    as_of, expire_on = e[1], e[2]
    obj.as_of = _at(as_of, UTC) if type(as_of) is float else as_of
    obj.expire_on = _at(expire_on, UTC) if type(expire_on) is float else expire_on
    _, _, _, obj.up_to_date, obj.cause, obj.label, obj.partial, obj.tags, obj.fresh_ended = e
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
        FORKS.add(self)  # a new lock in a forked child

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

    def put(self, ident: tuple[str, str], entry: Entry) -> int:
        """`store` of an entry already in the store's form (`Entry`) under ``(name, key)``
        (the engine's plain success path, `failover.plain`, does the same in its own frame)."""
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
            new: Any = entry[1]  # `older`, inlined: this runs on every success
            old: Any = stored[1]
            if (
                new is not None
                and old is not None
                and (new < old if type(new) is type(old) else seconds_of(new) < seconds_of(old))
            ):
                entries[ident] = stored  # the newer one stays
                return 1
            entries[ident] = entry
        finally:
            lock.release()
        return 0

    def store_many(self, payloads: Sequence[Payload]) -> int:
        """Insert or replace several entries; how many a newer stored entry kept out."""
        return sum(self.store(payload) for payload in payloads)

    def find_copy(
        self, name: str, key: str, copy: Callable[[Any], Any] | None = None
    ) -> Payload | None:
        """The entry or ``None`` (a hit counts as a use for the LRU order); its value
        ``copy(value)`` when ``copy`` is given: the copying layer's read (`CopyingStore`), in one
        envelope where a `find` and a copy of its envelope would make two."""
        ident = (name, key)
        entries = self._entries
        lock = self._lock
        lock.acquire()  # as in `put`: this is on every recovery's path
        try:
            found = entries.get(ident)
            if found is None:
                return None
            entries.move_to_end(ident)
            if type(found[1]) is float:  # put by the plain path: its times as datetimes, once
                found = entries[ident] = dated(found)
        finally:
            lock.release()
        obj: Any = _new(Building)  # `_payload`, inlined (its times are datetimes by now)
        obj.name, obj.key = ident
        (
            value,
            obj.as_of,
            obj.expire_on,
            obj.up_to_date,
            obj.cause,
            obj.label,
            obj.partial,
            obj.tags,
            obj.fresh_ended,
        ) = found
        obj.payload = value if copy is None else copy(value)
        obj.__class__ = ReferentialPayload
        built: Payload = obj
        return built

    find = find_copy  # `find(name, key)`: the same read, no copy, no frame between

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
        at = now.timestamp()  # for the entries the plain path stored (float times)
        with self._lock:
            expired = []
            for ident, e in self._entries.items():
                expire_on: Any = e[2]
                if expire_on is not None and expire_on <= (at if type(expire_on) is float else now):
                    expired.append(ident)
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
