"""The innermost handler: keys, expiry and the store chain."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from ..context import CallContext, Miss
from ..keys import make_key
from ..payload import envelope
from ..stores.base import FailoverStore, Payload
from .base import drop_expired, expire_on, key_of

__all__ = ["DefaultHandler"]


class DefaultHandler:
    """Keys, expiry and the store: the innermost handler.

    An expired entry found on recovery or peek is deleted and never served.

    Write coalescing: with a store interval (the failover's ``store_interval``, else
    ``store_interval`` here), a success within that time of its key's last store is not stored
    again. The last store times are kept for at most ``max_coalesced`` keys, the ones stored
    longest ago leaving first (they are the first to leave the interval anyway).

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
        self._last: dict[tuple[str, ...], datetime] = {}
        self._last_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"DefaultHandler({self.store_!r})"

    def store(self, ctx: CallContext, result: Any) -> None:
        """Store the live result under the call's key with its expiry."""
        definition = ctx.definition
        now = ctx.now
        if now is None:
            ctx.now = now = self.clock()
        name = definition.effective_name
        key = make_key(name, ctx.values) if definition.key is None else key_of(ctx)
        interval = definition.store_interval
        if interval is None:
            interval = self.store_interval
        if interval and self._coalesced(name, key, now, interval):
            return
        try:
            self.store_.store(envelope(name, key, result, now, expire_on(definition, now), True))
        except BaseException:
            if interval:
                self.unmark(name, key, now)  # nothing stored: the next success tries again
            raise

    def coalesced(self, ctx: CallContext, now: datetime) -> bool:
        """Whether a success of the call at ``now`` falls within the store interval of its
        key's last store, so that it is not stored again (for layers that store a call in
        their own way: slices)."""
        definition = ctx.definition
        interval = definition.store_interval
        if interval is None:
            interval = self.store_interval
        if not interval:
            return False
        return self._coalesced(definition.effective_name, key_of(ctx), now, interval)

    def _coalesced(self, name: str, key: str, now: datetime, interval: timedelta) -> bool:
        """Whether ``(name, key)`` was stored less than ``interval`` before ``now``; if not, its
        store time becomes ``now``."""
        slot = (name, key) if self.tenant is None else (self.tenant(), name, key)
        last = self._last
        when = last.get(slot)
        if when is not None and now - when < interval:
            return True  # the common case when coalescing pays: no lock
        with self._last_lock:
            when = last.get(slot)  # again, under the lock: one thread stores, not every racer
            if when is not None and now - when < interval:
                return True
            last.pop(slot, None)
            last[slot] = now  # re-inserted last: the dict's order is the store order
            if len(last) > self.max_coalesced:
                del last[next(iter(last))]
        return False

    def _live(self, ctx: CallContext) -> Payload | Miss:
        definition = ctx.definition
        key = key_of(ctx)
        found = self.store_.find(definition.effective_name, key)
        if found is None:
            return Miss.MISS
        if definition.expiry.is_expired(found, self.clock()):
            drop_expired(self.store_, found)
            return Miss.EXPIRED
        return envelope(found.name, found.key, found.payload, found.as_of, found.expire_on, False)

    def recover(self, ctx: CallContext, cause: Exception) -> Payload | Miss:
        """The stored entry, stale, or why there is none."""
        return self._live(ctx)

    def peek(self, ctx: CallContext) -> Payload | None:
        """The stored, unexpired entry, or ``None``."""
        found = self._live(ctx)
        return None if isinstance(found, Miss) else found

    def invalidate(self, ctx: CallContext) -> None:
        """Delete the stored entry (the next success stores again, whatever the interval)."""
        name, key = ctx.definition.effective_name, key_of(ctx)
        self.store_.delete(name, key)
        self.forget(name, key)

    def unmark(self, name: str, key: str, now: datetime) -> None:
        """Undo `_coalesced`'s mark of ``(name, key)`` at ``now``: that store failed, so it was
        not the key's last store (a newer mark is left alone)."""
        slot = (name, key) if self.tenant is None else (self.tenant(), name, key)
        with self._last_lock:
            if self._last.get(slot) == now:
                del self._last[slot]

    def forget(self, name: str, key: str) -> None:
        """Forget the last store time of ``(name, key)``: its next success is stored."""
        slot = (name, key) if self.tenant is None else (self.tenant(), name, key)
        with self._last_lock:
            self._last.pop(slot, None)
