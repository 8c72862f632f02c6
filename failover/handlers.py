"""The handler chain: what happens around the store on success and on failure.

Layers wrap an inner handler behind the same small `Handler` protocol, built inside-out once per
engine: ``MetricsHandler`` (outermost) → ``ScatterGatherHandler`` → `DefaultHandler` → store chain.
"""

from __future__ import annotations

from typing import Any, Protocol

from .context import CallContext, Miss
from .expiry import FixedTtl
from .keys import canonical, digest, make_key
from .payload import envelope
from .stores.base import FailoverStore, Payload

__all__ = ["DefaultHandler", "Handler"]


class Handler(Protocol):
    """One layer of the handler chain."""

    def store(self, ctx: CallContext, result: Any) -> None:
        """Keep a live result (``ctx.now`` is its time)."""
        ...

    def recover(self, ctx: CallContext, cause: Exception) -> Payload | Miss:
        """The stored envelope for a failed call (``up_to_date=False``), or why there is none.

        May raise: the core treats a raising recover as `Miss.ERROR`.
        """
        ...

    def peek(self, ctx: CallContext) -> Payload | None:
        """The stored, unexpired envelope for the call, without calling the upstream."""
        ...

    def invalidate(self, ctx: CallContext) -> None:
        """Delete the stored entry for the call."""
        ...


def key_of(ctx: CallContext) -> str:
    """The stored key of a call: its ``key=`` callable's raw key, or the canonical default."""
    definition = ctx.definition
    if definition.key is None:
        return make_key(definition.effective_name, ctx.values)
    raw = definition.key(*ctx.args, **ctx.kwargs)
    return digest(definition.effective_name, canonical(raw))


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
        now = ctx.now or self.clock()
        name = definition.effective_name
        key = make_key(name, ctx.values) if definition.key is None else key_of(ctx)
        expiry = definition.expiry
        if type(expiry) is FixedTtl:  # the default policy, inlined: this runs on every call
            expire_on = now + expiry.ttl
        else:
            expire_on = expiry.compute_expiry(definition, now)
        self.store_.store(envelope(name, key, result, now, expire_on, True))

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
