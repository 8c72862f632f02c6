"""Tags (``tags=``): the strings a stored entry carries so that ``engine.invalidate_tag(tag)``
finds it, whatever its failover. The decorator's callable receives the call's arguments as
the function does (as ``key=``); what it returns is checked here, once per stored entry."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from .context import CallContext

__all__ = ["TAG_MAX", "check_tag", "checked_tags", "tags_of"]

TAG_MAX: Final = 200
"""The longest tag, in characters: a SQL store keeps tags in a ``VARCHAR(255)`` column."""


def check_tag(tag: object) -> str:
    """``tag``, checked: a string of 1 to `TAG_MAX` printable characters.

    Raises:
        ValueError: anything else (a tag is a name an operator types: no control characters).
    """
    if not isinstance(tag, str) or not 0 < len(tag) <= TAG_MAX or not tag.isprintable():
        raise ValueError(
            f"a tag is a string of 1 to {TAG_MAX} printable characters, got {str(tag)[:60]!r}"
        )
    return tag


def tags_of(ctx: CallContext) -> tuple[str, ...]:
    """The tags of a call's entry: its failover's ``tags=`` callable's answer for the call's
    arguments, checked, each once, in order.

    Raises:
        ValueError: the callable returned something other than an iterable of tags (a single
            string is refused too: it would be taken for its characters).
        Exception: what the callable raised (the store fails: the live result still returns).
    """
    made = ctx.definition.tags(*ctx.args, **ctx.kwargs)  # type: ignore[misc]
    return checked_tags(made, ctx.definition.name)


def checked_tags(made: object, name: str) -> tuple[str, ...]:
    """``made`` (a ``tags=`` callable's answer) as a tuple of checked tags, each once."""
    if isinstance(made, str | bytes) or not isinstance(made, Iterable):
        raise ValueError(
            f"failover {name!r}: tags= must return an iterable of strings (a list, a tuple), "
            f"got {type(made).__name__}"
        )
    return tuple(dict.fromkeys(check_tag(t) for t in made))
