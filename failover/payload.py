"""The envelope a stored value travels in, and the enrichment of values that carry freshness."""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Generic, Protocol, TypeVar, cast, runtime_checkable

from . import kinds

__all__ = ["Referential", "ReferentialAware", "ReferentialPayload", "enrich"]

T = TypeVar("T")


@dataclass(frozen=True, slots=True, repr=False)
class ReferentialPayload(Generic[T]):
    """A value with where it came from and how fresh it is.

    Its ``repr`` shows the name, ``as_of``, ``up_to_date`` and the cause's type: never the payload
    or the key, which may hold personal data that has no place in a log.

    Attributes:
        name: the effective failover name (the domain when one is set).
        key: the entry's key within that name.
        payload: the value itself.
        as_of: when the call that obtained the value from the upstream started (aware UTC, on
            the engine's clock: the value is at least that fresh), or ``None`` when the
            value was made by an exception policy.
        expire_on: when the stored entry stops being served (aware UTC), or ``None``.
        up_to_date: ``True`` for a live result, ``False`` for a recovered or default one.
        cause: the exception that made the call fail over (the upstream's own, or the execution
            layer's refusal) on a recovered or policy-made envelope; ``None`` on a live or stored
            one. Never stored, and left out of equality: two envelopes of the same entry are
            equal whatever made them.
        label: a readable label of the entry (the call's arguments, e.g. ``country(code='FR')``),
            kept only for a failover that opts in with ``label=`` (arguments may be sensitive);
            ``None`` otherwise. A plain string, shown by the dashboard and ``failover inspect``;
            left out of equality and ``repr``.
        partial: ``True`` on a scatter/gather recovery that found only some of the slices
            asked for (the others are missing from the payload); ``False`` otherwise. Left out
            of equality.
        tags: the entry's tags (its failover's ``tags=``), stored with it so that
            ``engine.invalidate_tag`` finds it; ``None`` for a failover without ``tags=``.
            Left out of equality and ``repr``.
        fresh_ended: ``True`` once ``.expire()`` ended the entry's fresh window: it never
            answers a call as fresh, and still recovers one (with its own ``as_of``) until it
            expires. A newer entry of its key clears it. Left out of equality.
    """

    name: str
    key: str
    payload: T
    as_of: datetime | None
    expire_on: datetime | None
    up_to_date: bool
    cause: BaseException | None = field(default=None, compare=False)
    label: str | None = field(default=None, compare=False)
    partial: bool = field(default=False, compare=False)
    tags: tuple[str, ...] | None = field(default=None, compare=False)
    fresh_ended: bool = field(default=False, compare=False)

    def __repr__(self) -> str:
        cause = None if self.cause is None else type(self.cause).__qualname__
        as_of = None if self.as_of is None else self.as_of.isoformat()
        partial = ", partial=True" if self.partial else ""
        return (
            f"ReferentialPayload(name={self.name!r}, as_of={as_of}, "
            f"up_to_date={self.up_to_date}, cause={cause}{partial})"
        )


class _Building(Generic[T]):
    """Same slots as `ReferentialPayload`, but mutable: an envelope under construction."""

    __slots__ = (
        "as_of",
        "cause",
        "expire_on",
        "fresh_ended",
        "key",
        "label",
        "name",
        "partial",
        "payload",
        "tags",
        "up_to_date",
    )


_new = object.__new__

Building = _Building
"""An envelope under construction, for the few hot paths that cannot afford `envelope`'s frame:
``obj = object.__new__(Building)``, set every slot, then ``obj.__class__ = ReferentialPayload``."""


def envelope(
    name: str,
    key: str,
    payload: T,
    as_of: datetime | None,
    expire_on: datetime | None,
    up_to_date: bool,
    cause: BaseException | None = None,
    label: str | None = None,
    partial: bool = False,
    tags: tuple[str, ...] | None = None,
    fresh_ended: bool = False,
) -> ReferentialPayload[T]:
    """Build a `ReferentialPayload` about 6x faster than its frozen ``__init__`` (hot path).

    The fields are set on a mutable object with the same slot layout, whose class then becomes
    `ReferentialPayload`: the result is an ordinary frozen instance, equal to one built by
    ``ReferentialPayload(...)``.
    """
    obj: Any = _new(_Building)
    obj.name = name
    obj.key = key
    obj.payload = payload
    obj.as_of = as_of
    obj.expire_on = expire_on
    obj.up_to_date = up_to_date
    obj.cause = cause
    obj.label = label
    obj.partial = partial
    obj.tags = tags
    obj.fresh_ended = fresh_ended
    obj.__class__ = ReferentialPayload
    built: ReferentialPayload[T] = obj  # not cast(ReferentialPayload[T], ...): a subscript per call
    return built


@runtime_checkable
class ReferentialAware(Protocol):
    """A value that carries its own freshness: ``up_to_date`` and ``as_of`` attributes."""

    up_to_date: bool
    as_of: datetime | None


class Referential:
    """Mixin giving a class the `ReferentialAware` attributes, set by the library on each call."""

    up_to_date: bool = True
    as_of: datetime | None = None


# Per-type decision, so that the runtime protocol check (slow) runs once per type, not per call.
# A type decides for all its instances only when its instances cannot differ: it declares both
# fields, or its instances have no `__dict__` to carry them. Otherwise (a SimpleNamespace, a class
# setting them in some paths only) each instance is checked (`_INSTANCE`): the first one seen
# must not decide for the others.
_PLAIN, _SETATTR, _DATACLASS, _PYDANTIC, _FROZEN, _NAMEDTUPLE, _INSTANCE = range(7)
_FIELDS = ("up_to_date", "as_of")
_kinds: dict[type, int] = {}


def _declares(tp: type) -> bool:
    """Whether every instance of ``tp`` has both fields: class attributes (the mixin, defaults,
    slots, properties) or the fields of a dataclass, pydantic model or attrs class."""
    if all(hasattr(tp, f) for f in _FIELDS):
        return True
    names = kinds.field_names(tp, kinds.kind_of(tp))
    return all(f in names for f in _FIELDS)


def _copy_kind(tp: type) -> int:
    """How an aware value of type ``tp`` takes the fields: set in place, or on a copy."""
    kind = kinds.kind_of(tp)
    if kind is None or not kinds.frozen(tp, kind):
        return _SETATTR
    if kind == kinds.DATACLASS:
        init = {f.name for f in dataclasses.fields(tp) if f.init}
        # Fields of a non-dataclass base (the `Referential` mixin) are not `replace` arguments.
        return _DATACLASS if all(f in init for f in _FIELDS) else _FROZEN
    if kind == kinds.PYDANTIC:
        return _PYDANTIC
    if all(f in kinds.field_names(tp, kind) for f in _FIELDS):
        return _NAMEDTUPLE  # its fields cannot be set: `_replace` makes the copy
    return _SETATTR


def _kind(value: object) -> int:
    tp = type(value)
    kind = _kinds.get(tp)
    if kind is not None:
        return kind
    if isinstance(value, Referential) or _declares(tp):
        kind = _copy_kind(tp)
    elif hasattr(value, "__dict__") or isinstance(value, ReferentialAware):
        # Attributes of its own, or a __getattr__ answering for them: decided per instance.
        kind = _INSTANCE
    else:
        kind = _PLAIN
    _kinds[tp] = kind
    return kind


def _settle(value: object, kind: int) -> int:
    """Correct the kind of ``value``'s type after enriching it the first way failed (only a
    type that decides for all its instances: the others are decided per instance)."""
    tp = type(value)
    if _kinds.get(tp) != _INSTANCE:
        _kinds[tp] = kind
    return kind


KIND_OF = _kinds.get
"""``KIND_OF(tp) == PLAIN``: `plain_kind` without a Python frame, for the success path."""
PLAIN = _PLAIN


def plain_kind(tp: type) -> bool:
    """Whether values of type ``tp`` are known to carry no freshness (most results): a dict
    lookup, so callers on the hot path can skip `enrich`."""
    return _kinds.get(tp) == _PLAIN


def enrich(value: T, up_to_date: bool, as_of: datetime | None) -> T:
    """Set ``up_to_date`` and ``as_of`` on a `ReferentialAware` value; others pass unchanged.

    Frozen dataclasses and frozen pydantic models come back as a copy with the fields set.
    """
    kind = _kinds.get(type(value))
    if kind is None:
        kind = _kind(value)
    if kind == _INSTANCE:
        if not (hasattr(value, "up_to_date") and hasattr(value, "as_of")):
            return value
        kind = _copy_kind(type(value))
    if kind == _PLAIN:
        return value
    if kind == _SETATTR:
        obj: Any = value
        try:
            obj.up_to_date = up_to_date
            obj.as_of = as_of
            return value
        except AttributeError:  # frozen another way (attrs, a refusing __setattr__): a copy
            kind = _settle(value, _FROZEN)
    shape: Any = value  # each kind's own copy, recognised by `_copy_kind`
    if kind == _DATACLASS:
        return cast(T, dataclasses.replace(shape, up_to_date=up_to_date, as_of=as_of))
    if kind == _FROZEN:
        frozen: Any = copy.copy(value)  # the caller's (or the store's) object stays as it is
        try:
            object.__setattr__(frozen, "up_to_date", up_to_date)
            object.__setattr__(frozen, "as_of", as_of)
        except AttributeError:  # read-only properties: it cannot carry the freshness
            _settle(value, _PLAIN)
            return value
        return cast(T, frozen)
    if kind == _NAMEDTUPLE:
        return cast(T, shape._replace(up_to_date=up_to_date, as_of=as_of))
    return cast(T, shape.model_copy(update={"up_to_date": up_to_date, "as_of": as_of}))
