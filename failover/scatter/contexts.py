"""What a splitter is given and returns: `StoreContext` (a live result to store, whole or one
slice), `PayloadSplitter` (the three methods) and `Narrowing` (an optional fourth),
`CallArguments` (a call's arguments, the call kept), and `slice_context`, the fast way to build a
slice's `RecoverContext`."""

from __future__ import annotations

import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar, runtime_checkable

from ..context import RecoverContext

if TYPE_CHECKING:
    from ..definition import FailoverDefinition
    from ..payload import ReferentialPayload

__all__ = [
    "SLICE_ARGUMENT",
    "CallArguments",
    "Narrowing",
    "PayloadSplitter",
    "StoreContext",
    "asked_contexts",
    "slice_context",
    "slice_contexts",
]

T = TypeVar("T")
R = TypeVar("R")

SLICE_ARGUMENT = "key"
"""The parameter name the built-in splitters give a slice's one argument (keys ignore names)."""


@dataclass(frozen=True, slots=True)
class StoreContext(Generic[T]):
    """A live result to store: the whole call's, or (from ``split_on_store``) one slice's.

    Attributes:
        definition: the failover's resolved settings.
        arguments: the call's bound arguments by parameter name; for a slice, the arguments of
            the call it is keyed as (its values, in order, make its key).
        payload: the value to store.
    """

    definition: FailoverDefinition
    arguments: Mapping[str, Any]
    payload: T


@runtime_checkable
class PayloadSplitter(Protocol[T, R]):
    """Splits a collection result ``T`` into slices ``R`` and merges recovered slices back.

    A slice is stored under the key a call with the slice's ``arguments`` would get (their
    values in order; names do not count), in the failover's effective name: give a slice the
    one argument a single-entity function takes and both share entries through ``domain=``.

    Errors raised here reach the caller as `failover.errors.SplitterError` (never on the store
    path, where the live result still returns).
    """

    def split_on_store(self, ctx: StoreContext[T]) -> list[StoreContext[R]]:
        """The slices of a live result, one `StoreContext` each."""
        ...

    def split_on_recover(self, ctx: RecoverContext[T]) -> list[RecoverContext[R]]:
        """The slices a failed call asks for, in request order (``recovered`` is ``None``)."""
        ...

    def merge(self, ctx: RecoverContext[T], slices: list[RecoverContext[R]]) -> T | None:
        """The value made of the slices; ``None`` makes the recovery a miss.

        ``slices`` are those of `split_on_recover`, in its order, each with ``recovered`` set
        (an envelope whose payload is already enriched as stale) or ``None``; merge is only
        called when at least one was found. When the call recovers every slice
        (``recover_all=True`` or a call without arguments), there is no request: ``slices``
        are every live slice of the effective name, each with empty ``arguments``.
        """
        ...


@runtime_checkable
class Narrowing(Protocol):
    """A splitter that can narrow a call to some of its slices (`ListSplitter` and
    `DictSplitter` can): with ``fresh_for``, a call whose slices are only partly fresh asks the
    upstream for the others alone. A splitter without ``narrowed`` asks for every slice."""

    def narrowed(
        self, args: tuple[Any, ...], kwargs: Mapping[str, Any], keys: list[Any]
    ) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
        """The arguments (without ``self``/``cls``) of the same call asking for ``keys`` only,
        or ``None`` when the keys cannot be put back into them."""
        ...


class CallArguments(Mapping[str, Any]):
    """A call's bound arguments by parameter name (defaults applied), which also keeps the call
    as it was made: ``args`` and ``kwargs`` without ``self``/``cls``."""

    __slots__ = ("_names", "args", "kwargs")

    def __init__(
        self, names: Mapping[str, Any], args: tuple[Any, ...], kwargs: Mapping[str, Any]
    ) -> None:
        self._names = names
        self.args = args
        self.kwargs = kwargs

    def __getitem__(self, name: str) -> Any:
        return self._names[name]

    def __iter__(self) -> typing.Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)

    def __repr__(self) -> str:
        return repr(dict(self._names))


class _Building(Generic[T]):
    """Same slots as `RecoverContext`, but mutable: a context under construction."""

    __slots__ = RecoverContext.__slots__


_new = object.__new__


def slice_context(
    definition: FailoverDefinition,
    arguments: Mapping[str, Any],
    cause: BaseException | None,
    recovered: ReferentialPayload[T] | None,
    return_type: Any,
) -> RecoverContext[T]:
    """A `RecoverContext` built about twice as fast as by its frozen ``__init__`` (one per
    slice, thousands per call); an ordinary frozen instance all the same (see
    `failover.payload.envelope`)."""
    obj: Any = _new(_Building)
    obj.definition = definition
    obj.arguments = arguments
    obj.cause = cause
    obj.recovered = recovered
    obj.return_type = return_type
    obj.__class__ = RecoverContext
    built: RecoverContext[T] = obj
    return built


def asked_contexts(
    definition: FailoverDefinition,
    arguments: Sequence[Mapping[str, Any]],
    cause: BaseException | None,
    return_type: Any,
) -> list[RecoverContext[Any]]:
    """`slice_context` of each slice a call asks for (``arguments``: each slice's), nothing
    recovered yet, in one loop without a frame per slice."""
    out: list[RecoverContext[Any]] = []
    append = out.append
    for a in arguments:
        obj: Any = _new(_Building)
        obj.definition, obj.arguments, obj.cause = definition, a, cause
        obj.recovered, obj.return_type = None, return_type
        obj.__class__ = RecoverContext
        append(obj)
    return out


def slice_contexts(
    definition: FailoverDefinition,
    asked: Sequence[RecoverContext[Any]],
    recovered: Sequence[ReferentialPayload[Any] | None],
    cause: BaseException | None,
) -> list[RecoverContext[Any]]:
    """`slice_context` of each slice ``asked`` for (its arguments and return type) with what
    was ``recovered`` of it, in one loop without a frame per slice (a scatter/gather recovery
    builds thousands)."""
    out: list[RecoverContext[Any]] = []
    append = out.append
    for a, found in zip(asked, recovered, strict=True):
        obj: Any = _new(_Building)
        obj.definition = definition
        obj.arguments = a.arguments
        obj.cause = cause
        obj.recovered = found
        obj.return_type = a.return_type
        obj.__class__ = RecoverContext
        append(obj)
    return out
