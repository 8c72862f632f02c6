"""The per-call context the execution layer and the handler chain share."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .definition import FailoverDefinition

__all__ = ["CallContext", "Miss"]


class Miss(enum.Enum):
    """Why recovery found nothing (used in the note added to a re-raised exception)."""

    MISS = "no stored entry"
    EXPIRED = "the stored entry had expired"
    ERROR = "the store failed while recovering"


class CallContext:
    """One call: its definition, its arguments (without ``self``/``cls``), and its time.

    Internal and mutable only in ``now``, which the core sets when the upstream answers.
    """

    # Also built field by field in `Runtime.context` (no __init__ frame on the hot path): a new
    # field goes there too.
    __slots__ = ("_arguments", "args", "binder", "definition", "kwargs", "now", "values")

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

    @property
    def arguments(self) -> Mapping[str, Any]:
        """The bound arguments by parameter name, defaults applied."""
        if self._arguments is None:
            self._arguments = dict(zip(self.binder.names, self.values, strict=True))
        return self._arguments
