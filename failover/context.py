"""The per-call contexts: `CallContext` (internal, shared by the execution layer and the handler
chain) and the frozen `RecoverContext` handed to policies, hooks and splitters."""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from .policy import ExceptionPolicy

if TYPE_CHECKING:
    from .definition import FailoverDefinition
    from .payload import ReferentialPayload

__all__ = ["CallContext", "Miss", "PolicyLike", "RecoverContext"]

T = TypeVar("T")


class Miss(enum.Enum):
    """Why recovery found nothing (used in the note added to a re-raised exception)."""

    MISS = "no stored entry"
    EXPIRED = "the stored entry had expired"
    ERROR = "the store failed while recovering"


class CallContext:
    """One call: its definition, its arguments (without ``self``/``cls``), and its time.

    Internal and mutable only in ``now``, which the core sets when the upstream answers, and in
    the key, computed on first use and carried.
    """

    # Also built field by field in `call.call_of` (no __init__ frame on the hot path): a new
    # field goes there too.
    __slots__ = (
        "_arguments",
        "args",
        "binder",
        "definition",
        "kwargs",
        "now",
        "stored_key",
        "values",
    )

    def __init__(
        self,
        definition: FailoverDefinition,
        binder: Any,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        values: tuple[Any, ...],
    ) -> None:
        self.definition = definition
        self.binder = binder
        self.args = args
        self.kwargs = kwargs
        self.values = values
        self.now: datetime | None = None
        self._arguments: Mapping[str, Any] | None = None
        # The stored key, computed once when a layer first needs it (`handlers.key_of`).
        self.stored_key: str | None = None

    @property
    def arguments(self) -> Mapping[str, Any]:
        """The bound arguments by parameter name, defaults applied."""
        if self._arguments is None:
            self._arguments = dict(zip(self.binder.names, self.values, strict=True))
        return self._arguments


@dataclass(frozen=True, slots=True)
class RecoverContext(Generic[T]):
    """What a policy, an ``on_recovered`` hook or a splitter learns about a failed call.

    Attributes:
        definition: the failover's resolved settings.
        arguments: the bound arguments by parameter name (defaults applied, no ``self``/``cls``).
        cause: the exception that triggered recovery.
        recovered: the envelope found in the store, or ``None``.
        return_type: the function's return annotation (the awaited type for ``async def``).
    """

    definition: FailoverDefinition
    arguments: Mapping[str, Any]
    cause: BaseException | None
    recovered: ReferentialPayload[T] | None
    return_type: Any


PolicyLike = ExceptionPolicy | str | Callable[[RecoverContext[Any]], object]
"""What ``policy=`` accepts: a built-in policy, its name, or ``policy(ctx)``."""
