"""The built-in splitters: `ListSplitter` (``list[T]`` results, per item) and `DictSplitter`
(``dict[K, V]`` results, per entry), on what they share (`EntitySplitter`: the requested keys,
the slices' contexts, strictness)."""

from __future__ import annotations

import types
import typing
from collections.abc import Callable, Hashable, Iterable, Mapping
from typing import Any, Generic, TypeVar

from ..context import RecoverContext
from ..errors import ConfigurationError
from .contexts import SLICE_ARGUMENT, CallArguments, StoreContext, asked_contexts

__all__ = ["DictSplitter", "EntitySplitter", "ListSplitter", "unoptional"]

T = TypeVar("T")
K = TypeVar("K")
V = TypeVar("V")


def _keys(value: Any) -> Iterable[Any]:
    """The default requested keys from the first argument: a string split on commas, ``None``
    for nothing, anything else iterated."""
    if value is None:
        return ()
    if isinstance(value, str):
        return [part for part in (p.strip() for p in value.split(",")) if part]
    keys: Iterable[Any] = value  # any iterable of keys
    return keys


class EntitySplitter:
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
        """The entity keys a call asks for, in order, a key asked twice twice (a stale answer
        has the shape the live one would have had)."""
        arguments = ctx.arguments
        if self.keys_from_args is None:
            keys = _keys(next(iter(arguments.values()), None))  # the first parameter's value
        elif isinstance(arguments, CallArguments):
            keys = self.keys_from_args(*arguments.args, **arguments.kwargs)
        else:  # a context built by hand: the arguments by name are all there is
            keys = self.keys_from_args(**arguments)
        keys = list(keys)
        dict.fromkeys(keys)  # entity keys are hashable, as item_key's are: TypeError if not
        return keys

    def narrowed(
        self, args: tuple[Any, ...], kwargs: Mapping[str, Any], keys: list[Hashable]
    ) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
        """The arguments (without ``self``/``cls``) of the same call asking for ``keys`` only,
        so that the upstream is called for the slices that are not fresh (``fresh_for``);
        ``None`` when the keys cannot be put back: a ``keys_from_args`` of your own, or keys
        not passed as the first positional argument.

        The first argument keeps its kind: a list, tuple, set or frozenset of the keys, or a
        comma-separated string of them (string keys only)."""
        if self.keys_from_args is not None or not args:
            return None
        first = args[0]
        narrowed: Any
        if isinstance(first, str):
            if not all(isinstance(k, str) for k in keys):
                return None
            narrowed = ",".join(typing.cast(list[str], keys))
        elif type(first) in (list, tuple, set, frozenset):
            narrowed = type(first)(keys)
        else:
            return None
        return (narrowed, *args[1:]), dict(kwargs)

    def split_on_recover(self, ctx: RecoverContext[Any]) -> list[RecoverContext[Any]]:
        """One slice per requested entity key, in request order."""
        return self.slices_of(ctx, self.requested(ctx))

    def slices_of(
        self, ctx: RecoverContext[Any], keys: list[Hashable]
    ) -> list[RecoverContext[Any]]:
        """One slice of the call ``ctx`` per entity key of ``keys`` (`requested`'s), in order."""
        rt = self.slice_type(ctx.return_type)
        return asked_contexts(
            ctx.definition, [{SLICE_ARGUMENT: key} for key in keys], ctx.cause, rt
        )

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


def unoptional(tp: Any) -> Any:
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return tp


def _arg(tp: Any, index: int) -> Any:
    args = typing.get_args(unoptional(tp))
    return args[index] if len(args) > index else Any


class ListSplitter(EntitySplitter, Generic[T]):
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

    The merged list follows the requested keys, a key asked twice answered twice, as a live
    answer would be; a call recovering every slice gets them ordered by entity key.

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
        if slices and slices[0].arguments and not self.strict:  # the commonest: one pass
            return self.merge_values(s.recovered.payload for s in slices if s.recovered is not None)
        found = self.found(slices)
        if found is None:
            return None
        pairs, everything = found
        pairs = [(key, item) for key, item in pairs if item is not None]  # as `merge_values`
        if everything:
            pairs = _sorted([(self.key_of(item), item) for _, item in pairs])
        return [item for _, item in pairs] or None

    def merge_values(self, values: Iterable[Any]) -> list[T] | None:
        """`merge` of slices asked for by key (not a recover-all) and not ``strict``, from the
        values found, in request order: the recovery's bulk path (no context per slice)."""
        # A None is never an item a ListSplitter stored (it has no key): it is what a single-
        # entity failover of the domain (`T | None`) stored for an entity that does not exist.
        return [item for item in values if item is not None] or None

    def slice_type(self, return_type: Any) -> Any:
        """``T`` of a ``list[T]`` return type."""
        return _arg(return_type, 0)


class DictSplitter(EntitySplitter, Generic[K, V]):
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
