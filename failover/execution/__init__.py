"""The execution layer: how the upstream is called.

One module per strategy, each a `Guard` (``base.py``) or, for the soft timeout, the runner of
the innermost call. A failover's chain is built once, when it binds to an engine, in the
documented order — bulkhead outside breaker outside timeout::

    Bulkhead (bulkhead.py) -> BreakerGuard (breaker.py) -> SoftTimeout (timeout.py) -> upstream

The bulkhead takes its permits from a pool, whose `PermitSource` (permits.py) is in-process or
shared by a cluster (redis_permits.py).

Basic execution is no chain at all: the shells call the upstream directly.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..errors import SoftTimeoutError
from .base import Attempt, Guard
from .breaker import BreakerGuard, StateListener, state_code
from .bulkhead import Bulkhead, Pool, Pools
from .permits import LocalPermits, PermitSource
from .timeout import Refreshes, SoftTimeout

__all__ = [
    "Attempt",
    "BreakerGuard",
    "Bulkhead",
    "Execution",
    "Guard",
    "LocalPermits",
    "PermitSource",
    "Pool",
    "Pools",
    "Refreshes",
    "SoftTimeout",
    "StateListener",
    "state_code",
]


class Execution:
    """One failover's guards, outermost first, and its soft timeout (innermost), if any.

    Attributes:
        refusals: what the layer raises of its own; these always trigger recovery.
        unattempted: the guards' refusals: raised instead of calling the upstream at all.
    """

    __slots__ = ("guards", "n", "refusals", "timeout", "unattempted")

    def __init__(self, guards: tuple[Guard, ...], timeout: SoftTimeout | None) -> None:
        self.guards = guards
        self.n = len(guards)
        self.timeout = timeout
        refusals = [r for g in guards for r in g.refusals]
        self.unattempted: tuple[type[Exception], ...] = tuple(refusals)
        if timeout is not None:
            refusals.append(SoftTimeoutError)
        self.refusals: tuple[type[Exception], ...] = tuple(refusals)

    def __repr__(self) -> str:
        parts = [*map(repr, self.guards), *([repr(self.timeout)] if self.timeout else [])]
        return f"Execution({' > '.join(parts)})"

    def call(self, ctx: Any, fn: Callable[..., Any], args: Any, kwargs: Any) -> Any:
        """Call ``fn`` through the guards, outermost first, and the soft timeout."""
        if self.n != 1:
            return self._call(ctx, fn, args, kwargs, 0)
        # One guard (the common case): no frame per guard.
        guard = self.guards[0]
        token = guard.enter()
        try:
            if self.timeout is None:
                result = fn(*args, **kwargs)
            else:
                result = self.timeout.call(ctx, fn, args, kwargs)
        except BaseException as exc:
            guard.exit(token, exc)
            raise
        guard.exit(token, None)
        return result

    def _call(self, ctx: Any, fn: Callable[..., Any], args: Any, kwargs: Any, i: int) -> Any:
        if i == self.n:
            if self.timeout is None:
                return fn(*args, **kwargs)
            return self.timeout.call(ctx, fn, args, kwargs)
        guard = self.guards[i]
        token = guard.enter()
        try:
            result = self._call(ctx, fn, args, kwargs, i + 1)
        except BaseException as exc:
            guard.exit(token, exc)
            raise
        guard.exit(token, None)
        return result

    async def acall(self, ctx: Any, fn: Callable[..., Any], args: Any, kwargs: Any) -> Any:
        """`call` for ``async def`` upstreams."""
        if self.n != 1:
            return await self._acall(ctx, fn, args, kwargs, 0)
        guard = self.guards[0]
        token = await guard.aenter()
        try:
            if self.timeout is None:
                result = await fn(*args, **kwargs)
            else:
                result = await self.timeout.acall(ctx, fn, args, kwargs)
        except BaseException as exc:
            guard.exit(token, exc)
            raise
        guard.exit(token, None)
        return result

    async def _acall(self, ctx: Any, fn: Callable[..., Any], args: Any, kwargs: Any, i: int) -> Any:
        if i == self.n:
            if self.timeout is None:
                return await fn(*args, **kwargs)
            return await self.timeout.acall(ctx, fn, args, kwargs)
        guard = self.guards[i]
        token = await guard.aenter()
        try:
            result = await self._acall(ctx, fn, args, kwargs, i + 1)
        except BaseException as exc:
            guard.exit(token, exc)
            raise
        guard.exit(token, None)
        return result
