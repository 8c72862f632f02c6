"""`CopyingStore`: isolation between what callers hold and what is stored."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any, cast

from ...payload import Building, ReferentialPayload
from ..backends.memory import InMemoryStore
from ..base import (
    FailoverStore,
    Payload,
    as_async,
    delete_many,
    native_async,
    reads_fresh,
)
from ..browsing import BrowsingLayer
from ..health_rows import HealthRowsLayer
from ..layer import Layer

__all__ = ["CopyingStore", "copied", "copy_value", "deep_copy"]

_IMMUTABLE = frozenset({str, int, float, bool, bytes, type(None), complex})
_MAX_DEPTH = 64
_new = object.__new__
# Frozen dataclasses, by type: their field names (``None``: the type is not one).
_FROZEN: dict[type, tuple[str, ...] | None] = {}


class _TooDeep(Exception):
    pass


def _frozen_fields(tp: type) -> tuple[str, ...] | None:
    """The field names of a frozen dataclass declared as ``tp`` itself, else ``None`` (a
    subclass may add mutable attributes of its own)."""
    try:
        return _FROZEN[tp]
    except KeyError:
        pass
    params = tp.__dict__.get("__dataclass_params__")
    names = None
    if params is not None and params.frozen and dataclasses.is_dataclass(tp):
        names = tuple(f.name for f in dataclasses.fields(tp))
    if len(_FROZEN) < 1_024:  # a bounded memo: types made at run time cannot fill memory
        _FROZEN[tp] = names
    return names


def _copy(value: Any, depth: int) -> Any:
    """A deep copy of ``value``; ``value`` itself when nothing in it can be changed (scalars,
    tuples and frozen dataclasses of such), so that an immutable result costs no copy."""
    tp = type(value)
    if tp in _IMMUTABLE:
        return value
    if depth > _MAX_DEPTH:
        raise _TooDeep
    if tp is dict:
        # One C-level copy, then only the mutable values copied again: a dict of scalars and
        # flat lists (the commonest payload) costs no call per value.
        out = value.copy()
        for k, v in value.items():
            t = type(v)
            if t in _IMMUTABLE:
                continue
            if t is list and _IMMUTABLE.issuperset(map(type, v)):
                out[k] = v.copy()
            else:
                c = _copy(v, depth + 1)
                if c is not v:
                    out[k] = c
        return out
    if tp is list:
        if _IMMUTABLE.issuperset(map(type, value)):
            return value.copy()
        return [_copy(v, depth + 1) for v in value]
    if tp is tuple:
        if _IMMUTABLE.issuperset(map(type, value)):
            return value  # immutable all the way down
        items = [_copy(v, depth + 1) for v in value]
        if all(c is v for c, v in zip(items, value, strict=True)):
            return value
        return tuple(items)
    names = _frozen_fields(tp)
    if names is not None:
        for name in names:
            v = getattr(value, name)
            if _copy(v, depth + 1) is not v:
                break  # something mutable inside: copied as a whole
        else:
            return value
    return copy.deepcopy(value)


def deep_copy(value: Any) -> Any:
    """A deep copy, several times faster than `copy.deepcopy` on JSON-like values; ``value``
    itself when it is immutable all the way down (scalars, and tuples and frozen dataclasses
    of immutable values).

    Plain dicts, lists and tuples are copied directly; anything else, and structures deep enough
    to hold a cycle, go through `copy.deepcopy`.
    """
    try:
        return _copy(value, 0)
    except _TooDeep:
        return copy.deepcopy(value)


def copy_value(value: Any) -> Any:
    """`deep_copy` with the commonest result's branch (a dict of scalars and flat lists) in
    this frame: what every store and every recovery of a copying store runs."""
    if type(value) is not dict:
        return deep_copy(value)
    out = value.copy()
    try:
        for k, v in out.items():
            t = type(v)
            if t in _IMMUTABLE:
                continue
            if t is list and _IMMUTABLE.issuperset(map(type, v)):
                out[k] = v.copy()  # a value replaced, no key added: the loop goes on
            else:
                c = _copy(v, 1)
                if c is not v:
                    out[k] = c
    except _TooDeep:
        return copy.deepcopy(value)
    return out


def copied(payload: Payload) -> Payload:
    """A copy of ``payload`` whose value shares nothing mutable with it (``payload`` itself
    when its value is immutable)."""
    value = payload.payload
    if type(value) in _IMMUTABLE:
        return payload
    value = copy_value(value)
    if value is payload.payload:
        return payload  # immutable all the way down: nothing to isolate
    # `envelope`, inlined: this runs on every store and every recovery.
    p = payload
    obj: Any = _new(Building)
    obj.name = p.name
    obj.key = p.key
    obj.payload = value
    obj.as_of = p.as_of
    obj.expire_on = p.expire_on
    obj.up_to_date = p.up_to_date
    obj.cause = None
    obj.label = p.label
    obj.partial = False  # a stored entry is whole
    obj.tags = p.tags
    obj.fresh_ended = p.fresh_ended
    obj.__class__ = ReferentialPayload
    built: Payload = obj
    return built


class CopyingStore(HealthRowsLayer, BrowsingLayer, Layer):
    """Stores and returns deep copies, so that what a caller does to a returned object never
    changes what is stored, and the reverse.

    A read is copied only when the inner store's reads may hand back an object someone else
    holds (an in-process store's entry, a near tier's copy): over a store whose reads are
    fresh (`failover.stores.base.reads_fresh`: rows decoded anew, queued writes copied by their
    queue) it hands the read on as it is.
    """

    isolating = True  # by copying: no other copying layer is needed in front
    reads_fresh = True  # copied, or fresh already

    def __init__(self, inner: FailoverStore) -> None:
        self.inner = inner
        # Decided once: the chain below is fixed when the layer is made.
        self._copies_reads = not reads_fresh(inner)
        # An in-process store that copies as it reads (`InMemoryStore.find_copy`): one envelope.
        # Not for a subclass with reads of its own: its `find` is what it reads with.
        own = type(inner).find is InMemoryStore.find
        self._find_copy = cast(Any, inner).find_copy if own and self._copies_reads else None

    def __repr__(self) -> str:
        return f"CopyingStore({self.inner!r})"

    def browsed(self) -> FailoverStore:
        """The inner store: entries are listed as stored, nothing to copy."""
        return self.inner

    def store(self, payload: Payload) -> int | None:
        """Store a copy."""
        return self.inner.store(copied(payload))

    def store_many(self, payloads: Sequence[Payload]) -> int | None:
        """Store copies."""
        return self.inner.store_many([copied(p) for p in payloads])

    def find(self, name: str, key: str) -> Payload | None:
        """A copy of the stored entry."""
        if self._find_copy is not None:
            found: Payload | None = self._find_copy(name, key, copy_value)
            return found
        payload = self.inner.find(name, key)
        return payload if payload is None or not self._copies_reads else copied(payload)

    def find_many(self, name: str, keys: Iterable[str]) -> dict[str, Payload]:
        """Copies of the stored entries."""
        found = self.inner.find_many(name, keys)
        if not self._copies_reads:
            return found
        return {k: copied(p) for k, p in found.items()}

    async def afind(self, name: str, key: str) -> Payload | None:
        """`find`, awaited."""
        payload = await as_async(self.inner).afind(name, key)
        return payload if payload is None or not self._copies_reads else copied(payload)

    async def afind_many(self, name: str, keys: Iterable[str]) -> dict[str, Payload]:
        """`find_many`, awaited."""
        found = await as_async(self.inner).afind_many(name, keys)
        if not self._copies_reads:
            return found
        return {k: copied(p) for k, p in found.items()}

    async def astore_many(self, payloads: Sequence[Payload]) -> int | None:
        """`store_many`, awaited."""
        return await as_async(self.inner).astore_many([copied(p) for p in payloads])

    async def aclose(self) -> None:
        """Close the inner store's async clients of this loop."""
        if native_async(self.inner):
            await self.inner.aclose()

    def find_all(self, name: str) -> list[Payload]:
        """Copies of every entry of ``name``."""
        found = self.inner.find_all(name)
        return [copied(p) for p in found] if self._copies_reads else found

    def delete(self, name: str, key: str) -> None:
        """Remove the entry."""
        self.inner.delete(name, key)

    def delete_many(self, name: str, keys: Iterable[str]) -> None:
        """Remove the entries."""
        delete_many(self.inner, name, keys)

    def clean_by_expiry(self, now: datetime) -> int:
        """Remove expired entries."""
        return self.inner.clean_by_expiry(now)

    def close(self) -> None:
        """Close the inner store."""
        self.inner.close()
