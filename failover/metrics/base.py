"""The `Metrics` interface layers report through, `NullMetrics` (metrics off), and what keeps a
failing metric out of a call (`safe`, `SafeMetrics`).

A custom metrics object implements the `Metrics` Protocol or subclasses `NullMetrics` (whose
methods do nothing), and overrides what it counts."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, ParamSpec, Protocol

if TYPE_CHECKING:
    from ..health import PoolStats
    from ..recorder import FailoverStats

__all__ = [
    "METHODS",
    "NULL_METRICS",
    "Metrics",
    "NullMetrics",
    "SafeMetrics",
    "failed",
    "safe",
]

log = logging.getLogger("failover.metrics")
P = ParamSpec("P")


class Metrics(Protocol):
    """What layers report. Every method must be cheap and must never raise.

    The methods do nothing by default: subclass to count only some things.
    """

    def stored(self, name: str, ok: bool, seconds: float) -> None:
        """A write of a live result on the caller's thread: ``ok`` (written) or failed; with
        async writes, one the queue refused (``ok`` is then `write_queued`)."""
        return None

    def recovered(
        self, name: str, outcome: str, seconds: float, stale_age: float | None = None
    ) -> None:
        """A recovery: ``outcome`` is ``recovered``, ``not_recovered`` or ``error``."""
        return None

    def partial(self, name: str) -> None:
        """A scatter/gather recovery that found some slices only."""
        return None

    def circuit_state(self, name: str, state: int) -> None:
        """The circuit breaker of ``name`` is now closed (0), half-open (1) or open (2)."""
        return None

    def refused(self, name: str, guard: str, pool: str | None = None) -> None:
        """Guard ``guard`` (``bulkhead``, ``breaker``, ``timeout``…) refused a call of ``name``,
        which went to recovery; ``pool``: the bulkhead pool, for a bulkhead's refusal."""
        return None

    def hook_failed(self, name: str) -> None:
        """The ``on_recovered`` hook of ``name`` raised (the caller got the recovered value)."""
        return None

    def write_queued(self, name: str, seconds: float) -> None:
        """A write of a live result handed to the async-writes queue in ``seconds`` (the queue
        reports what becomes of it: `write_results`)."""
        return None

    def write_results(self, name: str, result: str, count: int = 1) -> None:
        """``count`` writes of the entries of ``name`` (the failover's effective name) through
        the async-writes queue: ``queued`` as its worker takes them (off the callers' threads),
        then each ``written``, ``failed`` or ``superseded``; a write the queue drops is
        ``queued`` and ``failed`` at once. A write overtaken by a later one of its key while
        queued counts as written: the later one is written in its place. ``superseded``: a
        newer entry of its key (a later ``as_of``) is stored or queued, so it was not written
        (entries only move forward); made on the caller's thread, the count of such entries of
        one write."""
        return None

    def async_queue(self, size: int) -> None:
        """The async-writes queue now holds ``size`` writes."""
        return None

    def async_dropped(self, count: int = 1) -> None:
        """Writes discarded at a full async-writes queue."""
        return None

    def async_failed(self, count: int = 1) -> None:
        """Writes the async-writes worker could not write."""
        return None

    def cleanup(self, removed: int, seconds: float) -> None:
        """One cleanup run."""
        return None

    def track(self, stats: FailoverStats) -> None:
        """A registered failover's call statistics, to read when collecting (per-call counts
        are not pushed: reading them at collection keeps the call path cheap)."""
        return None

    def track_pool(self, pool: PoolStats) -> None:
        """A bulkhead pool, whose permits in use and waiters are read when collecting."""
        return None


METHODS = tuple(name for name in vars(Metrics) if not name.startswith("_"))
"""The methods of `Metrics`: every custom metrics object has them all."""


class NullMetrics(Metrics):
    """Counts nothing."""


NULL_METRICS = NullMetrics()


def safe(method: Callable[P, None]) -> Callable[P, None]:
    """Metrics never raise into a call: a failing update is logged once and dropped."""

    @functools.wraps(method)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> None:
        try:
            method(*args, **kwargs)
        except Exception:
            failed()

    return wrapper


_warned: list[bool] = []


def failed() -> None:
    """Log the first failing metric update, once per process."""
    if not _warned:
        _warned.append(True)
        log.warning("failover: updating a metric failed", exc_info=True)


class SafeMetrics(Metrics):
    """A custom `Metrics` behind `safe`: its failures are dropped, never raised into a call
    (a raising ``recovered`` would otherwise turn a hit into a miss)."""

    def __init__(self, inner: Metrics) -> None:
        self.inner = inner
        # Instance attributes: they take precedence over the Protocol's no-op methods.
        vars(self).update({name: safe(getattr(inner, name)) for name in METHODS})

    def __repr__(self) -> str:
        return repr(self.inner)
