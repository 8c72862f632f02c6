"""What a block of code asks of every failover it calls: `refreshing` (call the upstream, no
fresh answer, no throttled one; results stored, failures still recovered) and `disabled` (a
pass-through: the upstream called, nothing read, nothing stored, its exceptions raised as they
are); and whether conditional refresh (`failover.conditional`) is in use in the process.

Both blocks set a context variable: they follow asyncio tasks and the library's worker threads
(which copy the context), and never leak to a parent task. The innermost block wins.

At no cost until used: a failover's shell looks at the switches only within the branch it
already takes for ``fresh_for=`` or ``throttle=`` (`failover.core.Runtime.before`). The first
block opened in a process (or the first use of conditional refresh) turns that branch on for
every failover of the process, for good: a task may carry a block's context past the block's end
(a task created inside it), so turning it off again could miss it. From then on each call reads
one context variable.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from contextvars import ContextVar
from typing import Any

__all__ = [
    "CONDITIONAL",
    "DISABLED",
    "REFRESHING",
    "STATE",
    "STEERS",
    "arm_conditional",
    "block",
    "disabled",
    "here",
    "refresher",
    "refreshing",
    "watch",
]

REFRESHING = 1
"""Inside `refreshing`."""
DISABLED = 2
"""Inside `disabled`."""
CONDITIONAL = 4
"""Conditional refresh is in use in the process: the upstream may ask for its stale entry."""

STEERS = DISABLED | CONDITIONAL
"""The switches that change what a call of a failover with nothing to do before its upstream
(no ``fresh_for``, no ``throttle=``) does: a `refreshing` block changes nothing for it
(`failover.plain`: such a call stays on the plain path unless ``(block() | STATE.armed) &
STEERS``)."""

_mode: ContextVar[int] = ContextVar("failover_switch", default=0)
block = _mode.get
"""The calling context's block: `REFRESHING`, `DISABLED`, or 0 outside any."""
_lock = threading.Lock()
# The runtimes (`failover.core.Runtime`, which uses this module: typed loosely) to turn on.
_runtimes: weakref.WeakSet[Any] = weakref.WeakSet()


class _State:
    """Whether any block was opened in the process (`on`), and `CONDITIONAL` once conditional
    refresh is in use (`armed`)."""

    __slots__ = ("armed", "on")

    def __init__(self) -> None:
        self.on = False
        self.armed = 0


STATE = _State()
"""The switches of the process."""


def here() -> int:
    """The switches of the calling context: `REFRESHING`, `DISABLED` (or none) and
    `CONDITIONAL`, or-ed."""
    return _mode.get() | STATE.armed


def watch(rt: Any) -> bool:
    """Keep ``rt`` to be told when the switches come on; whether they are on already."""
    with _lock:
        _runtimes.add(rt)
        return STATE.on


def _turn_on() -> None:
    if STATE.on:
        return
    with _lock:
        STATE.on = True
        for rt in list(_runtimes):
            rt.before = True


def arm_conditional() -> None:
    """Conditional refresh is in use: every failover's upstream runs with its call known
    (`failover.conditional.stale_entry`) from now on."""
    STATE.armed = CONDITIONAL
    _turn_on()


@contextmanager
def _switched(mode: int) -> Iterator[None]:
    _turn_on()
    token = _mode.set(mode)
    try:
        yield
    finally:
        _mode.reset(token)


def refreshing() -> AbstractContextManager[None]:
    """A block in which every failover calls its upstream and stores the result, whatever
    ``fresh_for`` or ``throttle`` say (no fresh answers, no throttled ones); a failure is still
    recovered from the store. Also ``failover.refreshing()``; each failover's ``.refresh(...)``
    is one call made this way.

    Example::

        with failover.refreshing():
            find_country("FR")  # the upstream is called, its answer stored
    """
    return _switched(REFRESHING)


def disabled() -> AbstractContextManager[None]:
    """A block in which every failover is a pass-through: the upstream is called, nothing is
    read from the store or stored, and the upstream's exceptions reach the caller as they are
    (cashews' ``cache.disabling()``).

    Example::

        with failover.disabled():
            find_country("FR")  # as if it were not decorated
    """
    return _switched(DISABLED)


def refresher(call: Callable[..., Any], is_async: bool) -> Callable[..., Any]:
    """``.refresh(*args, **kwargs)``: the call made inside `failover.refreshing` (the upstream
    called and its answer stored, whatever ``fresh_for`` or ``throttle`` say)."""
    if is_async:

        async def arefresh(*args: Any, **kwargs: Any) -> Any:
            with refreshing():
                return await call(*args, **kwargs)

        return arefresh

    def refresh(*args: Any, **kwargs: Any) -> Any:
        with refreshing():
            return call(*args, **kwargs)

    return refresh
