"""The health report: each failover's health over the last minute, and the engine's.

The per-failover record each report is read from is `failover.recorder.FailoverStats`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal, Protocol

from .errors import ConfigurationError
from .policy import ExceptionPolicy

if TYPE_CHECKING:
    from .definition import FailoverDefinition


__all__ = [
    "BREAKER_STATES",
    "OUTCOMES",
    "WINDOW",
    "FailoverHealth",
    "Failure",
    "HealthReport",
    "PoolHealth",
    "PoolStats",
    "Status",
    "settings_of",
]


class PoolStats(Protocol):
    """What health and metrics read of a bulkhead pool (`failover.execution.Pool` has these).

    Attributes:
        name: the pool's name (a private pool's is its failover's).
        permits: permits in all.
        kind: where the permits come from: ``local``, ``redis``...
        source: the `failover.PermitSource`: ``in_use()`` and ``waiting()``.
    """

    name: str
    permits: int
    kind: str
    source: Any


Status = Literal["down", "degraded", "up", "idle"]
_SEVERITY: dict[str, int] = {"down": 0, "degraded": 1, "up": 2, "idle": 3}

WINDOW = 60
"""Seconds of the sliding window health counts over."""

OUTCOMES = ("live", "recovered", "not_recovered", "fresh")
"""What a call got: the upstream's answer, a stored value after a failure, nothing usable, or
a stored value within ``fresh_for`` (the upstream not called)."""
BREAKER_STATES = ("closed", "half-open", "open")


DOWN_RATIO = 0.5
"""``down`` needs at least this share of the window's calls to have got nothing usable."""
DOWN_MIN = 5
"""... and at least this many of them: one unknown id during an outage is not an outage."""


def down_thresholds(down_ratio: float, down_min: int, owner: str) -> tuple[float, int]:
    """The checked ``down_ratio`` (0 < r <= 1) and ``down_min`` (an int >= 1).

    Raises:
        ConfigurationError: naming ``owner`` and the setting.
    """
    ratio_ok = isinstance(down_ratio, int | float) and not isinstance(down_ratio, bool)
    if not ratio_ok or not 0 < down_ratio <= 1:
        raise ConfigurationError(f"{owner}: down_ratio must be > 0 and <= 1, got {down_ratio!r}")
    if isinstance(down_min, bool) or not isinstance(down_min, int) or down_min < 1:
        raise ConfigurationError(f"{owner}: down_min must be an int >= 1, got {down_min!r}")
    return float(down_ratio), down_min


@dataclass(frozen=True, slots=True)
class Failure:
    """The latest failed upstream call: the exception's class name and when it happened."""

    type: str
    at: datetime


@dataclass(frozen=True, slots=True)
class FailoverHealth:
    """One failover's health over the window.

    Attributes:
        name: the failover's name.
        status: ``down`` (at least half the calls, and at least 5, got nothing usable: the
            thresholds of `failover.Failover.health`), ``degraded`` (fewer did, calls served
            stale, or the breaker is open), ``up`` (calls answered live), ``idle`` (no call).
        counts: calls per outcome in the window: ``live``, ``recovered``, ``not_recovered``.
        last_failure: the upstream's own latest exception (a failed upstream call), in the
            window or not; ``None`` if none. A guard's refusal (`refused`) is never one.
        breaker: ``closed``, ``half-open`` or ``open``; ``None`` without a circuit breaker.
        stale_age: the age, in seconds, of the latest value served stale; ``None`` if none.
        refused: calls refused in the window, per guard (``bulkhead``, ``breaker``,
            ``timeout``…); guards that refused none are left out. These calls are in
            ``counts`` too, by what their callers got.
    """

    name: str
    status: Status
    counts: Mapping[str, int]
    last_failure: Failure | None = None
    breaker: str | None = None
    stale_age: float | None = None
    refused: Mapping[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dictionary."""
        failure = self.last_failure
        return {
            "status": self.status,
            "counts": dict(self.counts),
            "last_failure": None
            if failure is None
            else {"type": failure.type, "at": failure.at.isoformat()},
            "breaker": self.breaker,
            "stale_age_seconds": self.stale_age,
            "refused": dict(self.refused),
        }


@dataclass(frozen=True, slots=True)
class PoolHealth:
    """One bulkhead pool, now.

    Attributes:
        name: the pool's name.
        source: where its permits come from (``local``, ``redis``).
        permits: permits in all.
        in_use: permits taken now (every process, for a Redis pool); ``None`` when the source
            could not say (its Redis is down).
        waiting: calls of this process waiting for permits now (``None`` likewise).
        rejected: calls refused since the start, per failover.
    """

    name: str
    source: str
    permits: int
    in_use: int | None
    waiting: int | None
    rejected: Mapping[str, int]

    @classmethod
    def of(cls, pool: PoolStats, rejected: Mapping[str, int]) -> PoolHealth:
        """``pool``'s counts, with its refusals per failover (``rejected``: the refusals
        its failovers' records counted); a source that fails to count gives ``None`` counts."""
        try:
            in_use: int | None = int(pool.source.in_use())
            waiting: int | None = int(pool.source.waiting())
        except Exception:
            in_use = waiting = None
        return cls(pool.name, pool.kind, pool.permits, in_use, waiting, dict(rejected))

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dictionary."""
        return {
            "source": self.source,
            "permits": self.permits,
            "in_use": self.in_use,
            "waiting": self.waiting,
            "rejected": dict(self.rejected),
        }


@dataclass(frozen=True, slots=True)
class StoreHealth:
    """A store the engine bounds with a deadline (`stores.layers.deadline.DeadlineStore`), or a
    shared dependency told as one (a `failover.RedisPermits` pool's Redis: ``permits``), now.

    Attributes:
        name: the store, as ``failover_store_up`` labels it (``sqlstore``, ``redisstore``).
        status: ``up`` (it answers), ``down`` (it is out: its latest operations timed out or
            were refused at the connection, ``store_breaker_after`` in a row, and its store
            breaker skips it; back to ``up`` at the first operation it answers).
        errors: its operations that timed out, failed or were skipped since the start, by reason
            (``timeout``, ``error``, ``breaker_open``).
    """

    name: str
    status: str
    errors: Mapping[str, int]

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dictionary."""
        return {"status": self.status, "errors": dict(self.errors)}


@dataclass(frozen=True, slots=True)
class HealthReport:
    """The health of an engine's failovers (`Failover.health`).

    Attributes:
        status: the worst status of the failovers; ``idle`` when none is registered.
        failovers: each failover's health by name, worst first.
        window: the seconds the counts cover.
        at: when the report was made (the engine's clock).
        pools: the bulkhead pools by name: permits in use, waiters, refusals.
        stores: the stores under a deadline, by name, and a `failover.RedisPermits` pool's
            Redis (``permits``): up, or down while they are out (the engine is then at least
            ``degraded``: "its store is down").
    """

    status: Status
    failovers: Mapping[str, FailoverHealth]
    window: float = WINDOW
    at: datetime | None = field(default=None, compare=False)
    pools: Mapping[str, PoolHealth] = field(default_factory=dict)
    stores: Mapping[str, StoreHealth] = field(default_factory=dict)

    @classmethod
    def of(
        cls,
        failovers: Iterable[FailoverHealth],
        at: datetime | None = None,
        pools: Iterable[PoolHealth] = (),
        stores: Iterable[StoreHealth] = (),
    ) -> HealthReport:
        """The report over ``failovers``: sorted worst first, its status the worst, and at
        least ``degraded`` while a store is down (recoveries find nothing meanwhile)."""
        ordered = sorted(failovers, key=lambda h: (_SEVERITY[h.status], h.name))
        status: Status = ordered[0].status if ordered else "idle"
        by_name = {s.name: s for s in stores}
        if any(s.status == "down" for s in by_name.values()) and status in ("up", "idle"):
            status = "degraded"
        failing = {h.name: h for h in ordered}
        return cls(status, failing, WINDOW, at, {p.name: p for p in pools}, by_name)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dictionary: what ``/health`` serves."""
        return {
            "status": self.status,
            "window_seconds": self.window,
            "at": None if self.at is None else self.at.isoformat(),
            "failovers": {name: h.to_dict() for name, h in self.failovers.items()},
            "pools": {name: p.to_dict() for name, p in self.pools.items()},
            "stores": {name: st.to_dict() for name, st in self.stores.items()},
        }


def settings_of(definition: FailoverDefinition, policy: object, store: object) -> dict[str, str]:
    """A failover's settings as short strings: ``failover_info``'s labels, the dashboard's
    columns. ``policy`` is the policy in force, ``store`` the engine's raw store."""
    return {
        "effective_name": definition.effective_name,
        "ttl_seconds": f"{definition.ttl.total_seconds():g}",
        "policy": _policy_name(policy),
        "execution": definition.execution,  # as `definition.execution` reads
        "store": type(store).__name__,
    }


def _policy_name(policy: object) -> str:
    if isinstance(policy, ExceptionPolicy):
        return policy.value
    return getattr(policy, "__qualname__", type(policy).__qualname__)  # a callable policy
