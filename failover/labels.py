"""Readable labels of stored entries: ``@failover(..., label=True)`` keeps, beside each entry,
the call's arguments rendered for a person (``country(code='FR')``), which the dashboard and
``failover inspect`` show instead of the key's digest alone.

Off by default: arguments may be personal or secret (an e-mail address, a token), and a label is
stored in clear, unlike the payload, which a cipher may encrypt. ``label=`` takes ``True`` (the
arguments by name), or a callable receiving the call's arguments as the function does (without
``self``/``cls``) and returning the label (a string, else rendered as the arguments are), for a
failover whose arguments are partly sensitive: ``label=lambda user, token: user``.

A label is a plain string, at most `LABEL_MAX` characters, printable (control characters are
escaped): reading it back runs nothing. Values are rendered by a bounded `reprlib.Repr`; one whose
``repr`` raises, or shows only an address, is shown by its type's name. A ``label=`` callable that
raises leaves the entry without a label (logged once per failover): a label never keeps a
result from being stored.
"""

from __future__ import annotations

import logging
import reprlib
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from .errors import ConfigurationError

if TYPE_CHECKING:
    from .context import CallContext
    from .definition import FailoverDefinition

__all__ = ["LABEL_MAX", "call_label", "check_label", "escaped", "printable", "slice_label"]

log = logging.getLogger(__name__)

LABEL_MAX = 200
"""At most this many characters of a label are stored (the rest becomes ``…``)."""


class _Bounded(reprlib.Repr):
    """`reprlib.Repr` with short limits, and no object address: a value whose ``repr`` raises
    or names only its identity (``<Foo object at 0x...>``) is shown as ``<Foo>``."""

    def __init__(self) -> None:
        super().__init__()
        self.maxlevel = 2
        self.maxstring = self.maxother = 60
        self.maxlong = 40
        self.maxtuple = self.maxlist = self.maxarray = self.maxset = self.maxfrozenset = 6
        self.maxdict = 4

    def repr_instance(self, x: Any, level: int) -> str:
        try:
            text = repr(x)
        except Exception:  # a user's __repr__ may fail: its type names it well enough
            return f"<{type(x).__name__}>"
        if text.startswith("<") and " at 0x" in text:
            return f"<{type(x).__name__}>"
        if len(text) > self.maxother:
            half = (self.maxother - 3) // 2
            return f"{text[:half]}...{text[len(text) - half :]}"
        return text


_bounded = _Bounded().repr
_PLAIN = (str, int, float, bool, type(None))


def _shown(value: Any) -> str:
    """``value`` rendered: the common short scalars by their own ``repr`` (reprlib's dispatch
    costs more than the rest of a label), anything else bounded."""
    if type(value) in _PLAIN:
        text = repr(value)
        if len(text) <= 60:
            return text
    return _bounded(value)


_warned: set[str] = set()
_warned_lock = threading.Lock()


def check_label(value: Any, owner: str, setting: str) -> bool | Callable[..., object] | None:
    """The ``label=`` setting: ``None`` (off: ``False`` or ``None``), ``True`` or a callable.

    Raises:
        ConfigurationError: anything else, naming ``owner`` and the setting.
    """
    if value is None or value is False:
        return None
    if value is True or (callable(value) and not isinstance(value, type)):
        checked: bool | Callable[..., object] = value
        return checked
    raise ConfigurationError(
        f"{owner}: {setting}= must be True, False or a callable receiving the call's "
        f"arguments and returning the entry's label, got {value!r}"
    )


_functions: dict[str, str] = {}  # module.qualname -> the function's own name


def _function(definition: FailoverDefinition) -> str:
    whole = definition.function
    name = _functions.get(whole)
    if name is None:
        name = _functions[whole] = whole.rsplit(".", 1)[-1]
    return name


def escaped(text: str) -> str:
    """``text`` on one line: control characters escaped (``\\x1b``), nothing cut."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def printable(text: str) -> str:
    """``text`` on one line, bounded: control characters escaped, cut at `LABEL_MAX`."""
    text = escaped(text)
    return text if len(text) <= LABEL_MAX else f"{text[: LABEL_MAX - 1]}…"


def _made(definition: FailoverDefinition, make: Callable[[], object]) -> str | None:
    try:
        made = make()
    except Exception as exc:
        with _warned_lock:
            first = definition.name not in _warned
            _warned.add(definition.name)
        if first:
            # The exception's type only: its message may quote the call's arguments.
            log.warning(
                "failover %r: its label= callable raised %s; entries are stored without a "
                "label (logged once; the message at debug level)",
                definition.name,
                type(exc).__name__,
            )
            log.debug("failover %r: the label= callable raised", definition.name, exc_info=True)
        return None
    return printable(made if isinstance(made, str) else _shown(made))


def call_label(ctx: CallContext) -> str | None:
    """The label of a call's entry (for a failover with ``label=`` set)."""
    d = ctx.definition
    how = d.label
    if how is True:
        # The bound arguments by name, as ctx.arguments has them, without building that dict.
        names = ctx.binder.names
        shown = ", ".join([f"{n}={_shown(v)}" for n, v in zip(names, ctx.values, strict=True)])
        return printable(f"{_function(d)}({shown})")
    if not callable(how):
        return None
    return _made(d, lambda: how(*ctx.args, **ctx.kwargs))


def slice_label(definition: FailoverDefinition, arguments: Mapping[str, Any]) -> str | None:
    """The label of a scatter/gather slice's entry: its item key (``countries['FR']``), or the
    ``label=`` callable's answer for the slice's arguments (given as the call a single-entity
    function of that name would get: positionally, in order)."""
    how = definition.label
    values = tuple(arguments.values())
    if how is True:
        return printable(f"{_function(definition)}[{', '.join(map(_shown, values))}]")
    if not callable(how):
        return None
    return _made(definition, lambda: how(*values))
