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

    def enter(self) -> Any:
        """Pass the guards, outermost first: their tokens, for `exit`. A guard that refuses
        raises, and the guards it passed are left as they were."""
        if self.n == 1:  # the common case: no list
            return self.guards[0].enter()
        tokens: list[Any] = []
        try:
            for guard in self.guards:
                tokens.append(guard.enter())
        except BaseException as exc:
            self._leave(tokens, exc)
            raise
        return tokens

    async def aenter(self) -> Any:
        """`enter` for a task: a guard that waits (a bulkhead) does not block the event loop."""
        if self.n == 1:
            return await self.guards[0].aenter()
        tokens: list[Any] = []
        try:
            for guard in self.guards:
                tokens.append(await guard.aenter())
        except BaseException as exc:
            self._leave(tokens, exc)
            raise
        return tokens

    def exit(self, tokens: Any, exc: BaseException | None) -> None:
        """Leave the guards, innermost first, with the call's outcome (``exc``, or ``None``)."""
        if self.n == 1:
            self.guards[0].exit(tokens, exc)
        else:
            self._leave(tokens, exc)

    def _leave(self, tokens: list[Any], exc: BaseException | None) -> None:
        for guard, token in zip(
            reversed(self.guards[: len(tokens)]), reversed(tokens), strict=True
        ):
            guard.exit(token, exc)
