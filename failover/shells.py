"""The two thin shells of a decorated function (sync and async) around the shared `Runtime`
decisions, and the `State` they share: what a call does on the hot path, inlined in one frame.
"""

from __future__ import annotations

import logging
from asyncio import _get_running_loop as _running_loop  # C, no exception without a loop
from collections.abc import Callable
from datetime import UTC, datetime
from time import perf_counter
from typing import Any

from . import conditional, switches
from .call import call_of
from .context import CallContext
from .core import Binder, Runtime
from .definition import FailoverDefinition
from .engine import Failover
from .engine import default as default_engine
from .execution import Wait
from .handlers import Partial, envelope_key
from .payload import KIND_OF, PLAIN, ReferentialPayload, enrich
from .refresh import MISSED
from .switches import CONDITIONAL, DISABLED, REFRESHING, STATE, STEERS, block
from .tenant import read_tenant, refuse_unrouted
from .throttle import serve_throttled, throttled_read, unthrottle

__all__ = ["State", "async_shell", "sync_shell"]

log = logging.getLogger("failover")


class State:
    """What one decorated function shares between its shells and the engines it runs on."""

    __slots__ = ("__weakref__", "_bound", "binder", "definition", "engine", "fn", "loop_warned")

    def __init__(
        self,
        definition: FailoverDefinition,
        binder: Binder,
        fn: Callable[..., Any],
        engine: Failover | None,
    ) -> None:
        self.definition = definition
        self.binder = binder
        self.fn = fn
        self.engine = engine
        self._bound: tuple[Failover, Runtime | None] | None = None
        self.loop_warned = False

    def warn_in_loop(self) -> None:
        """Say once that this sync failover was called on an event loop's thread: the loop
        stands still while the upstream (and a store read on recovery) runs."""
        self.loop_warned = True
        log.warning(
            "failover %r: a sync function called from a running event loop blocks the loop "
            "while its upstream runs (a soft timeout too: it waits on this thread); make it "
            "`async def` (an async client) and await it, or run it with asyncio.to_thread",
            self.definition.name,
        )

    def runtime(self) -> Runtime | None:
        """The runtime on the engine in force, or ``None`` when that engine is disabled."""
        engine = self.engine or default_engine.installed or default_engine.get_engine()
        bound = self._bound
        if bound is not None and bound[0] is engine:
            return bound[1]
        rt = engine.runtime(self) if engine.enabled else None
        self._bound = (engine, rt)
        return rt

    def passthrough(self, args: tuple[Any, ...], kwargs: dict[str, Any], result: Any) -> Any:
        """The envelope of a call made while the engine is disabled (a failing key function or
        clock costs the envelope its key or time, never the call)."""
        d = self.definition
        engine = self.engine or default_engine.installed or default_engine.get_engine()
        own = self.binder.own(args)
        ctx = CallContext(d, self.binder, own, kwargs, self.binder.values(own, kwargs))
        try:
            now: datetime | None = engine.clock()
        except Exception:
            now = None
        return ReferentialPayload(d.effective_name, envelope_key(ctx), result, now, None, True)

    def peek(self, *args: Any, **kwargs: Any) -> ReferentialPayload[Any] | None:
        """The stored, unexpired entry for the call (stale), or ``None``; what the store
        raised (``SerializationError`` for an entry that cannot be read back) is raised."""
        rt = self.runtime()
        return (
            None if rt is None else rt.handler.lookup(call_of(rt, args, kwargs), None, False).peek()
        )

    def invalidate(self, *args: Any, **kwargs: Any) -> None:
        """Delete the stored entry for the call (and its throttle: nothing is left to serve)."""
        rt, bound = self.runtime(), self._bound  # `runtime` binds the engine in force
        if rt is not None:
            call = call_of(rt, args, kwargs)
            rt.handler.invalidate(call)
            unthrottle(rt, call)
            if bound is not None:
                bound[0].entries.invalidated(self.definition.effective_name)

    def expire(self, *args: Any, **kwargs: Any) -> bool:
        """End the fresh window of the call's stored entry (see `FailoverFunction.expire`)."""
        rt, bound = self.runtime(), self._bound  # `runtime` binds the engine in force
        if rt is None or bound is None:
            return False
        return rt.handler.expire(call_of(rt, args, kwargs), bound[0].entries) > 0

    def invalidate_all(self) -> int:
        """Delete every stored entry of the failover (see `FailoverFunction.invalidate_all`)."""
        rt, bound = self.runtime(), self._bound  # `runtime` binds the engine in force
        if rt is None or bound is None:
            return 0
        return rt.handler.invalidate_all(self.definition.effective_name, bound[0].entries)


# One frame on the hot path: its branches stay inline, whatever their count.
def sync_shell(state: State, envelope: bool) -> Callable[..., Any]:  # noqa: PLR0915
    """The synchronous wrapper: the call itself, or (``envelope``) its ``.referential``.

    Made once per flag, so the hot path has no extra frame to pass the flag through.
    """
    fn = state.fn

    def shell(*args: Any, **kwargs: Any) -> Any:  # noqa: PLR0915 - the hot path, inlined
        bound = state._bound  # State.runtime's cache check, inlined: it runs on every call
        if bound is not None and bound[0] is (state.engine or default_engine.installed):
            rt = bound[1]
        else:
            rt = state.runtime()
        if rt is None:
            result = fn(*args, **kwargs)
            return state.passthrough(args, kwargs, result) if envelope else result
        if _running_loop() is not None and not state.loop_warned:
            state.warn_in_loop()
        if (
            (plain := rt.plain) is not None
            and not envelope
            and (not rt.before or not (block() | STATE.armed) & STEERS)
        ):
            # The plain success path (`failover.plain`): the time as a float, the upstream, and
            # `Plain.live` for `call_of`, `Call.live` and the handler's store; a `Call` only
            # when the upstream fails. A plain failover's ``before`` is the switches' alone:
            # only a `disabled` block or conditional refresh steers its call (`STEERS`).
            if rt.unrouted is not None and read_tenant() is not None:
                refuse_unrouted(rt.unrouted, state.definition.name)
            start = perf_counter()
            if start < plain.until:  # the clock as this reading plus an offset (`Plain.at`)
                at: float | None = start + plain.offset
            else:
                try:
                    at = plain.at(start)
                except Exception:  # store trouble: the general path meets and reports it
                    at = None
            if at is not None:
                try:
                    if (ex := rt.guarded) is None:
                        result = fn(*args, **kwargs)
                    else:
                        result = ex.run(fn, args, kwargs)
                except Exception as exc:
                    out = plain.recover(rt, args, kwargs, exc, start)
                    if out is None:  # not from the table: the general recovery decides
                        call = call_of(rt, args, kwargs, None, True)
                        call.start = start
                        out = call.recover(exc)
                        if out is None:
                            raise
                    out = out.payload  # no local keeps the envelope: as below
                    return out
                end = perf_counter()
                plain.live(rt, args, kwargs, result, at, end - start, end)
                if type(result) is dict or KIND_OF(type(result)) == PLAIN:
                    return result
                return enrich(result, True, datetime.fromtimestamp(at, UTC))
        call = call_of(rt, args, kwargs)
        part = None
        upstream = fn
        if rt.before:  # fresh_for, throttle=, or the switches: see `failover.switches`
            here = switches.here() if switches.STATE.on else 0
            if here:
                if here & DISABLED:  # a pass-through: nothing read, nothing stored
                    result = fn(*args, **kwargs)
                    return state.passthrough(args, kwargs, result) if envelope else result
                if here & REFRESHING:
                    unthrottle(rt, call)
                if here & CONDITIONAL:
                    upstream = conditional.upstream(call, fn)
            if here & REFRESHING:
                pass  # the upstream is called: no fresh answer, no throttled one
            elif rt.fresh_for is not None and (found := call.fresh()) is not None:
                if not isinstance(found, Partial):
                    return call.served_fresh(found, args, kwargs, envelope)
                part = found
                args, kwargs = call.narrowed(found, args)
            elif rt.ahead is not None:  # a refresh of this key in flight answers it too
                value = rt.ahead.join(call)
                if value is not MISSED:
                    return call.envelope(value) if envelope else value
            if rt.throttle is not None and not here & REFRESHING and part is None:
                lookup = throttled_read(call)  # the key failed lately: stale, no upstream
                out = None if lookup is None else serve_throttled(call, lookup, lookup.read())
                if out is not None:
                    return out if envelope else out.payload
        try:
            if rt.bare:  # nothing to enter: no `with` on the hottest path
                call.start = perf_counter()
                result = upstream(*args, **kwargs)
            elif (ex := rt.guarded) is not None:  # `with call` and `call.run`, in one
                call.start = perf_counter()
                result = ex.run(upstream, args, kwargs)
            else:
                with call:
                    result = call.run(upstream, args, kwargs)
        except Exception as exc:
            out = call.recover(exc)  # recovered from the store, or None: re-raise
            if out is None:
                raise
            if envelope:
                return out
            # No local of this frame, which the cause's traceback holds, keeps the envelope
            # (it holds the cause): no cycle left for the garbage collector to find.
            out = out.payload
            return out
        value = call.live(result)
        if part is not None:  # the fresh slices and the upstream's answer for the others
            merged = part.merge(result)
            return merged if envelope else merged.payload
        return call.envelope(value) if envelope else value

    return shell


def async_shell(state: State, envelope: bool) -> Callable[..., Any]:  # noqa: PLR0915
    """The ``async def`` wrapper, as `sync_shell`; store I/O never blocks the event loop."""
    fn = state.fn

    async def shell(*args: Any, **kwargs: Any) -> Any:  # noqa: PLR0915 - as the sync shell
        bound = state._bound
        if bound is not None and bound[0] is (state.engine or default_engine.installed):
            rt = bound[1]
        else:
            rt = state.runtime()
        if rt is None:
            result = await fn(*args, **kwargs)
            return state.passthrough(args, kwargs, result) if envelope else result
        if (
            (plain := rt.plain) is not None
            and not envelope
            and (not rt.before or not (block() | STATE.armed) & STEERS)
        ):
            # As in the sync shell (a plain store does no I/O: nothing to offload).
            if rt.unrouted is not None and read_tenant() is not None:
                refuse_unrouted(rt.unrouted, state.definition.name)
            start = perf_counter()
            if start < plain.until:
                at: float | None = start + plain.offset
            else:
                try:
                    at = plain.at(start)
                except Exception:
                    at = None
            if at is not None:
                try:
                    if (ex := rt.guarded) is None:
                        result = await fn(*args, **kwargs)
                    else:
                        token = ex.admit()
                        if type(token) is Wait:
                            token = await token.wait()
                        try:
                            result = await fn(*args, **kwargs)
                        except BaseException as exc:
                            ex.exit(token, exc)
                            raise
                        ex.exit(token, None)
                except Exception as exc:
                    out = plain.recover(rt, args, kwargs, exc, start)
                    if out is None:  # as in the sync shell
                        call = call_of(rt, args, kwargs, None, True)
                        call.start = start
                        lookup = call.failed(exc)
                        out = None if lookup is None else call.settle(lookup, await lookup.aread())
                        lookup = None  # it holds the cause: no cycle through this frame
                        if out is None:
                            raise
                    out = out.payload
                    return out
                end = perf_counter()
                plain.live(rt, args, kwargs, result, at, end - start, end)
                if type(result) is dict or KIND_OF(type(result)) == PLAIN:
                    return result
                return enrich(result, True, datetime.fromtimestamp(at, UTC))
        call = call_of(rt, args, kwargs)
        part = None
        upstream = fn
        if rt.before:  # fresh_for, throttle=, or the switches: see `failover.switches`
            here = switches.here() if switches.STATE.on else 0
            if here:
                if here & DISABLED:  # a pass-through: nothing read, nothing stored
                    result = await fn(*args, **kwargs)
                    return state.passthrough(args, kwargs, result) if envelope else result
                if here & REFRESHING:
                    unthrottle(rt, call)
                if here & CONDITIONAL:
                    upstream = conditional.aupstream(call, fn)
            found = None
            if not here & REFRESHING and rt.fresh_for is not None:
                found = await rt.on_worker(call.fresh) if rt.blocking else call.fresh()
            if here & REFRESHING:
                pass  # the upstream is called: no fresh answer, no throttled one
            elif found is not None:
                if not isinstance(found, Partial):
                    return call.served_fresh(found, args, kwargs, envelope)
                part = found
                args, kwargs = call.narrowed(found, args)
            elif rt.ahead is not None:  # a refresh of this key in flight answers it too
                value = await rt.ahead.ajoin(call)
                if value is not MISSED:
                    return call.envelope(value) if envelope else value
            if rt.throttle is not None and not here & REFRESHING and part is None:
                lookup = throttled_read(call)  # the key failed lately: stale, no upstream
                out = (
                    None if lookup is None else serve_throttled(call, lookup, await lookup.aread())
                )
                if out is not None:
                    return out if envelope else out.payload
        try:
            if rt.bare:
                call.start = perf_counter()
                result = await upstream(*args, **kwargs)
            elif (ex := rt.guarded) is not None:  # as in the sync shell
                call.start = perf_counter()
                token = ex.admit()
                if type(token) is Wait:
                    token = await token.wait()
                try:
                    result = await upstream(*args, **kwargs)
                except BaseException as exc:
                    ex.exit(token, exc)
                    raise
                ex.exit(token, None)
            else:
                async with call:
                    result = await call.arun(upstream, args, kwargs)
        except Exception as exc:
            lookup = call.failed(exc)  # the store read that recovers the call, if any
            out = None if lookup is None else call.settle(lookup, await lookup.aread())
            lookup = None  # it holds the cause: no cycle through this frame (as the sync shell)
            if out is None:
                raise
            if envelope:
                return out
            out = out.payload
            return out
        value = await rt.off_loop(call.live, result) if rt.may_offload else call.live(result)
        if part is not None:  # the fresh slices and the upstream's answer for the others
            merged = part.merge(result)
            return merged if envelope else merged.payload
        return call.envelope(value) if envelope else value

    return shell
