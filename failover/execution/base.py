"""What every execution guard is: an object that admits or refuses a call and hears how it ended.

A guard is shared by every call of its failover, so per-call state travels in the token that
`Guard.enter` returns and `Guard.exit` receives. The call (`failover.call.Call`) drives them
through the failover's `Execution` when it is entered; `Guard.attempt` wraps the same two methods
for ``with`` and ``async with``, for a guard used on its own.
"""

from __future__ import annotations

from types import TracebackType
from typing import Any, ClassVar

__all__ = ["Attempt", "Guard"]


class Guard:
    """Admits a call (`enter`) and learns its end (`exit`).

    Attributes:
        refusals: the exceptions `enter` raises to refuse a call; they always trigger recovery,
            whatever the failover's ``exceptions=`` says.
    """

    refusals: ClassVar[tuple[type[Exception], ...]] = ()

    def enter(self) -> Any:
        """Admit the call or raise one of `refusals`; may block (a bulkhead waiting for a
        permit). Returns the token `exit` gets back."""
        return None

    async def aenter(self) -> Any:
        """`enter` for a coroutine: waits without blocking the event loop."""
        return self.enter()

    def exit(self, token: Any, exc: BaseException | None) -> None:
        """The admitted call ended: ``exc`` is what it raised, or ``None``."""

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
