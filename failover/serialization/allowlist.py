"""The allowlist: the types `JsonCodec` may rebuild, looked up by name and nowhere else.

The allowlist is process-wide: `allow_annotation` (the engine calls it for every registered
failover, with the decorated function) and `allow_types` add to it; a codec may hold a local one
besides (``allowed_types=``). An annotation is closed over its generic arguments
(``list[Country]``, ``dict[str, Rate]``, ``Country | None``, ``Annotated[...]``) and, recursively,
over the field types of the dataclasses, pydantic models and ``NamedTuple``\\ s it names.
"""

from __future__ import annotations

import logging
import threading
import typing
from collections.abc import Iterable
from typing import Any

from .. import kinds
from ..errors import ConfigurationError
from .base import type_name

__all__ = [
    "Allowlist",
    "allow_annotation",
    "allow_types",
    "checked_types",
    "global_allowlist",
    "restorable",
]

log = logging.getLogger(__name__)

_RESTORABLE = frozenset({kinds.ENUM, kinds.DATACLASS, kinds.PYDANTIC, kinds.NAMEDTUPLE})


def restorable(tp: type) -> int | None:
    """The kind of ``tp`` when `JsonCodec` can rebuild its values (an enum, a dataclass, a
    pydantic model, a ``NamedTuple``), else ``None``."""
    kind = kinds.kind_of(tp)
    return kind if kind in _RESTORABLE else None


def _field_types(tp: type, kind: int) -> list[Any]:
    """The annotations of ``tp``'s fields; raises ``NameError`` while a forward reference in
    them cannot be resolved yet."""
    if kind == kinds.ENUM:
        return []
    hints = typing.get_type_hints(tp, include_extras=True)
    return [hints[name] for name in kinds.field_names(tp, kind) if name in hints]


def _closure(annotation: Any) -> tuple[dict[str, type], list[Any]]:
    """Every restorable type an annotation names, directly or through fields, by name; and the
    types whose field annotations cannot be resolved yet."""
    found: dict[str, type] = {}
    unresolved: list[Any] = []
    stack = [annotation]
    seen: dict[int, Any] = {}  # holds what it saw, so that no id is reused during the walk
    while stack:
        tp = stack.pop()
        if id(tp) in seen:
            continue
        seen[id(tp)] = tp
        origin = typing.get_origin(tp)
        if origin is typing.Literal:
            continue  # its arguments are values, not types
        if origin is typing.Annotated:
            stack.append(typing.get_args(tp)[0])
            continue
        if origin is not None:
            stack.append(origin)
            stack.extend(typing.get_args(tp))
            continue
        if not isinstance(tp, type):
            continue  # None, TypeVars, Ellipsis
        kind = restorable(tp)
        if kind is None:
            continue
        found[type_name(tp)] = tp
        try:
            stack.extend(_field_types(tp, kind))
        except NameError:
            unresolved.append(tp)
        except Exception:  # an annotation typing cannot evaluate: its fields stay unknown
            log.debug("failover: cannot read the field types of %r", tp, exc_info=True)
    return found, unresolved


def _is_function(obj: Any) -> bool:
    return callable(obj) and not isinstance(obj, type) and typing.get_origin(obj) is None


class Allowlist:
    """Types decodable by name. Functions and types whose annotations are not resolvable yet
    (forward references) wait in ``pending`` and are retried when a lookup misses."""

    def __init__(self) -> None:
        self.types: dict[str, type] = {}
        # By id: a callable object need not be hashable; the value keeps the id from being reused.
        self.pending: dict[int, Any] = {}
        self.lock = threading.Lock()

    def add(self, annotation: Any) -> None:
        with self.lock:
            if _is_function(annotation):
                self.pending[id(annotation)] = annotation
            else:
                self._add(annotation)

    def _add(self, annotation: Any) -> None:
        found, unresolved = _closure(annotation)
        self.types.update(found)
        self.pending.update((id(tp), tp) for tp in unresolved)

    def get(self, name: str, expected: type | None = None) -> type | None:
        """The type allowed under ``name``; pending annotations are resolved first when the name
        is missing, or names another type than ``expected`` (a class defined anew)."""
        tp = self.types.get(name)
        if tp is None or (expected is not None and tp is not expected):
            # Another thread may be resolving (holding the lock, ``pending`` already taken):
            # wait for it rather than miss a type it is about to add.
            if self.pending or self.lock.locked():
                with self.lock:
                    if self.pending:
                        self._resolve()
            tp = self.types.get(name)
        return tp

    def _resolve(self) -> None:
        pending, self.pending = self.pending, {}
        for item in pending.values():
            if not _is_function(item):
                self._add(item)
                continue
            try:
                hints = typing.get_type_hints(item, include_extras=True)
            except NameError:
                self.pending[id(item)] = item  # a forward reference not defined yet: try later
                continue
            except Exception:
                log.debug("failover: cannot read the return annotation of %r", item, exc_info=True)
                continue
            if "return" in hints:
                self._add(hints["return"])


_global: list[Allowlist] = []  # the process-wide allowlist, made on first use
_global_lock = threading.Lock()


def global_allowlist() -> Allowlist:
    if not _global:
        with _global_lock:
            if not _global:
                _global.append(Allowlist())
    return _global[0]


def allow_annotation(annotation_or_function: Any) -> None:
    """Allow every dataclass, pydantic model, ``NamedTuple`` and ``Enum`` an annotation names.

    The engine calls this with every registered failover's function. A function's return
    annotation is read lazily (with `typing.get_type_hints`) when a type is first looked up, so
    forward references defined after decoration work.

    Args:
        annotation_or_function: a type annotation (``list[Country]``, ``Rate | None``) or a
            function whose return annotation is allowed.
    """
    global_allowlist().add(annotation_or_function)


def allow_types(*types: Any) -> None:
    """Allow these types (and the types their fields name) process-wide.

    Args:
        *types: dataclasses, pydantic models, ``NamedTuple``\\ s, ``Enum``\\ s, or annotations
            naming them.

    Raises:
        ConfigurationError: an argument is neither a type nor a type annotation.
    """
    for tp in checked_types(types, "allow_types"):
        global_allowlist().add(tp)


def checked_types(types: Iterable[Any], owner: str) -> list[Any]:
    checked = list(types)
    for tp in checked:
        if not isinstance(tp, type) and typing.get_origin(tp) is None:
            raise ConfigurationError(f"{owner}: expected types or type annotations, got {tp!r}")
    return checked
