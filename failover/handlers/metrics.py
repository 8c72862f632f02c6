"""The outermost handler: counts and times what the layers inside it do."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from time import perf_counter
from typing import Any

from ..context import CallContext, Miss
from ..metrics import Metrics
from ..stores.base import Payload
from .base import Handler

__all__ = ["MetricsHandler"]


class MetricsHandler:
    """The outermost handler: counts and times stores and recoveries, then delegates."""

    def __init__(self, inner: Handler, metrics: Metrics, clock: Callable[[], datetime]) -> None:
        self.inner = inner
        self.metrics = metrics
        self.clock = clock

    def __repr__(self) -> str:
        return f"MetricsHandler({self.inner!r})"

    def store(self, ctx: CallContext, result: Any) -> None:
        """Store, counting ``stored`` or ``failed``."""
        start = perf_counter()
        try:
            self.inner.store(ctx, result)
        except Exception:
            self.metrics.stored(ctx.definition.name, False, perf_counter() - start)
            raise
        self.metrics.stored(ctx.definition.name, True, perf_counter() - start)

    def recover(self, ctx: CallContext, cause: Exception) -> Payload | Miss:
        """Recover, counting ``recovered``, ``not_recovered`` or ``error``."""
        start = perf_counter()
        name = ctx.definition.name
        try:
            found = self.inner.recover(ctx, cause)
        except Exception:
            self.metrics.recovered(name, "error", perf_counter() - start)
            raise
        self._counted(name, found, start)
        return found

    def _counted(self, name: str, found: Payload | Miss, start: float) -> None:
        if isinstance(found, Miss):
            self.metrics.recovered(name, "not_recovered", perf_counter() - start)
        else:
            age = None
            if found.as_of is not None:
                age = max(0.0, (self.clock() - found.as_of).total_seconds())
            self.metrics.recovered(name, "recovered", perf_counter() - start, age)

    @property
    def batches_reads(self) -> bool:
        """Whether the layer inside has `arecover`."""
        return bool(getattr(self.inner, "batches_reads", False))

    async def arecover(self, ctx: CallContext, cause: Exception) -> Payload | Miss:
        """`recover` for a task, counted the same way (only when `batches_reads`)."""
        start = perf_counter()
        name = ctx.definition.name
        try:
            found: Payload | Miss = await self.inner.arecover(ctx, cause)  # type: ignore[attr-defined]
        except Exception:
            self.metrics.recovered(name, "error", perf_counter() - start)
            raise
        self._counted(name, found, start)
        return found

    def peek(self, ctx: CallContext) -> Payload | None:
        """Peek, uncounted."""
        return self.inner.peek(ctx)

    def invalidate(self, ctx: CallContext) -> None:
        """Invalidate, uncounted."""
        self.inner.invalidate(ctx)
