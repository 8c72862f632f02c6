"""Counting what the library does. Layers report through the small `Metrics` interface;
`NullMetrics` is the no-op used when metrics are off. Metrics never raise into a call."""

from __future__ import annotations

from typing import Protocol

__all__ = ["NULL_METRICS", "Metrics", "NullMetrics"]


class Metrics(Protocol):
    """What layers report. Every method must be cheap and must never raise."""

    def stored(self, name: str, ok: bool, seconds: float) -> None:
        """A store of a live result: ``ok`` or failed."""
        ...

    def recovered(
        self, name: str, outcome: str, seconds: float, stale_age: float | None = None
    ) -> None:
        """A recovery: ``outcome`` is ``recovered``, ``not_recovered`` or ``error``."""
        ...

    def partial(self, name: str) -> None:
        """A scatter/gather recovery that found some slices only."""
        ...

    def async_queue(self, size: int) -> None:
        """The async-writes queue now holds ``size`` writes."""
        ...

    def async_dropped(self, count: int = 1) -> None:
        """Writes discarded at a full async-writes queue."""
        ...

    def async_failed(self, count: int = 1) -> None:
        """Writes the async-writes worker could not write."""
        ...

    def cleanup(self, removed: int, seconds: float) -> None:
        """One cleanup run."""
        ...


class NullMetrics:
    """Counts nothing."""

    def stored(self, name: str, ok: bool, seconds: float) -> None:
        """Nothing."""

    def recovered(
        self, name: str, outcome: str, seconds: float, stale_age: float | None = None
    ) -> None:
        """Nothing."""

    def partial(self, name: str) -> None:
        """Nothing."""

    def async_queue(self, size: int) -> None:
        """Nothing."""

    def async_dropped(self, count: int = 1) -> None:
        """Nothing."""

    def async_failed(self, count: int = 1) -> None:
        """Nothing."""

    def cleanup(self, removed: int, seconds: float) -> None:
        """Nothing."""


NULL_METRICS = NullMetrics()
