"""The execution layer: how the upstream is called.

One module per strategy, each a `Guard` (``base.py``) or, for the soft timeout, the runner of
the innermost call. A failover's chain is built once, when it binds to an engine, in the
order of `order.ORDER` (outermost first), the one place that order is written::

    Bulkhead (bulkhead.py) -> BreakerGuard (breaker.py) -> SoftTimeout (timeout.py) -> upstream

Each guard's module defines its `Kind` (its name, when a failover wants it, how the
definition's description shows it, how wiring makes it); a new guard is its module plus its
line in `ORDER`.

The bulkhead takes its permits from a pool, whose `PermitSource` (permits.py) is in-process or
shared by a cluster (redis_permits.py).

Basic execution is no chain at all: the shells call the upstream directly.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from ..errors import SoftTimeoutError
from .base import Attempt, Guard, Kind, Wait, run_through
from .breaker import BreakerGuard, StateListener, state_code
from .bulkhead import Bulkhead, Pool, Pools
from .order import ORDER
from .permits import LocalPermits, PermitSource
from .timeout import Refreshes, SoftTimeout

__all__ = [
    "ORDER",
    "Attempt",
    "BreakerGuard",
    "Bulkhead",
    "Execution",
    "Guard",
    "Kind",
    "LocalPermits",
    "PermitSource",
    "Pool",
    "Pools",
    "Refreshes",
    "SoftTimeout",
    "StateListener",
    "Wait",
    "state_code",
]


class Execution:
    """One failover's guards, outermost first, and its soft timeout (innermost), if any.

    Attributes:
        refusals: what the layer raises of its own; these always trigger recovery.
        unattempted: the guards' refusals: raised instead of calling the upstream at all.
    """

    __slots__ = ("admit", "exit", "guards", "n", "refusals", "run", "timeout", "unattempted")

    admit: Callable[[], Any]
    """Pass the guards, outermost first, without waiting: their tokens, for `exit`, or a
    `Wait` when one of them must wait (its end passes the guards inside it). A guard that
    refuses raises, and the guards it passed are left as they were."""
    exit: Callable[[Any, BaseException | None], None]
    """Leave the guards, innermost first, with the call's outcome (``exc``, or ``None``)."""
    run: Callable[[Callable[..., Any], tuple[Any, ...], dict[str, Any]], Any]
    """``run(fn, args, kwargs)``: one call on this thread through the guards (`Guard.run`),
    without the soft timeout."""

    def __init__(self, guards: tuple[Guard, ...], timeout: SoftTimeout | None) -> None:
        self.guards = guards
        self.n = len(guards)
        self.timeout = timeout
        if self.n == 1:  # the common case: the guard itself, no frame of ours around it
            self.admit = guards[0].admit
            self.exit = guards[0].exit
            self.run = guards[0].run
        else:
            self.admit = self._admit_all
            self.exit = self._exit_all
            self.run = partial(run_through, self.admit, self.exit)
        refusals = [r for g in guards for r in g.refusals]
        self.unattempted: tuple[type[Exception], ...] = tuple(refusals)
        if timeout is not None:
            refusals.append(SoftTimeoutError)
        self.refusals: tuple[type[Exception], ...] = tuple(refusals)

    def __repr__(self) -> str:
        parts = [*map(repr, self.guards), *([repr(self.timeout)] if self.timeout else [])]
        return f"Execution({' > '.join(parts)})"

    def _admit_all(self) -> Any:
        return self._admit([], self.guards)

    def _admit(self, tokens: list[Any], guards: tuple[Guard, ...]) -> Any:
        try:
            for guard in guards:
                token = guard.admit()
                if type(token) is Wait:
                    return self._then_inner(tokens, token)
                tokens.append(token)
        except BaseException as exc:
            self._leave(tokens, exc)
            raise
        return tokens

    def _waited(
        self,
        tokens: list[Any],
        then: Callable[[object | None, BaseException | None], Any],
        lease: object | None,
        error: BaseException | None,
    ) -> Any:
        try:
            token = then(lease, error)
        except BaseException as exc:
            self._leave(tokens, exc)
            raise
        if type(token) is Wait:  # the same guard waits again
            return self._then_inner(tokens, token)
        tokens.append(token)
        return self._admit(tokens, self.guards[len(tokens) :])

    def _then_inner(self, tokens: list[Any], wait: Wait) -> Wait:
        """``wait``, whose end also passes the guards inside the one waiting."""
        then = partial(self._waited, tokens, wait.then)
        return Wait(wait.source, wait.weight, wait.deadline, then)

    def _exit_all(self, tokens: Any, exc: BaseException | None) -> None:
        self._leave(tokens, exc)

    def _leave(self, tokens: list[Any], exc: BaseException | None) -> None:
        for guard, token in zip(
            reversed(self.guards[: len(tokens)]), reversed(tokens), strict=True
        ):
            guard.exit(token, exc)
