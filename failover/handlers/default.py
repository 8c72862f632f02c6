"""The innermost handler: keys, expiry and the store chain."""

from __future__ import annotations

from typing import Any

from ..context import CallContext, Miss
from ..keys import make_key
from ..payload import envelope
from ..stores.base import FailoverStore, Payload
from .base import expire_on, key_of

__all__ = ["DefaultHandler"]


class DefaultHandler:
    """Keys, expiry and the store: the innermost handler.

    An expired entry found on recovery or peek is deleted and never served.
    """

    def __init__(self, store: FailoverStore, clock: Any) -> None:
        self.store_ = store
        self.clock = clock

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
        self.store_.store(envelope(name, key, result, now, expire_on(definition, now), True))

    def _live(self, ctx: CallContext) -> Payload | Miss:
        definition = ctx.definition
        key = key_of(ctx)
        found = self.store_.find(definition.effective_name, key)
        if found is None:
            return Miss.MISS
        if definition.expiry.is_expired(found, self.clock()):
            # A concurrent success may have stored a fresh entry since: delete only if the
            # entry is still the expired one (the window left is one find long).
            again = self.store_.find(definition.effective_name, key)
            if again is not None and again.as_of == found.as_of:
                self.store_.delete(definition.effective_name, key)
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
        """Delete the stored entry."""
        self.store_.delete(ctx.definition.effective_name, key_of(ctx))
