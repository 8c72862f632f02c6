"""`Closeable` and `AsyncCloseable`: the optional ``close()`` / ``aclose()`` of what may hold
resources (a permit source, a tenant store factory, a store chain's async clients). Whoever
owns such an object checks the Protocol where it closes it; an object without the method holds
nothing to release."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

__all__ = ["AsyncCloseable", "Closeable"]


@runtime_checkable
class Closeable(Protocol):
    """Has ``close()``: releases what it holds (a connection pool, a renewal thread)."""

    def close(self) -> None:
        """Release what the object holds; it is not used afterwards."""
        ...


@runtime_checkable
class AsyncCloseable(Protocol):
    """Has ``aclose()``: closes what it opened on the running event loop (async clients)."""

    async def aclose(self) -> None:
        """Close this event loop's clients."""
        ...
