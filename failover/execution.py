"""The execution layer: how the upstream is called. Basic is a plain call; breaker, bulkhead and
soft timeout wrap it behind the same `Execution` protocol."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from .context import CallContext

__all__ = ["BasicExecution", "Execution"]


class Execution(Protocol):
    """Calls the upstream; raises what it raises (or a refusal such as ``BulkheadFull``)."""

    def call(
        self,
        ctx: CallContext,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Any:
        """Call a synchronous upstream."""
        ...

    async def acall(
        self,
        ctx: CallContext,
        fn: Callable[..., Awaitable[Any]],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Any:
        """Await an asynchronous upstream."""
        ...


class BasicExecution:
    """Call the upstream, nothing more."""

    def __repr__(self) -> str:
        return "BasicExecution()"

    def call(
        self,
        ctx: CallContext,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Any:
        """``fn(*args, **kwargs)``."""
        return fn(*args, **kwargs)

    async def acall(
        self,
        ctx: CallContext,
        fn: Callable[..., Awaitable[Any]],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Any:
        """``await fn(*args, **kwargs)``."""
        return await fn(*args, **kwargs)
