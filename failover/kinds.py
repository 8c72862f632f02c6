"""Object kinds: the one place that recognises enums, dataclasses, pydantic models,
``NamedTuple``\\ s and attrs classes.

Three parts of the library look inside such values: the JSON codec (which kinds it can restore,
and their fields), the keys (a value's fields make its key) and the enrichment of values that
carry freshness (how two fields are set on a frozen value). They ask here, by type; the answer is
computed once per type. Nothing here imports pydantic or attrs: a kind is recognised by what
the class carries (``__pydantic_fields__``, ``__attrs_attrs__``).
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any

__all__ = [
    "ATTRS",
    "DATACLASS",
    "ENUM",
    "NAMEDTUPLE",
    "PYDANTIC",
    "field_names",
    "frozen",
    "kind_of",
]

ENUM, DATACLASS, PYDANTIC, NAMEDTUPLE, ATTRS = range(5)
_kinds: dict[type, int | None] = {}


def kind_of(tp: type) -> int | None:
    """Which kind ``tp`` is (`ENUM`, `DATACLASS`, `PYDANTIC`, `NAMEDTUPLE`, `ATTRS`), or ``None``
    for any other type (cached per type)."""
    try:
        return _kinds[tp]
    except KeyError:
        pass
    kind: int | None = None
    if issubclass(tp, enum.Enum):
        kind = ENUM
    elif dataclasses.is_dataclass(tp):
        kind = DATACLASS
    elif isinstance(getattr(tp, "__pydantic_fields__", None), dict) and hasattr(
        tp, "model_construct"
    ):
        kind = PYDANTIC
    elif issubclass(tp, tuple) and isinstance(getattr(tp, "_fields", None), tuple):
        kind = NAMEDTUPLE
    elif isinstance(getattr(tp, "__attrs_attrs__", None), tuple):
        kind = ATTRS
    _kinds[tp] = kind
    return kind


def field_names(tp: type, kind: int | None) -> list[str]:
    """The names of the fields of ``tp`` (of kind ``kind``), in declaration order; none for an
    enum or another type."""
    if kind == DATACLASS:
        return [f.name for f in dataclasses.fields(tp)]
    shape: Any = tp  # each kind's own attribute, recognised by `kind_of`
    if kind == PYDANTIC:
        return list(shape.__pydantic_fields__)
    if kind == NAMEDTUPLE:
        return list(shape._fields)
    if kind == ATTRS:
        return [a.name for a in shape.__attrs_attrs__]
    return []


def frozen(tp: type, kind: int | None) -> bool:
    """Whether instances of ``tp`` refuse to have their fields set: frozen dataclasses, frozen
    pydantic models, ``NamedTuple``\\ s. (An attrs class says so only when set: ``False``.)"""
    if kind == DATACLASS:
        shape: Any = tp
        params = shape.__dataclass_params__
        return bool(params.frozen)
    if kind == PYDANTIC:
        config: Any = getattr(tp, "model_config", {})
        return bool(config.get("frozen"))
    return kind == NAMEDTUPLE
