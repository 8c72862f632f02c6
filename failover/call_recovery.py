"""The recovery half of a call (`failover.call.Call`): the upstream raised, so find what the
store holds and settle what the caller gets (a stale envelope, the exception policy's answer, or
``None`` to re-raise). The shells call it as ``call.recover(exc)`` on a thread, or
``lookup = call.failed(exc)`` then ``call.settle(lookup, await lookup.aread())`` on a loop.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from logging import DEBUG
from time import perf_counter
from typing import TYPE_CHECKING, Any

from .call_io import looked_up, note_unrecovered
from .context import CallContext, Miss, RecoverContext
from .errors import Throttled, refused_by
from .handlers import envelope_key
from .handlers.lookup import Lookup, failed_lookup, stale
from .payload import KIND_OF, PLAIN, Building, ReferentialPayload, enrich, envelope
from .policy import ExceptionPolicy, default_for
from .throttle import mark_throttled

if TYPE_CHECKING:
    from .core import Runtime

__all__ = ["Recovery"]

_new = object.__new__
_traces = logging.getLogger("failover.health")  # the logs observer's logger (`log_observer`)


class Recovery(CallContext):
    """What a `failover.call.Call` does once its upstream raised (its fields are the call's)."""

    __slots__ = ("seconds",)

    rt: Runtime
    start: float
    seconds: float | None  # how long the failed upstream took (set by `failed`)

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
