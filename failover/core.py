"""What the calls of one failover share: `Runtime`, one failover bound to one engine.

Its handler chain, policy, events, clock and tenant, the hand-off of store I/O to a worker
thread, and what a failed write or a refused value costs. The decisions of one call are
`failover.call.Call`'s; the shells (``decorator.py``) call or await the upstream through the
execution layer and hand the outcome to a `Call`.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import logging
import typing
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from . import switches
from .context import RecoverContext
from .definition import FailoverDefinition
from .events import Events
from .execution import Execution, SoftTimeout
from .handlers import Handler
from .policy import ExceptionPolicy
from .tenant import pinned
from .throttle import Throttle

if TYPE_CHECKING:
    from .stores.layers.routing import MultiTenantStore

__all__ = ["Binder", "Runtime"]

log = logging.getLogger(__name__)
T = TypeVar("T")

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
        "__weakref__",
        "ahead",
        "bare",
        "before",
        "binder",
        "blocking",
        "blocking_writes",
        "call_type",
        "clock",
        "definition",
        "events",
        "execution",
        "flights",
        "fn",
        "fresh_for",
        "fresh_window",
        "guarded",
        "handler",
        "may_offload",
        "new_tenants_block",
        "plain",
        "policy",
        "recovers",
        "refresh_at",
        "refusals",
        "refused_types",
        "return_type",
        "router",
        "throttle",
        "timeout",
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
        self.timeout: SoftTimeout | None = None  # the execution's soft timeout, if any
        self.refusals: tuple[type[Exception], ...] = ()
        # What triggers recovery as one isinstance check, when it can be one (else `Call` asks
        # the definition).
        self.recovers: tuple[type[BaseException], ...] | None = None
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
        self.flights: Any = None  # a flight.Flights, set by the engine when single_flight is on
        # What a call of this failover is (`call.Call`; `flight.FlownCall` with single flight),
        # set by the engine; and whether it has nothing to enter (no guards, no flight).
        self.call_type: Any = None
        self.bare = True
        # The guards when the shell may enter and leave them itself (no soft timeout, no
        # single flight: nothing else a `with call` would do), sparing the call three frames.
        self.guarded: Execution | None = None
        # The cache-first window (`Call.fresh`), and refresh ahead past ``refresh_at`` seconds of
        # age: a refresh.RefreshAhead, set by the engine when refresh_ahead is on.
        self.fresh_for = definition.fresh_for
        # A fixed window; None when fresh_for is a callable (a window per entry: `Call.fresh`).
        fresh = definition.fresh_for
        self.fresh_window: timedelta | None = (
            fresh if isinstance(fresh, timedelta) else timedelta(0) if fresh is None else None
        )
        # The fail-safe throttle's table of keys (`throttle.Throttle`), when throttle= is set.
        self.throttle: Throttle | None = (
            None if definition.throttle is None else Throttle(definition.throttle)
        )
        # Whether a call has anything to do before calling the upstream: fresh_for, throttle=,
        # or the switches (`failover.switches`, which turn it on for every runtime when used).
        self.before = switches.watch(self) or fresh is not None or self.throttle is not None
        ahead = definition.refresh_ahead
        self.refresh_at = 0.0 if ahead is None else ahead.total_seconds()
        self.ahead: Any = None
        # A new tenant's store is made on its first use, and may connect to a database then.
        self.new_tenants_block = blocking and router is not None
        # Whether an async caller may have to store on a worker thread (`offloads` decides).
        self.may_offload = blocking_writes or self.new_tenants_block
        # The return annotation, forward references resolved (the runtime is made on the
        # failover's first call: by then they are defined): what policies and hooks are told.
        self.return_type: Any = resolve_return_type(fn, definition.return_annotation)
        # What happened, to the observers (health, metrics, the stale report): once each.
        self.events = events
        # The plain success path (a `failover.plain.Plain`, which reads this runtime: not named
        # here, no import circle), set by the engine when the failover is plain.
        self.plain: Any = None

    async def on_worker(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on a worker thread, so that store I/O never blocks the event loop.

        The context is copied into the thread (``asyncio.to_thread``), and the tenant is resolved
        here, on the calling thread, and pinned for the worker (`MultiTenantStore.here`).
        """
        if self.router is None:
            return await asyncio.to_thread(fn, *args)
        token = pinned.set(self.router.here())
        try:
            return await asyncio.to_thread(fn, *args)
        finally:
            pinned.reset(token)

    def flight_key(self, key: Any) -> Any:
        """``key`` as the tables of calls in flight (single flight, the soft timeout's shared
        calls) know it on a failover routed by tenant: ``(tenant, key)``, the tenant resolved
        here, on the caller's thread (`MultiTenantStore.here`), so that a tenant never joins another
        tenant's call and gets its result. A call whose tenant cannot be resolved shares with
        none (a key of its own)."""
        router = self.router
        tenant = None if router is None else router.here()
        return object() if tenant is None else (tenant, key)

    def offloads(self) -> bool:
        """Whether an async caller stores on a worker thread: the store chain writes with
        blocking I/O, or the current tenant's store is still to be made (its first use may
        connect to a database)."""
        return self.blocking_writes or (
            self.new_tenants_block and self.router is not None and not self.router.ready()
        )

    async def off_loop(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` (a store write) for an async caller: on a worker thread when it
        `offloads` now, else in place.

        A write handed to a worker runs to its end even if the caller is cancelled while it
        waits in a busy executor: the result is still stored, and a single-flight leader still
        hands it to its followers there (cancelled with its caller, it would leave the key's
        flight open for good). The caller's cancellation itself is not delayed. An executor
        that takes no more jobs (shut down) has the write made in place."""
        if not self.offloads():
            return fn(*args)
        try:
            job = self._to_worker(fn, *args)
        except RuntimeError:  # the loop's executor is shut down (the loop is ending): here
            return fn(*args)
        return await asyncio.shield(job)

    def _to_worker(self, fn: Callable[..., T], *args: Any) -> asyncio.Future[T]:
        """``fn(*args)`` submitted now to the loop's default executor, as `on_worker` runs it
        (a copy of the context, the tenant pinned)."""
        loop = asyncio.get_running_loop()
        if self.router is None:
            context = contextvars.copy_context()
        else:
            token = pinned.set(self.router.here())
            try:
                context = contextvars.copy_context()
            finally:
                pinned.reset(token)
        return loop.run_in_executor(None, functools.partial(context.run, fn, *args))

    def bind(self, execution: Execution | None) -> None:
        """Put the upstream behind ``execution`` (``None``: basic execution)."""
        self.execution = execution
        self.bare = execution is None and self.flights is None
        inline = execution is not None and execution.timeout is None and self.flights is None
        self.guarded = execution if inline else None
        self.refusals = () if execution is None else execution.refusals
        d = self.definition
        exceptions = d.exceptions
        if isinstance(exceptions, tuple) and not d.exclude:
            self.recovers = (*exceptions, *self.refusals)
        else:  # a predicate, or exclusions: `Call` asks the definition
            self.recovers = None
        self.unattempted = () if execution is None else execution.unattempted
        self.timeout = None if execution is None else execution.timeout


def resolve_return_type(fn: Callable[..., Any], fallback: Any) -> Any:
    """``fn``'s return annotation with forward references evaluated, or ``fallback``."""
    try:
        return typing.get_type_hints(fn, include_extras=True).get("return", fallback)
    except Exception:
        return fallback
