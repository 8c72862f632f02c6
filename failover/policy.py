"""What the caller gets when recovery found nothing usable: the exception policies."""

from __future__ import annotations

import enum
import types
import typing
from collections import abc
from collections.abc import Callable
from typing import Any

from .errors import ConfigurationError

__all__ = ["ExceptionPolicy", "default_for", "resolve_policy"]


class ExceptionPolicy(enum.StrEnum):
    """The built-in policies; a callable ``policy(ctx)`` is the fourth kind."""

    RETHROW = "rethrow"
    """Raise the original upstream exception, with a note saying why nothing was recovered."""
    NEVER_THROW = "never_throw"
    """Return ``None``, or what ``on_recovered`` returns."""
    RETURN_DEFAULT = "return_default"
    """Return an empty value fitting the return annotation (``[]``, ``{}``, ``0``, ``None``...)."""


def resolve_policy(value: object, owner: str) -> ExceptionPolicy | Callable[..., object]:
    """Validate a policy setting; strings name a built-in policy."""
    if isinstance(value, ExceptionPolicy):
        return value
    if isinstance(value, str):
        try:
            return ExceptionPolicy(value)
        except ValueError:
            names = ", ".join(repr(p.value) for p in ExceptionPolicy)
            raise ConfigurationError(
                f"{owner}: policy {value!r} is unknown; use one of {names} or a callable"
            ) from None
    if callable(value):
        return value
    raise ConfigurationError(f"{owner}: policy must be a name or a callable, got {value!r}")


_EMPTY: dict[Any, Callable[[], object]] = {
    list: list,
    dict: dict,
    set: set,
    frozenset: frozenset,
    tuple: tuple,
    str: str,
    bytes: bytes,
    bool: bool,
    int: int,
    float: float,
}


def default_for(annotation: Any) -> object:
    """The ``return_default`` value for a return annotation: ``None`` when nothing fits better."""
    origin = typing.get_origin(annotation)
    if origin is typing.Union or origin is types.UnionType:
        if type(None) in typing.get_args(annotation):
            return None
        return None
    if origin is typing.Annotated:
        return default_for(typing.get_args(annotation)[0])
    target = origin if origin is not None else annotation
    for tp, make in _EMPTY.items():
        if target is tp:
            return make()
    if isinstance(target, type):
        # Abstract collection annotations (Sequence, Mapping...) map to the concrete empty value.
        for abstract, make in (
            (abc.MutableMapping, dict),
            (abc.Mapping, dict),
            (abc.MutableSet, set),
            (abc.Set, frozenset),
            (abc.MutableSequence, list),
            (abc.Sequence, list),
        ):
            if target is abstract:
                return make()
    return None
