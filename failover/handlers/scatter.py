"""Scatter / gather: a collection result stored and recovered per entity (slice).

Only failovers with a ``splitter=`` get this layer (the chain is chosen per failover), so the
others pay nothing for it.
"""

from __future__ import annotations

from typing import Any

from ..context import CallContext, Miss
from ..stores.base import Payload
from .base import Handler

__all__ = ["ScatterGatherHandler"]


class ScatterGatherHandler:
    """Splits a live result into slices on store and merges the slices found on recover."""

    def __init__(self, inner: Handler) -> None:
        self.inner = inner

    def __repr__(self) -> str:
        return f"ScatterGatherHandler({self.inner!r})"

    def store(self, ctx: CallContext, result: Any) -> None:
        """Store the result (per slice once splitters land)."""
        self.inner.store(ctx, result)

    def recover(self, ctx: CallContext, cause: Exception) -> Payload | Miss:
        """Recover the result (per slice once splitters land)."""
        return self.inner.recover(ctx, cause)

    def peek(self, ctx: CallContext) -> Payload | None:
        """The stored, unexpired entry."""
        return self.inner.peek(ctx)

    def invalidate(self, ctx: CallContext) -> None:
        """Delete the stored entry."""
        self.inner.invalidate(ctx)
