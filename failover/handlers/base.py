"""The `Handler` protocol every layer of the chain implements, and the key and expiry of an
entry, computed the same way for a whole call and for one slice of it."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import Any, NamedTuple, Protocol

from ..adaptive import FreshSince
from ..context import CallContext, Miss, RecoverContext
from ..definition import FailoverDefinition
from ..entries import EntryControl
from ..expiry import FixedTtl
from ..keys import MEMO, canonical, digest, make_key, memo_of
from ..stores.base import FailoverStore, Payload, delete_many
from .lookup import Lookup

__all__ = [
    "Handler",
    "Superseded",
    "drop_all_expired",
    "drop_expired",
    "entity_keys",
    "envelope_key",
    "expire_on",
    "key_of",
    "slice_key",
    "slice_keys",
]


class Superseded(NamedTuple):
    """A write some of whose entries were not written: a newer entry of their key (a later
    ``as_of``) was stored (entries only move forward)."""

    kept: int
    """The entries kept out."""
    entries: int
    """The entries of the write."""


class Handler(Protocol):
    """One layer of the handler chain."""

    def store(self, ctx: CallContext, result: Any) -> Superseded | None:
        """Keep a live result (``ctx.now`` is its time); ``None`` when every entry was written
        (or queued), else what a newer stored entry kept out."""
        ...

    def lookup(self, ctx: CallContext, cause: Exception | None, report: bool = True) -> Lookup:
        """What recovering the call reads (``cause``: what the upstream raised; ``None`` and
        ``report=False`` for a peek). No I/O: the `Lookup` reads, and hands what it found to
        the layer's ``recovered`` for the answer (a stale envelope, or why there is none).

        May raise: the core treats it as `Miss.ERROR`.
        """
        ...

    def recover(self, ctx: CallContext, cause: Exception) -> tuple[Lookup, Payload | Miss]:
        """`lookup` and `Lookup.read` in one, for a thread: what recovering the call read, and
        its answer (a failed read is `Miss.ERROR`, kept in the lookup's ``error``).

        May raise (a failing key, splitter or tenant): the core treats it as `Miss.ERROR`.
        """
        ...

    def invalidate(self, ctx: CallContext) -> None:
        """Delete the stored entry for the call."""
        ...

    def expire(self, ctx: CallContext, control: EntryControl) -> int:
        """End the fresh window of the call's entries through ``control`` (every slice the call
        would recover, for scatter/gather); how many were there. Their next success is stored,
        whatever the store interval."""
        ...

    def invalidate_all(self, name: str, control: EntryControl) -> int:
        """Delete every entry of ``name`` through ``control``; the count. Every next success
        is stored, whatever the store interval."""
        ...

    def fresh(self, ctx: CallContext, since: datetime | FreshSince) -> Payload | Partial | None:
        """The stored entry for the call when it was stored after ``since`` (a time, or per
        entry for a ``fresh_for`` callable: `failover.adaptive.FreshSince`; within
        ``fresh_for``; every slice of it, for scatter/gather); for scatter/gather with some
        slices fresh, the `Partial` call that asks the upstream for the others; else
        ``None``."""
        ...


class Partial:
    """A scatter/gather call some of whose slices are fresh: the upstream is asked for the
    others only (``args``, ``kwargs``: the narrowed call, without ``self``/``cls``), and
    ``merge(result)`` makes the caller's value of the fresh slices and that call's result."""

    __slots__ = ("args", "kwargs", "merge")

    def __init__(
        self,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        merge: Callable[[Any], Payload],
    ) -> None:
        self.args = args
        self.kwargs = kwargs
        self.merge = merge


def key_of(ctx: CallContext) -> str:
    """The stored key of a call: its ``key=`` callable's raw key, or the canonical default;
    computed once per call and carried by it (a failing ``key=`` callable is asked again)."""
    key = ctx.stored_key
    if key is None:
        definition = ctx.definition
        if definition.key is None:
            key = make_key(definition.effective_name, ctx.values)
        else:
            raw = definition.key(*ctx.args, **ctx.kwargs)
            key = digest(definition.effective_name, canonical(raw))
        ctx.stored_key = key
    return key


def envelope_key(ctx: CallContext) -> str:
    """`key_of` for an envelope handed to the caller: ``""`` when the ``key=`` callable fails
    (that failure shows up, logged and counted, where the key is needed to store or find)."""
    try:
        return key_of(ctx)
    except Exception:
        return ""


def slice_key(definition: FailoverDefinition, arguments: Mapping[str, Any]) -> str:
    """The stored key of a slice: the default key of a call whose bound argument values are
    ``arguments``' values, in order. A failover of the same effective name called with those
    arguments (and no ``key=``) addresses the same entry."""
    return make_key(definition.effective_name, tuple(arguments.values()))


def slice_keys(definition: FailoverDefinition, slices: Iterable[RecoverContext[Any]]) -> list[str]:
    """`slice_key` of each slice, in one loop (thousands per scatter/gather call): the same
    keys, without a frame per slice."""
    name = definition.effective_name
    get = memo_of(name).get  # `make_key`'s memo, for one str or int value (the commonest)
    keys: list[str] = []
    append = keys.append
    for s in slices:
        values = tuple(s.arguments.values())
        key = get(values) if len(values) == 1 and type(values[0]) in MEMO else None
        append(make_key(name, values) if key is None else key)
    return keys


def entity_keys(definition: FailoverDefinition, entities: Iterable[Any]) -> list[str]:
    """`slice_keys` of the slices whose one argument is each of ``entities`` (a built-in
    splitter's), without the slices."""
    name = definition.effective_name
    get = memo_of(name).get
    keys: list[str] = []
    append = keys.append
    for entity in entities:
        values = (entity,)
        key = get(values) if type(entity) in MEMO else None
        append(make_key(name, values) if key is None else key)
    return keys


def drop_expired(store: FailoverStore, expired: Payload) -> None:
    """Delete an expired entry that was found, unless it changed since it was read."""
    # A concurrent success may have stored a fresh entry meanwhile: delete only if the entry is
    # still the expired one (the window left is one find long).
    again = store.find(expired.name, expired.key)
    if again is not None and again.as_of == expired.as_of:
        store.delete(expired.name, expired.key)


def drop_all_expired(store: FailoverStore, name: str, expired: list[Payload]) -> None:
    """`drop_expired` for several entries of ``name``, read again in one batch and deleted in
    one."""
    if len(expired) == 1:
        drop_expired(store, expired[0])
        return
    again = store.find_many(name, [p.key for p in expired])
    unchanged = [
        p.key for p in expired if (now := again.get(p.key)) is not None and now.as_of == p.as_of
    ]
    if unchanged:
        delete_many(store, name, unchanged)  # one statement (round trip), not one per slice


def expire_on(definition: FailoverDefinition, now: datetime) -> datetime:
    """When an entry of ``definition`` stored at ``now`` expires."""
    expiry = definition.expiry
    if type(expiry) is FixedTtl:  # the default policy, inlined: this runs on every call
        return now + expiry.ttl
    return expiry.compute_expiry(definition, now)
