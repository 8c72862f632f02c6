"""The execution layer: how the upstream is called.

An execution wraps the upstream function once, when a failover is bound to an engine; the shells
then call the wrapped function on every call. Basic execution returns the function itself, so
it costs nothing; breaker, bulkhead and soft timeout return a wrapper behind the same protocol.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

from .definition import FailoverDefinition

__all__ = ["BasicExecution", "Execution"]

F = TypeVar("F", bound=Callable[..., Any])


class Execution(Protocol):
    """Wraps an upstream so that calling it applies the execution strategy.

    The wrapped callable raises what the upstream raises, or a refusal of its own
    (``BulkheadFull``, ``pybreaker.CircuitBreakerError``), which always triggers recovery.
    """

    def wrap(self, definition: FailoverDefinition, fn: Callable[..., Any]) -> Callable[..., Any]:
        """The synchronous upstream, wrapped."""
        ...

    def awrap(
        self, definition: FailoverDefinition, fn: Callable[..., Awaitable[Any]]
    ) -> Callable[..., Awaitable[Any]]:
        """The asynchronous upstream, wrapped."""
        ...


class BasicExecution:
    """Call the upstream, nothing more."""

    def __repr__(self) -> str:
        return "BasicExecution()"

    def wrap(self, definition: FailoverDefinition, fn: F) -> F:
        """``fn`` itself."""
        return fn

    def awrap(self, definition: FailoverDefinition, fn: F) -> F:
        """``fn`` itself."""
        return fn
