"""One call of one failover: the context its layers see, its guards, and every decision about
what its caller gets. It does no I/O of its own beyond what its shell asks of it.

The shells (``decorator.py``) are a few lines around it::

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
from logging import DEBUG
from time import perf_counter
from typing import TYPE_CHECKING, Any

from .adaptive import AdaptiveTtl, FreshSince
from .call_io import looked_up, note_unrecovered, unencodable
from .context import CallContext, Miss, RecoverContext
from .errors import SerializationError, Throttled, refused_by
from .execution import Wait
from .handlers import Partial, envelope_key
from .handlers.lookup import Lookup, failed_lookup, stale
from .payload import KIND_OF, PLAIN, Building, ReferentialPayload, enrich, envelope
from .policy import ExceptionPolicy, default_for
from .stores.layers.batching import pinned_call
from .tenant import read_tenant, refuse_unrouted
from .throttle import mark_throttled

if TYPE_CHECKING:
    from types import TracebackType

    from .core import Runtime

__all__ = ["Call", "call_of"]

_new = object.__new__
log = logging.getLogger("failover")
_traces = logging.getLogger("failover.health")  # the logs observer's logger (`log_observer`)


def call_of(
    rt: Runtime, args: tuple[Any, ...], kwargs: dict[str, Any], kind: type[Call] | None = None
) -> Call:
    """One call of ``rt``'s failover (``args`` as the wrapper got them, ``self``/``cls``
    included), of the failover's kind (`Runtime.call_type`) unless ``kind`` says."""
    binder = rt.binder
    if binder.skip_first:
        args = args[1:]
    if rt.unrouted is not None and read_tenant() is not None:  # one contextvar read
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


class Call(CallContext):
    """One call: its arguments (a `CallContext` for the handler chain), the runtime of its
    failover on its engine, when it started and the permits its guards gave it."""

    # Built field by field in `call_of` (no __init__ frame on the hot path): a new field
    # goes there too.
    __slots__ = ("rt", "seconds", "start", "token")

    rt: Runtime
    start: float
    token: Any
    seconds: float | None  # how long the failed upstream took (set by `failed`)

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

    # -- failure ------------------------------------------------------------------------------

    def failed(self, cause: Exception) -> Lookup | None:
        """The upstream raised ``cause``: the store read that recovers the call, for the shell
        to perform (``lookup.read()``, ``await lookup.aread()``) and hand to `settle`; or
        ``None`` when ``cause`` does not trigger recovery (reported: the caller re-raises).

        A call whose keys cannot be had (a failing ``key=`` callable or splitter) gets a
        lookup that answers `Miss.ERROR`."""
        start = self._recovering(cause)
        if start is None:
            return None
        try:
            lookup = self.rt.handler.lookup(self, cause)
        except Exception as exc:
            lookup = failed_lookup(self, cause, exc)
        lookup.start = start
        return lookup

    def recover(self, cause: Exception) -> ReferentialPayload[Any] | None:
        """`failed`, the read and `settle` in one, for a thread: the store read made in place
        (`Handler.recover`). What the caller gets, or ``None`` to re-raise ``cause``."""
        start = self._recovering(cause)
        if start is None:
            return None
        found: ReferentialPayload[Any] | Miss
        try:
            lookup, found = self.rt.handler.recover(self, cause)
        except Exception as exc:
            lookup, found = failed_lookup(self, cause, exc), Miss.ERROR
        lookup.start = start
        return self.settle(lookup, found)

    def refused(self, guard: str, cause: Exception) -> None:
        """Report that guard ``guard`` refused this call with ``cause`` (once per refusal)."""
        self.rt.events.refused(guard, cause)

    def _recovering(self, cause: Exception) -> float | None:
        """Report a guard's refusal; whether ``cause`` is recovered: ``None`` if not (reported
        as raised), else when its read starts (``0.0`` when no observer times it)."""
        rt = self.rt
        self.seconds = seconds = perf_counter() - self.start
        if rt.execution is not None and (guard := refused_by(cause)) is not None:
            self.refused(guard, cause)  # a guard's refusal, not the upstream's failure
        recovers = rt.recovers
        if recovers is not None:
            accepted = isinstance(cause, recovers)
        else:  # a predicate, or exclusions (guards' refusals always recover)
            accepted = self.definition.accepts(cause) or isinstance(cause, rt.refusals)
        if not accepted:
            rt.events.raised(seconds, cause)
            return None
        return perf_counter() if rt.events.timed else 0.0

    def settle(  # noqa: PLR0915 - the recovery path inlined: one frame fewer per recovery
        self, lookup: Lookup, found: ReferentialPayload[Any] | Miss
    ) -> ReferentialPayload[Any] | None:
        """What the caller gets after recovery (``found``: what ``lookup`` read): an envelope,
        or ``None`` to re-raise the cause."""
        cause = lookup.cause
        assert cause is not None  # a recovery's lookup: the upstream raised
        rt = self.rt
        events = rt.events
        if events.timed or lookup.error is not None or lookup.chore_error is not None:
            looked_up(rt, lookup, found)
        seconds: float | None = self.seconds  # the time the failed upstream took
        unattempted = rt.unattempted
        if unattempted and isinstance(cause, unattempted):
            seconds = None  # refused by a guard: the upstream was not called
        hook = self.definition.on_recovered
        if _traces.isEnabledFor(DEBUG) and refused_by(cause) is None:
            # The upstream's traceback, at debug, for each failed call (the logs observer is
            # called only when the state changes): never at a higher level, it repeats.
            _traces.debug("failover %r: the upstream failed", self.definition.name, exc_info=cause)
        if isinstance(found, ReferentialPayload):
            as_of = found.as_of
            events.recovered(seconds, cause, as_of)
            if rt.throttle is not None and type(cause) is not Throttled:
                mark_throttled(self, rt.throttle, found)
            value = found.payload
            if KIND_OF(type(value)) != PLAIN:  # as in `live`: most results carry no freshness
                value = enrich(value, False, as_of)
            if hook is not None:  # the hook sees the entry as recovered (the store's is live)
                value = self._hooked(hook, cause, stale(found, cause), value)
            # `envelope`, inlined: the recovery path's one envelope, without a frame.
            made: Any = _new(Building)
            made.name = found.name
            made.key = found.key
            made.payload = value
            made.as_of = as_of
            made.expire_on = found.expire_on
            made.up_to_date = False
            made.cause = cause
            made.label = found.label
            made.partial = found.partial
            made.tags = found.tags
            made.fresh_ended = found.fresh_ended
            made.__class__ = ReferentialPayload
            out: ReferentialPayload[Any] = made
            events.served(out)
            return out
        events.not_recovered(seconds, cause)
        policy = rt.policy
        if policy is ExceptionPolicy.RETHROW:
            why = found.value if rt.unstorable is None else rt.unstorable
            note_unrecovered(cause, self.definition.name, why)
            return None
        if policy is ExceptionPolicy.NEVER_THROW:
            value = None
            if hook is not None:
                value = self._hooked(hook, cause, None, value)
        elif policy is ExceptionPolicy.RETURN_DEFAULT:  # makes its value itself: no hook
            value = default_for(rt.return_type)
        else:  # a callable policy makes its value itself: no hook
            value = policy(self.recover_context(cause, None))
        out = self.made_envelope(value, cause)
        events.served(out)
        return out

    def _hooked(
        self,
        hook: Callable[..., object],
        cause: Exception,
        found: ReferentialPayload[Any] | None,
        value: Any,
    ) -> Any:
        """``on_recovered``'s value; ``value`` itself when the hook fails (its bug must not
        cost the caller a good value: logged and counted)."""
        try:
            return hook(self.recover_context(cause, found), value)
        except Exception as exc:
            self.rt.events.hook_failed(exc)
            return value

    def made_envelope(
        self, value: Any, cause: BaseException | None = None
    ) -> ReferentialPayload[Any]:
        """The envelope of a value made by a policy: not from the store, so no time."""
        # A failing key= callable already showed up as a recover error.
        return envelope(
            self.definition.effective_name, envelope_key(self), value, None, None, False, cause
        )

    def recover_context(
        self, cause: BaseException | None, found: ReferentialPayload[Any] | None
    ) -> RecoverContext[Any]:
        """The frozen context handed to policies and hooks."""
        return RecoverContext(self.definition, self.arguments, cause, found, self.rt.return_type)
