"""What every execution guard is: an object that admits or refuses a call and hears how it ended.

A guard is shared by every call of its failover, so per-call state travels in the token that
`Guard.admit` gives and `Guard.exit` receives. Admitting is one decision, written once for
threads and tasks (sans-I/O): `admit` returns the token, raises a refusal, or returns a `Wait`
when the call cannot be admitted now (a bulkhead with no free permit). Only the wait itself
differs: `Wait.block` on a thread, `Wait.wait` on the event loop. `Guard.enter` and `aenter`
are ``admit`` plus that wait; `Guard.run` is one whole call on a thread (admit, wait, the
upstream, exit), which a guard may make cheaper for its common case. The call
(`failover.call.Call`) drives the guards through the failover's `Execution` when it is
entered; `Guard.attempt` wraps them for ``with`` and ``async with``, for a guard used on its
own.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Any, ClassVar

from .permits import PermitSource

__all__ = ["Attempt", "Guard", "Kind", "Wait", "run_through"]


class Wait:
    """What a guard that cannot admit a call now asks its caller to wait for: ``weight``
    permits of ``source`` until ``deadline`` (`time.monotonic`; ``None``: no limit), and how the
    admission ends with what the wait gave.

    Args:
        source: the permits to wait for.
        weight: how many.
        deadline: when to give up (the source then gives ``None``).
        then: called with the source's lease (``None``: none in time) and ``None``, or with
            ``None`` and what the wait raised; returns the admission's token or another `Wait`,
            or raises the refusal.
    """

    __slots__ = ("deadline", "source", "then", "weight")

    def __init__(
        self,
        source: PermitSource,
        weight: int,
        deadline: float | None,
        then: Callable[[object | None, BaseException | None], Any],
    ) -> None:
        self.source = source
        self.weight = weight
        self.deadline = deadline
        self.then = then

    def block(self) -> Any:
        """Wait on this thread: the token (or the refusal, raised)."""
        try:
            lease = self.source.acquire(self.weight, self.deadline)
        except BaseException as exc:  # the guard decides: a refusal, or ``exc`` itself
            return self.then(None, exc)
        token = self.then(lease, None)
        return token.block() if type(token) is Wait else token

    async def wait(self) -> Any:
        """`block` for a task: waits on the event loop (cancelled, it takes nothing)."""
        try:
            lease = await self.source.aacquire(self.weight, self.deadline)
        except BaseException as exc:
            return self.then(None, exc)
        token = self.then(lease, None)
        return await token.wait() if type(token) is Wait else token


def run_through(
    admit: Callable[[], Any],
    exit: Callable[[Any, BaseException | None], None],
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> Any:
    """``fn(*args, **kwargs)`` on this thread between ``admit`` (waited for, if it says so)
    and ``exit``, which hears how it ended."""
    token = admit()
    if type(token) is Wait:
        token = token.block()
    try:
        result = fn(*args, **kwargs)
    except BaseException as exc:
        exit(token, exc)
        raise
    exit(token, None)
    return result


@dataclass(frozen=True, slots=True)
class Kind:
    """One kind of guard, as the failover's order (`failover.execution.order.ORDER`) lists it:
    everything wiring and the definition's description need, kept in the guard's own module.

    Attributes:
        name: the guard's name (``"bulkhead"``), as its refusals' ``guard`` says.
        wanted: ``definition -> bool``: whether a failover's settings ask for this guard.
        shown: ``definition -> str``: the guard in the definition's description
            (``"bulkhead(8)"``).
        make: ``(definition, wiring) -> guard``: the failover's guard, made once when it binds
            to an engine (the wiring gives what engines share: pools, breakers, the clock).
    """

    name: str
    wanted: Callable[[Any], bool]
    shown: Callable[[Any], str]
    make: Callable[[Any, Any], Any]


class Guard:
    """Admits a call (`admit`) and learns its end (`exit`).

    Attributes:
        refusals: the exceptions `admit` raises to refuse a call; they always trigger recovery,
            whatever the failover's ``exceptions=`` says.
    """

    refusals: ClassVar[tuple[type[Exception], ...]] = ()

    def admit(self) -> Any:
        """The decision, without waiting: the token `exit` gets back, one of `refusals` raised,
        or a `Wait` when the call can only be admitted after waiting."""
        return None

    def enter(self) -> Any:
        """`admit`, waiting on this thread if need be: the token."""
        token = self.admit()
        return token.block() if type(token) is Wait else token

    async def aenter(self) -> Any:
        """`admit` for a coroutine: waits without blocking the event loop."""
        token = self.admit()
        return await token.wait() if type(token) is Wait else token

    def exit(self, token: Any, exc: BaseException | None) -> None:
        """The admitted call ended: ``exc`` is what it raised, or ``None``."""

    def run(self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """One guarded call on this thread: `enter`, ``fn(*args, **kwargs)``, `exit`."""
        return run_through(self.admit, self.exit, fn, args, kwargs)

    def attempt(self) -> Attempt:
        """One guarded call, as a context manager (``with`` or ``async with``)."""
        return Attempt(self)


class Attempt:
    """One call through a `Guard`, for ``with`` and ``async with`` alike."""

    __slots__ = ("guard", "token")

    def __init__(self, guard: Guard) -> None:
        self.guard = guard
        self.token: Any = None

    def __enter__(self) -> Attempt:
        self.token = self.guard.enter()
        return self

    async def __aenter__(self) -> Attempt:
        self.token = await self.guard.aenter()
        return self

    def __exit__(
        self, tp: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.guard.exit(self.token, exc)

    async def __aexit__(
        self, tp: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.guard.exit(self.token, exc)
