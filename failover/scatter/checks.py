"""The splitter settings checked for the decorator, and what one entry holds for the engine."""

from __future__ import annotations

import inspect
import typing
from typing import TYPE_CHECKING, Any, TypeVar

from ..errors import ConfigurationError
from .contexts import PayloadSplitter
from .splitters import EntitySplitter, unoptional

if TYPE_CHECKING:
    from ..definition import FailoverDefinition

__all__ = ["check_splitter", "slice_type"]


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
    elif isinstance(splitter, EntitySplitter):
        tp = splitter.slice_type(return_type)
    else:
        return None
    tp = unoptional(tp)
    if tp in _UNKNOWN or tp is inspect.Signature.empty or isinstance(tp, str | TypeVar):
        return None
    # Generic arguments do not change how a value decodes (a JSON dict is a dict).
    return typing.get_origin(tp) or tp
