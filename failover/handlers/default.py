"""The innermost handler: keys, expiry and the store chain."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from ..adaptive import AdaptiveTtl, FreshSince
from ..context import CallContext, Miss
from ..definition import FailoverDefinition
from ..entries import EntryControl
from ..expiry import FixedTtl
from ..keys import make_key
from ..labels import call_label
from ..payload import Building, ReferentialPayload
from ..stores.base import FailoverStore, Payload, does_io
from ..stores.layers.batching import ReadBatcher
from ..tags import tags_of
from .base import Superseded, drop_expired, key_of
from .lookup import Lookup, lookup_of

__all__ = ["DefaultHandler"]

_new = object.__new__


class DefaultHandler:
    """Keys, expiry and the store: the innermost handler.

    An expired entry found on recovery or peek is deleted and never served.

    Write coalescing: with a store interval (the failover's ``store_interval``, else
    ``store_interval`` here), a success within that time of its key's last store is not stored
    again. The last store times are kept for at most ``max_coalesced`` keys, the ones stored
    longest ago leaving first (they are the first to leave the interval anyway).

    Reads batched: recoveries (and peeks) of one failover that arrive together share one
    ``find_many`` (`ReadBatcher`); async callers await theirs (`Lookup.aread`) without a
    thread each.

    Args:
        store: the store chain.
        clock: the engine's clock.
        store_interval: the engine's default interval (``None`` or zero: every success is stored).
        tenant: the current tenant, when stores are per tenant (one key's times per tenant).
        max_coalesced: the most keys whose last store time is kept.
    """

    def __init__(
        self,
        store: FailoverStore,
        clock: Any,
        store_interval: timedelta | None = None,
        tenant: Callable[[], str] | None = None,
        max_coalesced: int = 100_000,
    ) -> None:
        self.store_ = store
        self.clock = clock
        self.store_interval = store_interval or None
        self.tenant = tenant
        self.max_coalesced = max_coalesced
        # Key (its digest names the failover already), or (tenant, key) -> when the key may be
        # stored again. The dict's order is the store order: oldest first.
        self._until: dict[Any, datetime] = {}
        self._last_lock = threading.Lock()
        # A store without I/O (process memory) answers at once: nothing to gather reads for.
        self.reads = ReadBatcher(store) if does_io(store) else None

    def __repr__(self) -> str:
        return f"DefaultHandler({self.store_!r})"

    def store(self, ctx: CallContext, result: Any) -> Superseded | None:
        """Store the live result under the call's key with its expiry; ``None``, or what
        kept it out (a newer stored entry of its key)."""
        definition = ctx.definition
        now = ctx.now
        if now is None:
            ctx.now = now = self.clock()
        name = definition.effective_name
        key = ctx.stored_key  # carried by the call once computed
        if key is None:
            key = make_key(name, ctx.values) if definition.key is None else key_of(ctx)
            ctx.stored_key = key
        interval = definition.store_interval
        if interval is None:
            interval = self.store_interval
        if interval:
            slot = self._slot(key) if self.tenant is not None else key
            until = self._until.get(slot)
            if until is not None and now < until:
                return None  # stored within the interval: the common case when coalescing pays
            if self._coalesced(slot, now, interval):
                return None
        try:
            label = None if definition.label is None else call_label(ctx)
            tags = None if definition.tags is None else tags_of(ctx)
            expiry = definition.expiry
            if type(expiry) is FixedTtl:  # `expire_on`'s default policy, inlined
                expires = now + expiry.ttl
            elif type(expiry) is AdaptiveTtl:  # the result decides (ttl= a callable, jitter)
                expires = expiry.expiry_of(now, result, ctx.args, ctx.kwargs, key)
            else:
                expires = expiry.compute_expiry(definition, now)
            # `envelope`, inlined: the success path's one envelope, without a frame.
            obj: Any = _new(Building)
            obj.name = name
            obj.key = key
            obj.payload = result
            obj.as_of = now
            obj.expire_on = expires
            obj.up_to_date = True
            obj.cause = None
            obj.label = label
            obj.partial = False
            obj.tags = tags
            obj.fresh_ended = False
            obj.__class__ = ReferentialPayload
            kept = self.store_.store(obj)
        except BaseException:
            if interval:  # nothing stored: the next success tries again
                self._unmark(self._slot(key), now + interval)
            raise
        return None if not kept else Superseded(kept, 1)

    def coalesced(self, ctx: CallContext, now: datetime) -> bool:
        """Whether a success of the call at ``now`` falls within the store interval of its
        key's last store, so that it is not stored again (for layers that store a call in
        their own way: slices)."""
        interval = self._interval(ctx.definition)
        if not interval:
            return False
        return self._coalesced(self._slot(key_of(ctx)), now, interval)

    def uncoalesce(self, ctx: CallContext, now: datetime) -> None:
        """Undo `coalesced`'s mark of the call at ``now``: its store failed, so it was not the
        key's last store, and the next success tries again."""
        interval = self._interval(ctx.definition)
        if interval:
            self._unmark(self._slot(key_of(ctx)), now + interval)

    def _interval(self, definition: FailoverDefinition) -> timedelta | None:
        interval = definition.store_interval
        return self.store_interval if interval is None else interval

    def _unmark(self, slot: Any, until: datetime) -> None:
        with self._last_lock:
            if self._until.get(slot) == until:  # a newer mark is left alone
                del self._until[slot]

    def _slot(self, key: str) -> Any:
        return key if self.tenant is None else (self.tenant(), key)

    def _coalesced(self, slot: Any, now: datetime, interval: timedelta) -> bool:
        """Whether ``slot`` was stored less than ``interval`` before ``now``; if not, it may
        next be stored at ``now + interval``."""
        until = self._until
        with self._last_lock:  # checked again under the lock: one racer stores, not each
            when = until.get(slot)
            if when is not None and now < when:
                return True
            until.pop(slot, None)
            until[slot] = now + interval  # re-inserted last: the dict's order is the store order
            if len(until) > self.max_coalesced:
                del until[next(iter(until))]
        return False

    def lookup(self, ctx: CallContext, cause: Exception | None, report: bool = True) -> Lookup:
        """The call's entry to read: a point read of its key (batched with other reads)."""
        tenant = None if self.tenant is None else self.tenant()
        return lookup_of(self, ctx, cause, key_of(ctx), self.store_, self.reads, tenant, report)

    def recover(self, ctx: CallContext, cause: Exception) -> tuple[Lookup, Payload | Miss]:
        """`lookup` and its `Lookup.read` in one, for a thread: the call's point read, made in
        place, and its answer (a failing key or read is `Miss.ERROR`, kept in the lookup's
        ``error``). The recovery path's one frame in this layer: `lookup_of`, `key_of` and
        the default expiry's check are inlined."""
        definition = ctx.definition
        name = definition.effective_name
        tenant = None if self.tenant is None else self.tenant()
        reads = self.reads
        lookup: Lookup = _new(Lookup)  # `lookup_of`, inlined: a new field goes there too
        lookup.finisher = self
        lookup.ctx = ctx
        lookup.cause = cause
        lookup.name = name
        lookup.keys = None
        lookup.store = self.store_
        lookup.reads = reads
        lookup.tenant = tenant
        lookup.report = True
        lookup.chores = None
        lookup.error = None
        lookup.chore_error = None
        lookup.plan = None
        try:
            key = ctx.stored_key  # carried by the call once computed
            if key is None:
                key = make_key(name, ctx.values) if definition.key is None else key_of(ctx)
                ctx.stored_key = key
            lookup.keys = key
            found = self.store_.find(name, key) if reads is None else reads.find(name, key, tenant)
            if found is None:
                return lookup, Miss.MISS
            expiry = definition.expiry
            if type(expiry) is FixedTtl:  # the default policy, inlined
                expired = found.expire_on is not None and self.clock() >= found.expire_on
            else:
                expired = expiry.is_expired(found, self.clock())
        except Exception as exc:
            lookup.error = exc
            return lookup, Miss.ERROR
        if expired:
            lookup.chore(drop_expired, self.store_, found)
            return lookup, Miss.EXPIRED
        return lookup, found

    def recovered(self, lookup: Lookup, found: Payload | None) -> Payload | Miss:
        """The entry found, as it was stored (the core marks it stale), or why there is none;
        an expired one is dropped."""
        if found is None:
            return Miss.MISS
        if lookup.ctx.definition.expiry.is_expired(found, self.clock()):
            lookup.chore(drop_expired, self.store_, found)
            return Miss.EXPIRED
        return found

    def current_tenant(self) -> str | None:
        """The caller's tenant, when stores are per tenant."""
        return None if self.tenant is None else self.tenant()

    def fresh(self, ctx: CallContext, since: datetime | FreshSince) -> Payload | None:
        """The stored entry, as stored, when it was stored after ``since`` and has not expired
        at the call's time (``ctx.now``), else ``None``."""
        key = key_of(ctx)
        name = ctx.definition.effective_name
        if self.reads is None:
            found = self.store_.find(name, key)
        else:
            found = self.reads.find(name, key, self.current_tenant())
        if found is None or found.as_of is None:
            return None
        if isinstance(since, FreshSince):  # fresh_for is a callable: this entry's window
            since = since(found.payload, ctx.args, ctx.kwargs)
        if found.as_of <= since or found.fresh_ended:
            return None
        now = ctx.now if ctx.now is not None else self.clock()
        expiry = ctx.definition.expiry
        if type(expiry) is FixedTtl:  # the default policy, inlined: this is the fresh hit's path
            expired = found.expire_on is not None and now >= found.expire_on
        else:
            expired = expiry.is_expired(found, now)
        return None if expired else found

    def invalidate(self, ctx: CallContext) -> None:
        """Delete the stored entry (the next success stores again, whatever the interval)."""
        name, key = ctx.definition.effective_name, key_of(ctx)
        self.store_.delete(name, key)
        self.forget(name, key)

    def expire(self, ctx: CallContext, control: EntryControl) -> int:
        """End the fresh window of the call's entry (its next success is stored, whatever the
        interval)."""
        name, key = ctx.definition.effective_name, key_of(ctx)
        found = control.expire(name, [key])
        self.forget(name, key)
        return found

    def invalidate_all(self, name: str, control: EntryControl) -> int:
        """Delete every entry of ``name`` (every next success is stored, whatever the
        interval)."""
        removed = control.invalidate_all(name)
        self.forget_all()
        return removed

    def forget(self, name: str, key: str) -> None:
        """Forget the last store time of ``(name, key)``: its next success is stored."""
        with self._last_lock:
            self._until.pop(self._slot(key), None)

    def forget_all(self) -> None:
        """Forget every key's last store: after slices were deleted, a call covering them is
        coalesced by its own key, which the slices do not name, so every next success stores."""
        with self._last_lock:
            self._until.clear()
