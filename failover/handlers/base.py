"""The `Handler` protocol every layer of the chain implements, and the key and expiry of an
entry, computed the same way for a whole call and for one slice of it."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Protocol

from ..context import CallContext, Miss
from ..definition import FailoverDefinition
from ..expiry import FixedTtl
from ..keys import canonical, digest, make_key
from ..stores.base import Payload

__all__ = ["Handler", "expire_on", "key_of"]


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


def expire_on(definition: FailoverDefinition, now: datetime) -> datetime:
    """When an entry of ``definition`` stored at ``now`` expires."""
    expiry = definition.expiry
    if type(expiry) is FixedTtl:  # the default policy, inlined: this runs on every call
        return now + expiry.ttl
    return expiry.compute_expiry(definition, now)
