"""A failover's resolved settings, fixed at decoration time."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from .policy import ExceptionPolicy

if TYPE_CHECKING:
    from .payload import ReferentialPayload

__all__ = ["ExpiryPolicy", "FailoverDefinition"]


@runtime_checkable
class ExpiryPolicy(Protocol):
    """Decides when a stored entry expires, and whether a found one has."""

    def compute_expiry(self, definition: FailoverDefinition, now: datetime) -> datetime:
        """The expiry time of an entry stored at ``now``."""
        ...

    def is_expired(self, payload: ReferentialPayload[Any], now: datetime) -> bool:
        """Whether ``payload`` must no longer be served at ``now``."""
        ...


@dataclass(frozen=True, slots=True, eq=False)
class FailoverDefinition:
    """The resolved settings of one decorated function (``.definition``).

    Attributes:
        name: the failover's own name.
        domain: the shared namespace, or ``None``.
        effective_name: ``domain or name``: the name entries are stored under.
        ttl: the time to live when no custom ``expiry`` is set.
        expiry: the expiry policy in force.
        policy: the exception policy, or ``None`` for the engine's.
        function: the wrapped function's ``module.qualname``.
        is_async: whether the wrapped function is ``async def``.
        is_method: whether the first parameter (``self``/``cls``) is left out of keys.
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
    acquire_timeout: float
    timeout: float | None
    function: str
    is_async: bool
    is_method: bool
    return_annotation: Any = field(default=None, repr=False)

    def accepts(self, exc: Exception) -> bool:
        """Whether ``exc`` triggers recovery under ``exceptions=`` and ``exclude=``."""
        if self.exclude and isinstance(exc, self.exclude):
            return False
        if isinstance(self.exceptions, tuple):
            return isinstance(exc, self.exceptions)
        return bool(self.exceptions(exc))
