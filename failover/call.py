"""One call of one failover: the context its layers see, its guards, and every decision about
what its caller gets. It does no I/O of its own beyond what its shell asks of it.

The shells (``shells.py``) are a few lines around it::

    call = call_of(runtime, args, kwargs)
    try:
        with call:                     # the guards (bulkhead, breaker) admit the call
            result = call.run(fn, args, kwargs)
    except Exception as exc:
        out = call.recover(exc)        # read from the store in place and settled, or None:
        ...                            # re-raise
    return call.live(result)           # stored; the value enriched as live

An ``async def`` failover's shell enters with ``async with call`` (a guard's wait does not block
the loop), calls ``await call.arun(...)`` (the soft timeout is the one real fork), and recovers
in two steps, ``lookup = call.failed(exc)`` then ``call.settle(lookup, await lookup.aread())``
(the loop turn's reads batched); its runtime says whether storing runs on a worker thread
(`Runtime.off_loop`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime
from time import perf_counter
from typing import TYPE_CHECKING, Any

from .adaptive import AdaptiveTtl, FreshSince
from .call_io import unencodable
from .call_recovery import Recovery
from .errors import SerializationError
from .execution import Wait
from .handlers import Partial, envelope_key
from .payload import KIND_OF, PLAIN, ReferentialPayload, enrich, envelope
from .stores.layers.batching import pinned_call
from .tenant import read_tenant, refuse_unrouted

if TYPE_CHECKING:
    from types import TracebackType

    from .core import Runtime

__all__ = ["Call", "call_of"]

_new = object.__new__
log = logging.getLogger("failover")
_traces = logging.getLogger("failover.health")  # the logs observer's logger (`log_observer`)


def call_of(
    rt: Runtime,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    kind: type[Call] | None = None,
    checked: bool = False,
) -> Call:
    """One call of ``rt``'s failover (``args`` as the wrapper got them, ``self``/``cls``
    included), of the failover's kind (`Runtime.call_type`) unless ``kind`` says; ``checked``:
    its shell refused it already if it runs in a tenant the engine does not route."""
    binder = rt.binder
    if binder.skip_first:
        args = args[1:]
    if not checked and rt.unrouted is not None and read_tenant() is not None:
        refuse_unrouted(rt.unrouted, rt.definition.name)
    call: Call = _new(kind or rt.call_type)  # no __init__ frame: this runs on every call
    call.rt = rt
    call.definition = rt.definition
    call.binder = binder
    call.args = args
    call.kwargs = kwargs
    try:
        # The call's time, on the engine's clock: its result is as of when it was asked for, so
        # that a result of a call asked later is never replaced by this one (stores keep the
        # entry with the latest `as_of`).
        call.now = rt.clock()
    except Exception:  # a failing clock: the store meets it again, as store trouble
        call.now = None
    call._arguments = None
    call.stored_key = None
    if kwargs or not binder.simple or len(args) != binder.n:
        call.values = binder.values(args, kwargs)
    else:
        call.values = args  # binder.values' fast path
    return call


class Call(Recovery):
    """One call: its arguments (a `CallContext` for the handler chain), the runtime of its
    failover on its engine, when it started and the permits its guards gave it."""

    # Built field by field in `call_of` (no __init__ frame on the hot path): a new field
    # goes there too.
    __slots__ = ("rt", "start", "token")  # and `Recovery`'s

    rt: Runtime
    start: float
    token: Any

    # -- the guards ---------------------------------------------------------------------------

    def __enter__(self) -> Call:
        self.start = perf_counter()
        ex = self.rt.execution
        if ex is not None:
            token = ex.admit()
            self.token = token.block() if type(token) is Wait else token
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        ex = self.rt.execution
        if ex is not None:
            ex.exit(self.token, exc)

    async def __aenter__(self) -> Call:
        self.start = perf_counter()
        ex = self.rt.execution
        if ex is not None:
            token = ex.admit()
            self.token = await token.wait() if type(token) is Wait else token
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.__exit__(kind, exc, tb)  # leaving the guards never waits

    def run(self, fn: Callable[..., Any], args: Any, kwargs: Any) -> Any:
        """Call the upstream, within the soft timeout if there is one (inside the guards)."""
        rt = self.rt
        timeout = rt.timeout
        if timeout is None:
            return fn(*args, **kwargs)
        if rt.router is None:
            return timeout.call(self, fn, args, kwargs)
        # The upstream runs on the engine's pool, and a late result is stored there: the tenant
        # is resolved here, on the caller's thread, and pinned for the pool (its context copy).
        return pinned_call(rt.router.here(), timeout.call, self, fn, args, kwargs)

    async def arun(self, fn: Callable[..., Any], args: Any, kwargs: Any) -> Any:
        """`run` for an ``async def`` upstream: the soft timeout is the one real fork."""
        timeout = self.rt.timeout
        if timeout is None:
            return await fn(*args, **kwargs)
        return await timeout.acall(self, fn, args, kwargs)

    # -- within fresh_for ---------------------------------------------------------------------

    def fresh(self) -> ReferentialPayload[Any] | Partial | None:
        """The stored entry when it is younger than ``fresh_for`` (the call is then answered
        from it, by `served_fresh`); for scatter/gather with some slices fresh, the `Partial`
        call for the others; else ``None``: the upstream is called as usual. Store trouble is
        a ``None`` too (logged at debug: the call's own path meets it again)."""
        rt = self.rt
        try:
            now = self.now  # the call's time (`call_of`)
            if now is None:
                self.now = now = rt.clock()
            window = rt.fresh_window
            if window is not None:
                found = rt.handler.fresh(self, now - window)
            else:  # fresh_for is a callable: a window per entry
                d = self.definition
                assert callable(d.fresh_for)
                found = rt.handler.fresh(self, FreshSince(d.fresh_for, now, repr(d.name)))
        except Exception:
            log.debug("failover %r: the fresh read failed", self.definition.name, exc_info=True)
            found = None
        return found

    def narrowed(
        self, part: Partial, args: tuple[Any, ...]
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """The arguments of the call `fresh` narrowed to the slices not fresh (``part``), as
        the wrapper passes them (``self`` in front): the upstream is asked for those only, and
        the caller gets ``part.merge(result)``."""
        own = part.args
        return ((args[0], *own) if self.binder.skip_first else own), part.kwargs

    def served_fresh(
        self,
        found: ReferentialPayload[Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        wrapped: bool,
    ) -> Any:
        """A call answered from ``found`` within ``fresh_for``, up to date: its envelope
        (``wrapped``) or value. Past ``refresh_ahead``, the entry is refreshed in the background
        (``args``, ``kwargs``: the call's own, ``self`` included)."""
        rt = self.rt
        now = self.now  # set by `fresh`
        as_of = found.as_of  # a fresh entry has one
        rt.events.fresh(now)
        ahead = rt.ahead
        if ahead is not None and now is not None and as_of is not None:
            age = (now - as_of).total_seconds()
            if age >= rt.refresh_at:
                ahead.start(self, args, kwargs)
        payload = found.payload
        value = payload if KIND_OF(type(payload)) == PLAIN else enrich(payload, True, as_of)
        if not wrapped:
            return value
        return envelope(found.name, found.key, value, as_of, found.expire_on, True)

    # -- success ------------------------------------------------------------------------------

    def live(self, result: Any, late: bool = False) -> Any:
        """The upstream answered: store ``result`` and return it enriched as live. A ``late``
        result (it came after its callers stopped waiting: soft timeout) is stored, not reported
        as a call of its own.

        Nothing here may break the call: a failing clock, ``store_if``, key function, store or
        metrics object is store trouble, logged and counted, and the live result returns.
        """
        end = perf_counter()  # the upstream's end: the metered store's start, too
        seconds = end - self.start
        rt = self.rt
        try:
            store_if = self.definition.store_if
            refused = rt.refused_types
            if (store_if is None or store_if(result)) and not (refused and type(result) in refused):
                events = rt.events
                if events.timed:  # timed here, inlined: the metered success path
                    start = end
                    try:
                        kept = rt.handler.store(self, result)
                    except Exception:
                        events.stored(False, perf_counter() - start)
                        raise
                    if kept is None:
                        events.stored(True, perf_counter() - start)
                    else:
                        events.superseded(kept.kept)
                        if kept.kept < kept.entries:
                            events.stored(True, perf_counter() - start)
                elif (kept := rt.handler.store(self, result)) is not None:  # sets self.now
                    events.superseded(kept.kept)
            else:
                self.now = rt.clock()
        except SerializationError as exc:
            unencodable(rt, result, exc)
        except Exception as exc:
            rt.events.trouble("store", exc, "")
        if not late:
            rt.events.live(self.now, seconds)
        if KIND_OF(type(result)) == PLAIN:  # most results carry no freshness: no enrich
            return result
        return enrich(result, True, self.now)

    def late(self, result: Any) -> None:
        """Store a result that came after its callers stopped waiting (a soft timeout, a
        refresh ahead): stored, not reported as a call of its own."""
        self.live(result, True)

    def shared(self, result: Any, now: datetime | None) -> Any:
        """A result another call of the same key got (single flight), stored by that call:
        reported as live and enriched, not stored again."""
        self.now = now
        self.rt.events.live(now, perf_counter() - self.start)
        if KIND_OF(type(result)) == PLAIN:
            return result
        return enrich(result, True, now)

    def envelope(self, value: Any) -> ReferentialPayload[Any]:
        """The envelope of a live (already enriched) value."""
        d = self.definition
        now = self.now
        key = envelope_key(self)  # a failing key= callable already showed up as a store failure
        try:
            expiry = d.expiry
            if now is None:
                expire_on = None
            elif type(expiry) is AdaptiveTtl:  # what the stored entry got, up to its jitter
                expire_on = expiry.expiry_of(now, value, self.args, self.kwargs, key)
            else:
                expire_on = expiry.compute_expiry(d, now)
        except Exception:  # so did a failing expiry policy
            expire_on = None
        return envelope(d.effective_name, key, value, now, expire_on, True)
