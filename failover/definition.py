"""A failover's resolved settings, fixed at decoration time."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable

from .policy import ExceptionPolicy

if TYPE_CHECKING:
    from .payload import ReferentialPayload

__all__ = ["ExpiryPolicy", "FailoverDefinition"]


def _no_defaults() -> Mapping[str, Any]:
    return {}


@runtime_checkable
class ExpiryPolicy(Protocol):
    """Decides when a stored entry expires, and whether a found one has."""

    def compute_expiry(self, definition: FailoverDefinition, now: datetime) -> datetime:
        """The expiry time of an entry stored at ``now``."""
        ...

    def is_expired(self, payload: ReferentialPayload[Any], now: datetime) -> bool:
        """Whether ``payload`` must no longer be served at ``now``."""
        ...


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class FailoverDefinition:
    """The resolved settings of one decorated function (``.definition``).

    Attributes:
        name: the failover's own name.
        domain: the shared namespace, or ``None``.
        effective_name: ``domain or name``: the name entries are stored under.
        ttl: the time to live when no custom ``expiry`` is set.
        expiry: the expiry policy in force.
        policy: the exception policy, or ``None`` for the engine's.
        breaker: the circuit breaker (``True``: one per name from the engine's defaults).
        max_concurrency: the permits of the failover's private bulkhead, or ``None``.
        acquire_timeout: seconds a call waits for bulkhead permits; ``None``: without limit.
        timeout: the soft timeout in seconds, or ``None``.
        store_interval: write coalescing interval, or ``None`` for the engine's.
        function: the wrapped function's ``module.qualname``.
        is_async: whether the wrapped function is ``async def``.
        is_method: whether the first parameter (``self``/``cls``) is left out of keys.
        weight: bulkhead permits one call takes.
        bulkhead: the name of the shared bulkhead pool the failover draws from, or ``None``.
        single_flight: concurrent calls with the same key share one upstream call
            (``"fleet"``: across the processes of the engine's fleet).
        label: what labels the failover's stored entries: ``None`` (none, the default),
            ``True`` (the call's arguments) or a callable of the call's arguments (see
            `failover.labels`).
        breaker_defaults: reads the ``breaker_defaults`` of the engine the failover runs on
            (what ``breaker=True`` makes its breaker from), for `execution` to show.
        fresh_for: the cache-first window: an entry younger than this is served without
            calling the upstream (a callable: the window of each entry, asked of its payload
            and the call's arguments); ``None``: every call calls the upstream.
        refresh_ahead: the age at which an entry served within ``fresh_for`` is refreshed in
            the background; ``None``: never ahead.
        rate: the rate limit, ``(count, per seconds)``, or ``None``.
        throttle: the fail-safe throttle: how long a key served stale after a failure is
            served stale without calling the upstream; ``None``: never.
        ttl_jitter: the most of an entry's ttl taken off, spread by its key
            (`failover.adaptive`).
        tags: a callable of the call's arguments returning the entry's tags, or ``None``.
    """

    name: str
    domain: str | None
    effective_name: str
    ttl: timedelta
    expiry: ExpiryPolicy
    key: Callable[..., object] | None
    exceptions: tuple[type[BaseException], ...] | Callable[[Exception], bool]
    exclude: tuple[type[BaseException], ...]
    store_if: Callable[[Any], bool] | None
    # Callables of a RecoverContext: typed loosely here, since the context names this class.
    policy: ExceptionPolicy | Callable[..., object] | None
    on_recovered: Callable[..., object] | None
    splitter: Any
    recover_all: bool
    breaker: Any
    max_concurrency: int | None
    acquire_timeout: float | None
    timeout: float | None
    store_interval: timedelta | None
    function: str
    is_async: bool
    is_method: bool
    return_annotation: Any = field(default=None, repr=False)
    weight: int = 1
    bulkhead: str | None = None
    single_flight: bool | str = False
    label: Callable[..., object] | bool | None = None
    breaker_defaults: Callable[[], Mapping[str, Any]] = field(default=_no_defaults, repr=False)
    # A callable of the result and the arguments (`failover.adaptive`), or a fixed window.
    fresh_for: timedelta | Callable[..., object] | None = None
    refresh_ahead: timedelta | None = None
    rate: tuple[int, float] | None = None
    throttle: timedelta | None = None
    ttl_jitter: float = 0.0
    tags: Callable[..., Any] | None = None

    def __repr__(self) -> str:
        policy = "engine's" if self.policy is None else getattr(self.policy, "value", self.policy)
        domain = f", domain={self.domain!r}" if self.domain else ""
        return (
            f"FailoverDefinition({self.name!r}{domain}, ttl={self.ttl}, policy={policy!r}, "
            f"execution={self.execution!r}, function={self.function!r})"
        )

    # Set by `failover.execution.order`, which knows the guards and their one order: a
    # definition describes them without importing them (the execution layer sits above it).
    describe: ClassVar[Callable[[FailoverDefinition], str]] = staticmethod(lambda d: "basic")

    @property
    def execution(self) -> str:
        """The execution in use, outermost first: ``"basic"``, or e.g.
        ``"bulkhead(8) > breaker(fail_max 5, reset 60s) > timeout(2s)"`` or
        ``"bulkhead('exports', weight 5)"``. A breaker shows the settings it trips and resets
        by: its own, or for ``breaker=True`` the engine's ``breaker_defaults`` over pybreaker's
        (``fail_max`` 5, ``reset_timeout`` 60 s)."""
        return FailoverDefinition.describe(self)

    def accepts(self, exc: Exception) -> bool:
        """Whether ``exc`` triggers recovery under ``exceptions=`` and ``exclude=``."""
        if self.exclude and isinstance(exc, self.exclude):
            return False
        if isinstance(self.exceptions, tuple):
            return isinstance(exc, self.exceptions)
        return bool(self.exceptions(exc))
