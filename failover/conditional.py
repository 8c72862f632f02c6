"""Conditional refresh: inside the upstream, `stale_entry` is the stored envelope of the call's
key (e.g. to send its ETag as ``If-None-Match``), and raising or returning `NotModified` keeps
the stored payload and renews it: stored again with a new ``as_of`` and expiry, and a live answer
(``up_to_date=True``) to the caller.

The call is known to the upstream through a context variable set around the upstream call
(`upstream`, `aupstream`): it follows the soft timeout's worker thread and the tasks the upstream
starts. The entry is read only when the upstream asks for it (`stale_entry`, or a `NotModified`
to renew), once per call; a store that cannot be read then is ``None``.

`NotModified` with no stored entry to renew (it expired, was deleted, or was never stored) is a
failure of the upstream, raised as `failover.errors.NothingToRenew` from the upstream call: the
breaker counts it, and the call is recovered from the store like any failure (which most likely
finds nothing either: then the exception policy decides, and ``rethrow`` raises it).

The context variable costs a set and a reset per call, paid only once conditional refresh is in
use in the process (`failover.switches.arm_conditional`): naming ``stale_entry`` or
``NotModified`` from ``failover`` arms it (``from failover import stale_entry``, or
``failover.stale_entry`` in code run before the first call), as does decorating a function whose
code names either.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from .errors import NothingToRenew
from .switches import arm_conditional

if TYPE_CHECKING:
    from .call import Call
    from .payload import ReferentialPayload

__all__ = ["NotModified", "aupstream", "names_conditional", "stale_entry", "upstream"]

log = logging.getLogger("failover")

_NAMES = frozenset({"stale_entry", "NotModified"})


class NotModified(Exception):  # a signal of the upstream's, named as HTTP's 304
    """Raised or returned by an upstream: the stored entry is still good. Its payload is kept
    and renewed (new ``as_of`` and expiry), and the caller gets it live."""


class _Asked:
    """The call whose upstream runs, and its stored entry once read."""

    __slots__ = ("call", "entry", "read")

    def __init__(self, call: Call) -> None:
        self.call = call
        self.read = False
        self.entry: ReferentialPayload[Any] | None = None

    def stored(self) -> ReferentialPayload[Any] | None:
        if not self.read:
            self.read = True
            try:
                self.entry = self.call.rt.handler.lookup(self.call, None, False).peek()
            except Exception:  # no entry to show: the upstream answers in full
                log.debug("failover: reading the stale entry failed", exc_info=True)
        return self.entry


_current: ContextVar[_Asked | None] = ContextVar("failover_stale_entry", default=None)


def stale_entry() -> ReferentialPayload[Any] | None:
    """The stored envelope of the key of the call whose upstream is running (marked stale:
    ``up_to_date=False``, ``as_of`` when stored), or ``None``: nothing stored (or expired), or
    not inside a failover's upstream. Read from the store on the first ask, once per call.

    Example::

        @failover.failover("page", ttl="1d")
        def page(url: str) -> dict:
            old = failover.stale_entry()
            headers = {"If-None-Match": old.payload["etag"]} if old else {}
            response = httpx.get(url, headers=headers)
            if response.status_code == 304:
                raise failover.NotModified()
            return {"etag": response.headers["etag"], "body": response.text}
    """
    asked = _current.get()
    return None if asked is None else asked.stored()


def _renewed(asked: _Asked, said: NotModified) -> Any:
    entry = asked.stored()
    if entry is None:
        call = asked.call
        raise NothingToRenew(
            f"failover {call.definition.name!r}: the upstream answered NotModified, but no entry "
            "of this call's key is stored to renew"
        ) from said
    return entry.payload  # stored again by the call as its live result: renewed


def upstream(call: Call, fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` run with ``call`` known to `stale_entry`; a `NotModified` it raises or returns
    becomes the stored payload (renewed by the call as its live result)."""

    def run(*args: Any, **kwargs: Any) -> Any:
        asked = _Asked(call)
        token = _current.set(asked)
        try:
            result = fn(*args, **kwargs)
        except NotModified as said:
            return _renewed(asked, said)
        finally:
            _current.reset(token)
        return _renewed(asked, result) if isinstance(result, NotModified) else result

    return run


def aupstream(
    call: Call, fn: Callable[..., Coroutine[Any, Any, Any]]
) -> Callable[..., Coroutine[Any, Any, Any]]:
    """`upstream` for an ``async def`` upstream (the entry to renew is read on a worker thread
    when the store does I/O)."""

    async def run(*args: Any, **kwargs: Any) -> Any:
        asked = _Asked(call)
        token = _current.set(asked)
        try:
            result = await fn(*args, **kwargs)
        except NotModified as said:
            result = said
        finally:
            _current.reset(token)
        if not isinstance(result, NotModified):
            return result
        rt = call.rt
        if rt.blocking and not asked.read:
            await rt.on_worker(asked.stored)
        return _renewed(asked, result)

    return run


def names_conditional(fn: Any) -> bool:
    """Whether ``fn``'s code (nested functions included) names `stale_entry` or `NotModified`:
    then conditional refresh is armed at its decoration, before its first call."""
    code = getattr(getattr(fn, "__func__", fn), "__code__", None)
    stack = [code] if code is not None else []
    while stack:
        code = stack.pop()
        if _NAMES.intersection(code.co_names):
            return True
        stack.extend(c for c in code.co_consts if hasattr(c, "co_names"))
    return False


def arm_if_named(fn: Any) -> None:
    """Arm conditional refresh when ``fn``'s code names it (`names_conditional`)."""
    if names_conditional(fn):
        arm_conditional()
