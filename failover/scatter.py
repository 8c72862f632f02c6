"""Scatter / gather: a collection result stored and recovered per entity (one *slice* each).

A failover with ``splitter=`` stores each entity of a live result as an entry of its own, keyed
as a call with that entity's key as its only argument; on failure it finds the slices a call
asks for in one batch and merges them. So ``find_by_codes("DE,FR")`` recovers from what
``find_all()`` stored, and, with a shared ``domain``, a single-entity failover
(``find_country("FR")``) and a collection failover address the same entries.

`ListSplitter` does ``list[T]`` results and `DictSplitter` ``dict[K, V]`` results; any object
with the three methods of `PayloadSplitter` does the rest.
"""

from __future__ import annotations

import inspect
import types
import typing
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar, runtime_checkable

from .context import RecoverContext
from .errors import ConfigurationError

if TYPE_CHECKING:
    from .definition import FailoverDefinition
    from .payload import ReferentialPayload

__all__ = [
    "DictSplitter",
    "ListSplitter",
    "PayloadSplitter",
    "StoreContext",
    "check_splitter",
    "slice_context",
    "slice_type",
]

T = TypeVar("T")
R = TypeVar("R")
K = TypeVar("K")
V = TypeVar("V")

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


def _keys(value: Any) -> Iterable[Any]:
    """The default requested keys from the first argument: a string split on commas, ``None``
    for nothing, anything else iterated."""
    if value is None:
        return ()
    if isinstance(value, str):
        return [part for part in (p.strip() for p in value.split(",")) if part]
    keys: Iterable[Any] = value  # any iterable of keys
    return keys


class _EntitySplitter:
    """What the built-in splitters share: requested keys, slice contexts, strictness."""

    __slots__ = ("item_key", "keys_from_args", "strict")

    def __init__(
        self,
        item_key: Callable[[Any], Hashable] | str | None,
        keys_from_args: Callable[..., Iterable[Hashable]] | None,
        strict: bool,
        owner: str,
    ) -> None:
        if isinstance(item_key, str):
            if not item_key:
                raise ConfigurationError(f"{owner}: item_key must be a non-empty attribute name")
            self.item_key: Callable[[Any], Hashable] | None = _getter(item_key)
        elif item_key is None or callable(item_key):
            self.item_key = item_key
        else:
            raise ConfigurationError(
                f"{owner}: item_key must be an attribute name or a callable, got {item_key!r}"
            )
        if keys_from_args is not None and not callable(keys_from_args):
            raise ConfigurationError(
                f"{owner}: keys_from_args must be callable, got {keys_from_args!r}"
            )
        if not isinstance(strict, bool):
            raise ConfigurationError(f"{owner}: strict must be True or False, got {strict!r}")
        self.keys_from_args = keys_from_args
        self.strict = strict

    def requested(self, ctx: RecoverContext[Any]) -> list[Hashable]:
        """The entity keys a call asks for, in order, each once."""
        arguments = ctx.arguments
        if self.keys_from_args is None:
            keys = _keys(next(iter(arguments.values()), None))  # the first parameter's value
        elif isinstance(arguments, CallArguments):
            keys = self.keys_from_args(*arguments.args, **arguments.kwargs)
        else:  # a context built by hand: the arguments by name are all there is
            keys = self.keys_from_args(**arguments)
        return list(dict.fromkeys(keys))

    def split_on_recover(self, ctx: RecoverContext[Any]) -> list[RecoverContext[Any]]:
        """One slice per requested entity key, in request order."""
        d, cause, rt = ctx.definition, ctx.cause, self.slice_type(ctx.return_type)
        keys = self.requested(ctx)
        return [slice_context(d, {SLICE_ARGUMENT: key}, cause, None, rt) for key in keys]

    def found(self, slices: list[RecoverContext[Any]]) -> tuple[list[tuple[Any, Any]], bool] | None:
        """``(key, payload)`` of each found slice, in order (keys ``None`` for a recover-all),
        and whether this is a recover-all; ``None`` when ``strict`` and a slice is missing."""
        everything = bool(slices) and not slices[0].arguments
        found = [
            (s.arguments.get(SLICE_ARGUMENT), s.recovered.payload)
            for s in slices
            if s.recovered is not None
        ]
        if self.strict and len(found) < len(slices):
            return None
        return found, everything

    def key_of(self, item: Any) -> Any:
        """The entity key of a stored value (needs ``item_key``)."""
        if self.item_key is None:
            raise TypeError(
                f"{self!r} needs item_key= to tell which entity a stored value is "
                "(a call recovering every slice has no requested keys)"
            )
        return self.item_key(item)

    def slice_type(self, return_type: Any) -> Any:
        """The type of one slice, given the failover's return type (``Any`` when unknown)."""
        raise NotImplementedError


def _getter(name: str) -> Callable[[Any], Hashable]:
    def get(item: Any) -> Hashable:
        # Dict items (JSON-like results) by key, anything else by attribute.
        key: Hashable = item[name] if isinstance(item, Mapping) else getattr(item, name)
        return key

    get.__qualname__ = repr(name)  # shows as item_key='code' in the splitter's repr
    return get


def _sorted(pairs: list[tuple[Any, Any]]) -> list[tuple[Any, Any]]:
    """Pairs in the order of their keys when the keys compare, else as they are."""
    try:
        return sorted(pairs, key=lambda pair: pair[0])
    except TypeError:
        return pairs


def _unoptional(tp: Any) -> Any:
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return tp


def _arg(tp: Any, index: int) -> Any:
    args = typing.get_args(_unoptional(tp))
    return args[index] if len(args) > index else Any


class ListSplitter(_EntitySplitter, Generic[T]):
    """Splits ``list[T]`` results per item.

    Args:
        item_key: the entity key of an item: a callable ``item -> key``, or an attribute name
            (a key, for dict items).
        keys_from_args: receives the call's arguments as the decorated function does (without
            ``self``/``cls``) and returns the requested entity keys. Default: the first
            argument, split on commas when it is a string (``"FR, DE"``), else iterated (a
            list or a tuple); ``None`` asks for nothing. Its keys must equal what ``item_key``
            returns, type included (``1`` is not ``"1"``).
        strict: any missing slice makes the whole recovery a miss (the exception policy
            decides), instead of returning the items found.

    The merged list follows the requested keys (each once); a call recovering every slice
    gets them ordered by entity key.

    Raises:
        ConfigurationError: a setting that cannot work.
    """

    __slots__ = ()

    def __init__(
        self,
        item_key: Callable[[T], Hashable] | str,
        keys_from_args: Callable[..., Iterable[Hashable]] | None = None,
        strict: bool = False,
    ) -> None:
        if item_key is None:
            raise ConfigurationError("ListSplitter: item_key is required")
        super().__init__(item_key, keys_from_args, strict, "ListSplitter")

    def __repr__(self) -> str:
        return f"{type(self).__name__}(item_key={_name(self.item_key)}, strict={self.strict})"

    def split_on_store(self, ctx: StoreContext[list[T]]) -> list[StoreContext[T]]:
        """One slice per item, keyed by its entity key."""
        items = ctx.payload
        if not isinstance(items, list | tuple):
            # Iterating anything else (a generator) could consume the caller's live result.
            raise TypeError(f"ListSplitter splits lists, got {type(items).__name__}")
        d, key = ctx.definition, self.key_of
        return [StoreContext(d, {SLICE_ARGUMENT: key(item)}, item) for item in items]

    def merge(
        self, ctx: RecoverContext[list[T]], slices: list[RecoverContext[T]]
    ) -> list[T] | None:
        """The items found, in request order (by entity key for a recover-all)."""
        found = self.found(slices)
        if found is None:
            return None
        pairs, everything = found
        if everything:
            pairs = _sorted([(self.key_of(item), item) for _, item in pairs])
        return [item for _, item in pairs] or None

    def slice_type(self, return_type: Any) -> Any:
        """``T`` of a ``list[T]`` return type."""
        return _arg(return_type, 0)


class DictSplitter(_EntitySplitter, Generic[K, V]):
    """Splits ``dict[K, V]`` results (entity key → value) per entry.

    Args:
        keys_from_args: as for `ListSplitter`; its keys must equal the result's keys.
        item_key: the entity key of a value (a callable or an attribute name); needed only by
            calls that recover every slice (``recover_all=True`` or no arguments), which have
            no requested keys to rebuild the dict with.
        strict: any missing slice makes the whole recovery a miss.

    Raises:
        ConfigurationError: a setting that cannot work.
    """

    __slots__ = ()

    def __init__(
        self,
        keys_from_args: Callable[..., Iterable[Hashable]] | None = None,
        item_key: Callable[[V], Hashable] | str | None = None,
        strict: bool = False,
    ) -> None:
        super().__init__(item_key, keys_from_args, strict, "DictSplitter")

    def __repr__(self) -> str:
        return f"{type(self).__name__}(item_key={_name(self.item_key)}, strict={self.strict})"

    def split_on_store(self, ctx: StoreContext[dict[K, V]]) -> list[StoreContext[V]]:
        """One slice per entry, keyed by the entry's key."""
        entries = ctx.payload
        if not isinstance(entries, Mapping):
            raise TypeError(f"DictSplitter splits mappings, got {type(entries).__name__}")
        d = ctx.definition
        return [StoreContext(d, {SLICE_ARGUMENT: k}, v) for k, v in entries.items()]

    def merge(
        self, ctx: RecoverContext[dict[K, V]], slices: list[RecoverContext[V]]
    ) -> dict[K, V] | None:
        """The entries found, in request order (by key for a recover-all)."""
        found = self.found(slices)
        if found is None:
            return None
        pairs, everything = found
        if everything:
            pairs = _sorted([(self.key_of(value), value) for _, value in pairs])
        return dict(pairs) or None

    def slice_type(self, return_type: Any) -> Any:
        """``V`` of a ``dict[K, V]`` return type."""
        return _arg(return_type, 1)


def _name(item_key: Callable[..., Any] | None) -> str:
    return "None" if item_key is None else getattr(item_key, "__qualname__", repr(item_key))


# -- for the decorator and the engine ----------------------------------------------------------


def check_splitter(splitter: object, recover_all: object, owner: str) -> Any:
    """Validate ``splitter=`` and ``recover_all=`` of a failover (``owner``: ``"failover 'x'"``);
    returns the splitter.

    Raises:
        ConfigurationError: not a splitter, or ``recover_all`` without one.
    """
    if splitter is not None and not isinstance(splitter, PayloadSplitter):
        raise ConfigurationError(
            f"{owner}: splitter= must have split_on_store(), split_on_recover() and merge(), "
            f"got {splitter!r}"
        )
    if recover_all and splitter is None:
        raise ConfigurationError(f"{owner}: recover_all=True needs a splitter=")
    return splitter


_UNKNOWN = (Any, object, None, type(None))


def slice_type(definition: FailoverDefinition, return_type: Any) -> Any:
    """What one entry of ``definition``'s effective name holds, as far as can be told: its
    return type, or a built-in splitter's slice type; ``None`` when unknown."""
    splitter = definition.splitter
    if splitter is None:
        tp = return_type
    elif isinstance(splitter, _EntitySplitter):
        tp = splitter.slice_type(return_type)
    else:
        return None
    tp = _unoptional(tp)
    if tp in _UNKNOWN or tp is inspect.Signature.empty or isinstance(tp, str | TypeVar):
        return None
    # Generic arguments do not change how a value decodes (a JSON dict is a dict).
    return typing.get_origin(tp) or tp
