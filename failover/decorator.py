"""The ``@failover`` decorator: validates settings once, then two thin shells (sync and async)
around the shared `Runtime` decisions."""

from __future__ import annotations

import functools
import inspect
import logging
from asyncio import _get_running_loop as _running_loop  # C, no exception without a loop
from collections.abc import Callable, Coroutine
from datetime import datetime
from time import perf_counter
from typing import Any, ParamSpec, TypeVar, Unpack, overload

from . import conditional, switches
from .call import call_of
from .context import CallContext
from .core import Binder, Runtime
from .definition import FailoverDefinition
from .engine import Failover
from .engine import default as default_engine
from .errors import ConfigurationError
from .execution import Wait
from .functions import AsyncFailoverFunction, FailoverFunction, Method
from .handlers import Partial, envelope_key
from .payload import ReferentialPayload
from .refresh import MISSED
from .settings import Options, check_names, described, parameters, resolve
from .switches import CONDITIONAL, DISABLED, REFRESHING
from .throttle import serve_throttled, throttled_read, unthrottle

__all__ = ["AsyncFailoverFunction", "FailoverFunction", "failover"]

log = logging.getLogger("failover")
P = ParamSpec("P")
R = TypeVar("R")


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
def _sync_shell(state: State, envelope: bool) -> Callable[..., Any]:  # noqa: PLR0915
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
            elif (ex := rt.guarded) is not None:  # `with call` and `call.run`, inlined
                call.start = perf_counter()
                token = ex.admit()
                if type(token) is Wait:
                    token = token.block()
                try:
                    result = upstream(*args, **kwargs)
                except BaseException as exc:
                    ex.exit(token, exc)
                    raise
                ex.exit(token, None)
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


def _async_shell(state: State, envelope: bool) -> Callable[..., Any]:  # noqa: PLR0915
    """The ``async def`` wrapper, as `_sync_shell`; store I/O never blocks the event loop."""
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


# -- building --------------------------------------------------------------------------------


def _is_async(fn: Any) -> bool:
    # Callable objects with an `async def __call__` are async too.
    if inspect.iscoroutinefunction(fn):
        return True
    # The method itself is needed (to inspect it), not whether the object is callable.
    call = None if inspect.isfunction(fn) else getattr(type(fn), "__call__", None)  # noqa: B004
    return call is not None and inspect.iscoroutinefunction(call)


def _is_method(fn: Callable[..., Any], signature: inspect.Signature) -> bool:
    parts = getattr(fn, "__qualname__", "").split(".")
    in_class = len(parts) >= 2 and parts[-2] != "<locals>"
    params = list(signature.parameters.values())
    return in_class and bool(params) and params[0].name in ("self", "cls")


def _default_name(fn: Any, function: str) -> str:
    """``module.qualname``: the name of a failover decorated without one."""
    if not hasattr(fn, "__qualname__"):
        # A callable object or a partial: its repr carries its address, so a name made from it
        # would change with every process, and a persistent store would never find its entries.
        raise ConfigurationError(
            f"failover: {fn!r} has no stable qualified name to derive a name from; pass name="
        )
    return function


def _build(fn: Any, name: str | None, options: dict[str, Any]) -> Any:
    kind: type[staticmethod[Any, Any]] | type[classmethod[Any, Any, Any]] | None = None
    if isinstance(fn, staticmethod | classmethod):
        kind, fn = type(fn), fn.__func__
    if not callable(fn):
        raise ConfigurationError(f"failover: can only decorate callables, got {fn!r}")
    function = f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"
    if name is None:
        name = _default_name(fn, function)
    if not isinstance(name, str) or not name:
        raise ConfigurationError(f"failover {function}: name must be a non-empty string")
    _check(options, repr(name))
    engine = options.get("engine")
    signature = inspect.signature(fn)
    is_method = kind is classmethod or (kind is None and _is_method(fn, signature))
    unwrapped = inspect.unwrap(fn)
    # The callable itself first: an `async def` wrapper around a sync function (asyncify) is
    # async, whatever it wraps; a plain wrapper around an `async def` returns its coroutine.
    is_async = _is_async(fn) or _is_async(unwrapped)
    if any(
        inspect.isgeneratorfunction(f) or inspect.isasyncgenfunction(f) for f in (fn, unwrapped)
    ):
        raise ConfigurationError(
            f"failover {name!r}: {function} is a generator function; a generator can be neither "
            "stored nor replayed: return a list (or another collection) instead"
        )
    definition = resolve(fn, name, function, options, is_async, is_method)
    state = State(definition, Binder(signature, is_method), fn, engine)
    shell = _async_shell if definition.is_async else _sync_shell
    # A function object given the failover's attributes: typed by the FailoverFunction Protocol
    # for callers, ``Any`` here where they are set.
    wrapper: Any = functools.update_wrapper(shell(state, False), fn)
    wrapper.referential = shell(state, True)
    wrapper.peek = state.peek
    wrapper.invalidate = state.invalidate
    wrapper.refresh = switches.refresher(wrapper, definition.is_async)
    conditional.arm_if_named(fn)
    wrapper.expire = state.expire
    wrapper.invalidate_all = state.invalidate_all
    wrapper.definition = definition
    wrapper._failover_state = state
    if engine is None:
        default_engine.register_default(state)
    else:
        engine.register(state)
    if kind is staticmethod:
        return staticmethod(wrapper)
    if is_method:
        return Method(wrapper, bind_class=kind is classmethod)
    return wrapper


def _check(settings: dict[str, Any], owner: str) -> None:
    """Refuse unknown settings and an ``engine=`` that is not one, naming ``owner``."""
    check_names(settings, owner)
    engine = settings.get("engine")
    if engine is not None and not isinstance(engine, Failover):
        raise ConfigurationError(f"failover {owner}: engine= must be a Failover, got {engine!r}")


class _Decorator:
    """The decorator made by ``failover(...)``: typed for sync and async functions."""

    def __init__(self, name: str | None, options: dict[str, Any]):
        self.name = name
        self.options = options

    # An async function is also a Callable[P, R]; the first matching overload wins, as intended.
    @overload
    def __call__(  # type: ignore[overload-overlap]
        self, fn: Callable[P, Coroutine[Any, Any, R]]
    ) -> AsyncFailoverFunction[P, R]: ...
    @overload
    def __call__(self, fn: Callable[P, R]) -> FailoverFunction[P, R]: ...
    def __call__(self, fn: Callable[P, Any]) -> Any:
        return _build(fn, self.name, self.options)


@overload
def failover(  # type: ignore[overload-overlap]  # async first: see _Decorator.__call__
    name: Callable[P, Coroutine[Any, Any, R]], /
) -> AsyncFailoverFunction[P, R]: ...
@overload
def failover(name: Callable[P, R], /) -> FailoverFunction[P, R]: ...
@overload
def failover(name: str | None = None, /, **options: Unpack[Options]) -> _Decorator: ...
@overload
def failover(*, name: str | None, **options: Unpack[Options]) -> _Decorator: ...
def failover(name: Any = None, /, **options: Any) -> Any:
    """Serve the last stored result, marked stale, when the decorated call fails.

    Used bare (``@failover``), with a name (``@failover("rates")``), or with a name and
    settings (``@failover("rates", ttl="15m")``). Every setting is a keyword, declared once in
    `failover.settings.Options` with its default: the signature `help()` shows lists them all.

    Args:
        name: the failover's name, stable across deploys (default ``module.qualname``).
        **options: the settings of `failover.settings.Options`.

    Raises:
        ConfigurationError: an unknown setting, or one that cannot work, naming the failover
            and the setting.
    """
    settings = dict(options)
    if "name" in settings:  # failover(name="...") reads as well as failover("...")
        name = settings.pop("name")
    if isinstance(name, str):  # else `_build` checks, once the function names the failover
        _check(settings, repr(name))
    if callable(name) and not isinstance(name, str):
        return _build(name, None, settings)
    return _Decorator(name, settings)


def _shown(default: Any) -> str:
    """A default as it is spelled in code: ``(Exception,)``, not ``(<class 'Exception'>,)``."""
    if isinstance(default, tuple) and all(isinstance(t, type) for t in default):
        names = ", ".join(t.__name__ for t in default)
        return f"({names},)" if len(default) == 1 else f"({names})"
    return repr(default)


def _public_face() -> None:
    """Give `failover` the signature and docstring `help()` and IDEs show: ``name`` and each
    setting of `Options` as a keyword with its default (the overloads above type the same
    settings through ``Unpack[Options]``), so an option added there needs no edit here."""
    name = inspect.Parameter(
        "name", inspect.Parameter.POSITIONAL_OR_KEYWORD, default=None, annotation=str | None
    )
    failover.__signature__ = inspect.Signature([name, *parameters()])  # type: ignore[attr-defined]
    said = described()
    lines = [f"    {p.name}={_shown(p.default)}: {said.get(p.name, '')}" for p in parameters()]
    failover.__doc__ = f"{inspect.cleandoc(failover.__doc__ or '')}\n\nSettings:\n" + "\n".join(
        lines
    )


_public_face()
