"""The decisions of one call, shared by the sync and async shells: no I/O of its own.

`Runtime` is one failover bound to one engine. The shells (``decorator.py``) call or await the
upstream through the execution layer and hand the outcome here.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import typing
from collections.abc import Callable
from datetime import datetime
from time import perf_counter
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from .context import CallContext, Miss, RecoverContext
from .definition import FailoverDefinition
from .errors import ConfigurationError, SerializationError, StoreError
from .events import Events
from .execution import Execution
from .flight import Flights
from .handlers import Handler, envelope_key
from .payload import ReferentialPayload, enrich, envelope, plain_kind
from .policy import ExceptionPolicy, default_for
from .tenant import _current as _tenant
from .tenant import current_tenant, pinned

if TYPE_CHECKING:
    from .stores.tenant import MultiTenantStore

__all__ = ["Binder", "Runtime"]

log = logging.getLogger(__name__)
T = TypeVar("T")
_new = object.__new__

_SIMPLE_KINDS = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


class Binder:
    """Binds a call's arguments to the signature: values in signature order, defaults applied."""

    __slots__ = ("n", "names", "signature", "simple", "skip_first")

    def __init__(self, signature: inspect.Signature, skip_first: bool) -> None:
        params = list(signature.parameters.values())[1 if skip_first else 0 :]
        self.skip_first = skip_first
        self.signature = signature.replace(parameters=params)
        self.names = tuple(p.name for p in params)
        self.n = len(params)
        self.simple = all(p.kind in _SIMPLE_KINDS for p in params)

    def own(self, args: tuple[Any, ...]) -> tuple[Any, ...]:
        """The call's positional arguments without ``self``/``cls``."""
        return args[1:] if self.skip_first else args

    def values(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
        """The argument values in signature order (``args`` without ``self``/``cls``); raises
        ``TypeError`` for a call that does not fit the signature, as the function itself would."""
        if not kwargs and self.simple and len(args) == self.n:
            return args
        bound = self.signature.bind(*args, **kwargs)
        bound.apply_defaults()
        arguments = bound.arguments
        return tuple(arguments[n] for n in self.names)


class Decorated(Protocol):
    """What an engine needs of a decorated function to register and run it."""

    definition: FailoverDefinition
    binder: Binder
    fn: Callable[..., Any]


class Runtime:
    """One failover on one engine: what to store, what to recover, what the caller gets."""

    __slots__ = (
        "_return_type",
        "binder",
        "blocking",
        "blocking_writes",
        "clock",
        "definition",
        "events",
        "execution",
        "flights",
        "fn",
        "handler",
        "new_tenants_block",
        "policy",
        "refusals",
        "refused_types",
        "router",
        "unattempted",
        "unrouted",
        "unstorable",
    )

    def __init__(
        self,
        definition: FailoverDefinition,
        binder: Binder,
        fn: Callable[..., Any],
        handler: Handler,
        policy: ExceptionPolicy | Callable[[RecoverContext[Any]], object],
        clock: Callable[[], datetime],
        blocking: bool,
        blocking_writes: bool,
        events: Events,
        router: MultiTenantStore | None = None,
    ) -> None:
        self.definition = definition
        self.binder = binder
        self.fn = fn
        self.handler = handler
        # The execution layer (guards, soft timeout), bound by the engine; None: call directly.
        self.execution: Execution | None = None
        self.refusals: tuple[type[Exception], ...] = ()
        # Refusals raised instead of calling the upstream: no upstream time, no upstream error.
        self.unattempted: tuple[type[Exception], ...] = ()
        # Why nothing of this failover can be stored (said in the rethrow note), if known.
        self.unstorable: str | None = None
        # Result types this store refused to encode: not offered to it again (logged once).
        self.refused_types: set[type] = set()
        self.policy = policy
        self.clock = clock
        # The store chain does blocking I/O: async shells read (and, without async writes,
        # write) on a worker thread.
        self.blocking = blocking
        self.blocking_writes = blocking_writes
        self.router = router
        # Said when a call runs inside `failover.tenant(...)` on an engine that does not route
        # by tenant (it would share one store across tenants); None: routed, or opted out.
        self.unrouted: str | None = None
        # Single flight: the calls in flight per key, for their callers to share.
        self.flights = Flights() if definition.single_flight else None
        # A new tenant's store is made on its first use, and may connect to a database then.
        self.new_tenants_block = blocking and router is not None
        self._return_type: Any = _UNRESOLVED
        # What happened, to the observers (health, metrics, the stale report): once each.
        self.events = events

    def context(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> CallContext:
        """The call's context (``args`` as the wrapper got them, ``self``/``cls`` included)."""
        binder = self.binder
        if binder.skip_first:
            args = args[1:]
        if self.unrouted is not None and _tenant.get() is not None:  # one contextvar read
            self._refuse_tenant()
        ctx: CallContext = _new(CallContext)  # no __init__ frame: this runs on every call
        ctx.definition = self.definition
        ctx.binder = binder
        ctx.args = args
        ctx.kwargs = kwargs
        ctx.now = None
        ctx._arguments = None
        if kwargs or not binder.simple or len(args) != binder.n:
            ctx.values = binder.values(args, kwargs)
        else:
            ctx.values = args  # binder.values' fast path
        return ctx

    def _refuse_tenant(self) -> None:
        raise ConfigurationError(
            f"{self.unrouted}, but failover {self.definition.name!r} was called inside "
            f"failover.tenant({current_tenant()!r}): every tenant would read and write the "
            "same entries. Enable routing on the engine (Failover(store=..., "
            "tenant_resolver=...) with a store URL containing {tenant} or a factory "
            "tenant -> store), or pass ignore_tenant=True to the engine to share one store "
            "on purpose."
        )

    async def on_worker(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on a worker thread, so that store I/O never blocks the event loop.

        The context is copied into the thread (``asyncio.to_thread``), and the tenant is resolved
        here, on the calling thread, and pinned for the worker.
        """
        if self.router is None:
            return await asyncio.to_thread(fn, *args)
        try:
            tenant = self.router.resolve()
        except StoreError:
            tenant = None  # the worker meets the same error, where the caller's guard handles it
        token = pinned.set(tenant)
        try:
            return await asyncio.to_thread(fn, *args)
        finally:
            pinned.reset(token)

    # -- success ------------------------------------------------------------------------------

    def _store_failed(self) -> None:
        log.warning(
            "failover %r: storing the live result failed", self.definition.name, exc_info=True
        )

    def _refused(self, result: Any, exc: SerializationError) -> None:
        """The store cannot encode this result's type: say so once, and never offer it again
        (each attempt would cost an encoding and a traceback in the log)."""
        kind = type(result)
        name = f"{kind.__module__}.{kind.__qualname__}"
        self.refused_types.add(kind)
        if self.unstorable is None:
            self.unstorable = f"the store cannot encode {name}: {exc}"
        log.warning(
            "failover %r: the store cannot encode %s (%s); results of this type are returned "
            "live and no longer stored. Return plain data (a dict, a dataclass, a pydantic "
            "model: e.g. response.json()) to have them stored",
            self.definition.name,
            name,
            exc,
        )

    def succeeded(self, ctx: CallContext, result: Any, seconds: float | None = None) -> Any:
        """Store ``result`` and return it enriched as live; ``seconds`` (the time the upstream
        took) reports the call as live (a late result after a soft timeout is not a call).

        Nothing here may break the call: a failing clock, ``store_if``, key function, store or
        metrics object is store trouble, logged and counted, and the live result returns.
        """
        try:
            store_if = self.definition.store_if
            refused = self.refused_types
            if (store_if is None or store_if(result)) and not (refused and type(result) in refused):
                if self.events.timed:
                    self._timed_store(ctx, result)
                else:
                    self.handler.store(ctx, result)  # sets ctx.now
            else:
                ctx.now = self.clock()
        except SerializationError as exc:
            self._refused(result, exc)
        except Exception:
            self._store_failed()
        if seconds is not None:
            self.events.live(ctx.now, seconds)
        if plain_kind(type(result)):
            return result
        return enrich(result, True, ctx.now)

    def _timed_store(self, ctx: CallContext, result: Any) -> None:
        start = perf_counter()
        try:
            self.handler.store(ctx, result)
        except Exception:
            self.events.stored(False, perf_counter() - start)
            raise
        self.events.stored(True, perf_counter() - start)

    async def asucceeded(self, ctx: CallContext, result: Any, seconds: float) -> Any:
        """`succeeded` for an async caller: store I/O never blocks the event loop."""
        if self.blocking_writes or (self.new_tenants_block and self.tenant_unmade()):
            return await self.on_worker(self.succeeded, ctx, result, seconds)
        return self.succeeded(ctx, result, seconds)

    def shared(self, ctx: CallContext, result: Any, now: datetime | None, seconds: float) -> Any:
        """A result another call of the same key got (single flight), stored by that call:
        reported as live and enriched, not stored again."""
        ctx.now = now
        self.events.live(now, seconds)
        if plain_kind(type(result)):
            return result
        return enrich(result, True, now)

    def tenant_unmade(self) -> bool:
        """Whether the current tenant's store is still to be made (only with `new_tenants_block`:
        its first use may connect to a database, so async callers store on a worker thread)."""
        return self.router is not None and not self.router.ready()

    def live_envelope(self, ctx: CallContext, value: Any) -> ReferentialPayload[Any]:
        """The envelope of a live (already enriched) value."""
        d = self.definition
        now = ctx.now
        key = envelope_key(ctx)  # a failing key= callable already showed up as a store failure
        try:
            expire_on = None if now is None else d.expiry.compute_expiry(d, now)
        except Exception:  # so did a failing expiry policy
            expire_on = None
        return envelope(d.effective_name, key, value, now, expire_on, True)

    # -- failure ------------------------------------------------------------------------------

    def recover(self, ctx: CallContext, cause: Exception) -> ReferentialPayload[Any] | Miss:
        """Ask the handler chain; a failing recover is logged and behaves like a miss."""
        if self.events.timed:
            return self._timed_recover(ctx, cause)
        try:
            return self.handler.recover(ctx, cause)
        except Exception:
            return self._recover_failed()

    def _timed_recover(self, ctx: CallContext, cause: Exception) -> ReferentialPayload[Any] | Miss:
        start = perf_counter()
        try:
            found = self.handler.recover(ctx, cause)
        except Exception:
            self.events.read("error", perf_counter() - start, None)
            return self._recover_failed()
        self._read(found, start)
        return found

    def _read(self, found: ReferentialPayload[Any] | Miss, start: float) -> None:
        seconds = perf_counter() - start
        if isinstance(found, Miss):
            self.events.read("not_recovered", seconds, None)
        else:
            self.events.read("recovered", seconds, found)

    def _recover_failed(self) -> Miss:
        log.warning(
            "failover %r: recovering failed; treated as a miss", self.definition.name, exc_info=True
        )
        return Miss.ERROR

    async def arecover(self, ctx: CallContext, cause: Exception) -> ReferentialPayload[Any] | Miss:
        """`recover` for an async caller when the store does I/O: never blocks the event loop."""
        start = perf_counter()
        try:
            found = await self.handler.arecover(ctx, cause)
        except Exception:
            if self.events.timed:
                self.events.read("error", perf_counter() - start, None)
            return self._recover_failed()
        if self.events.timed:
            self._read(found, start)
        return found

    def resolve(
        self,
        ctx: CallContext,
        cause: Exception,
        found: ReferentialPayload[Any] | Miss,
        seconds: float | None = 0.0,
    ) -> ReferentialPayload[Any] | None:
        """What the caller gets after recovery: an envelope, or ``None`` to re-raise ``cause``.

        ``seconds`` is the time the failed upstream took (reported with the outcome).
        """
        d = self.definition
        if isinstance(cause, self.unattempted):
            seconds = None  # refused by a guard: the upstream was not called
        if isinstance(found, ReferentialPayload):
            self.events.recovered(seconds, cause, found.as_of)
        else:
            self.events.not_recovered(seconds, cause)
        hook = d.on_recovered
        recovered: ReferentialPayload[Any] | None = None
        if isinstance(found, ReferentialPayload):
            recovered = found
            value = enrich(found.payload, False, found.as_of)
        elif self.policy is ExceptionPolicy.RETHROW:
            _note(cause, d.name, found.value if self.unstorable is None else self.unstorable)
            return None
        elif self.policy is ExceptionPolicy.NEVER_THROW:
            value = None
        else:  # return_default and a callable policy make their value themselves: no hook
            hook = None
            if self.policy is ExceptionPolicy.RETURN_DEFAULT:
                value = default_for(self.return_type())
            else:
                value = self.policy(self.recover_context(ctx, cause, None))
        if hook is not None:
            try:
                value = hook(self.recover_context(ctx, cause, recovered), value)
            except Exception:  # the hook's bug must not cost the caller a good value
                self.events.hook_failed()
                log.warning(
                    "failover %r: on_recovered raised; the caller gets the value it was given",
                    d.name,
                    exc_info=True,
                )
        if recovered is None:
            out = self.made_envelope(ctx, value, cause)
        else:
            r = recovered
            out = envelope(r.name, r.key, value, r.as_of, r.expire_on, False, cause)
        self.events.served(out)
        return out

    def accepts(self, cause: Exception) -> bool:
        """Whether ``cause`` triggers recovery (execution-layer refusals always do)."""
        return self.definition.accepts(cause) or isinstance(cause, self.refusals)

    def bind(self, execution: Execution | None) -> None:
        """Put the upstream behind ``execution`` (``None``: basic execution)."""
        self.execution = execution
        self.refusals = () if execution is None else execution.refusals
        self.unattempted = () if execution is None else execution.unattempted

    def late(self, ctx: CallContext, result: Any) -> None:
        """Store a result that came after its callers stopped waiting (soft timeout, sync
        upstream: on the engine's pool thread, in the caller's context)."""
        self.succeeded(ctx, result)

    async def alate(self, ctx: CallContext, result: Any) -> None:
        """`late` for an ``async def`` upstream: never blocks the event loop on store I/O."""
        if self.blocking_writes or (self.new_tenants_block and self.tenant_unmade()):
            await self.on_worker(self.succeeded, ctx, result)
        else:
            self.succeeded(ctx, result)

    def failed(
        self, ctx: CallContext, cause: Exception, seconds: float = 0.0
    ) -> ReferentialPayload[Any] | None:
        """Recover and resolve a failed call: an envelope, or ``None`` to re-raise ``cause``."""
        if not self.accepts(cause):
            self.events.raised(seconds, cause)
            return None
        return self.resolve(ctx, cause, self.recover(ctx, cause), seconds)

    async def afailed(
        self, ctx: CallContext, cause: Exception, seconds: float
    ) -> ReferentialPayload[Any] | None:
        """`failed` for an async caller: recovery never blocks the event loop."""
        if not self.accepts(cause):
            self.events.raised(seconds, cause)
            return None
        found = await self.arecover(ctx, cause) if self.blocking else self.recover(ctx, cause)
        return self.resolve(ctx, cause, found, seconds)

    def made_envelope(
        self, ctx: CallContext, value: Any, cause: BaseException | None = None
    ) -> ReferentialPayload[Any]:
        """The envelope of a value made by a policy: not from the store, so no time."""
        # A failing key= callable already showed up as a recover error.
        return envelope(
            self.definition.effective_name, envelope_key(ctx), value, None, None, False, cause
        )

    def recover_context(
        self, ctx: CallContext, cause: BaseException | None, found: ReferentialPayload[Any] | None
    ) -> RecoverContext[Any]:
        """The frozen context handed to policies and hooks."""
        return RecoverContext(self.definition, ctx.arguments, cause, found, self.return_type())

    def return_type(self) -> Any:
        """The return annotation, resolved on first use (forward references may be defined
        after decoration)."""
        if self._return_type is _UNRESOLVED:
            self._return_type = resolve_return_type(self.fn, self.definition.return_annotation)
        return self._return_type


_UNRESOLVED: Any = object()


def resolve_return_type(fn: Callable[..., Any], fallback: Any) -> Any:
    """``fn``'s return annotation with forward references evaluated, or ``fallback``."""
    try:
        return typing.get_type_hints(fn, include_extras=True).get("return", fallback)
    except Exception:
        return fallback


def _note(cause: BaseException, name: str, why: str) -> None:
    """Say on ``cause`` why failover ``name`` recovered nothing: one note per failover, however
    often the same exception object passes (an upstream re-raising a kept error, nested calls),
    so that notes never pile up on it."""
    prefix = f"failover {name!r}: nothing recovered ("
    note = f"{prefix}{why})"
    notes = getattr(cause, "__notes__", None)
    if isinstance(notes, list):
        for i, old in enumerate(notes):
            if isinstance(old, str) and old.startswith(prefix):
                notes[i] = note  # the latest reason, in the note's place
                return
    cause.add_note(note)
