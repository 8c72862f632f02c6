"""The ``@failover`` decorator: validates settings once, then two thin shells (sync and async)
around the shared `Runtime` decisions."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Coroutine
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, Protocol, TypeVar, overload

from . import engine as _engine
from .context import CallContext, PolicyLike, RecoverContext
from .core import Binder, Runtime
from .definition import FailoverDefinition
from .errors import ConfigurationError
from .expiry import ExpiryPolicy, FixedTtl, parse_ttl
from .handlers import key_of
from .payload import ReferentialPayload
from .policy import resolve_policy

if TYPE_CHECKING:
    from typing import Self

    from .engine import Failover

__all__ = ["AsyncFailoverFunction", "FailoverFunction", "failover"]

P = ParamSpec("P")
R = TypeVar("R")


class FailoverFunction(Protocol[P, R]):
    """A decorated synchronous function: callable as before, plus the failover's attributes."""

    definition: FailoverDefinition

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        """Call the upstream; on failure, recover the last stored result."""
        ...

    def referential(self, *args: P.args, **kwargs: P.kwargs) -> ReferentialPayload[R]:
        """The same call, returning the envelope (freshness included)."""
        ...

    def peek(self, *args: P.args, **kwargs: P.kwargs) -> ReferentialPayload[R] | None:
        """The stored, unexpired entry for these arguments; the upstream is not called."""
        ...

    def invalidate(self, *args: P.args, **kwargs: P.kwargs) -> None:
        """Delete the stored entry for these arguments."""
        ...

    @overload
    def __get__(self, instance: None, owner: type[Any]) -> Self: ...
    @overload
    def __get__(
        self, instance: object, owner: type[Any] | None = None
    ) -> FailoverFunction[..., R]: ...


class AsyncFailoverFunction(Protocol[P, R]):
    """A decorated ``async def`` function; ``peek`` and ``invalidate`` stay synchronous."""

    definition: FailoverDefinition

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> Coroutine[Any, Any, R]:
        """Await the upstream; on failure, recover the last stored result."""
        ...

    def referential(
        self, *args: P.args, **kwargs: P.kwargs
    ) -> Coroutine[Any, Any, ReferentialPayload[R]]:
        """The same call, returning the envelope (freshness included)."""
        ...

    def peek(self, *args: P.args, **kwargs: P.kwargs) -> ReferentialPayload[R] | None:
        """The stored, unexpired entry for these arguments; the upstream is not called."""
        ...

    def invalidate(self, *args: P.args, **kwargs: P.kwargs) -> None:
        """Delete the stored entry for these arguments."""
        ...

    @overload
    def __get__(self, instance: None, owner: type[Any]) -> Self: ...
    @overload
    def __get__(
        self, instance: object, owner: type[Any] | None = None
    ) -> AsyncFailoverFunction[..., R]: ...


class State:
    """What one decorated function shares between its shells and the engines it runs on."""

    __slots__ = ("__weakref__", "_bound", "binder", "definition", "engine", "fn")

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

    def runtime(self) -> Runtime | None:
        """The runtime on the engine in force, or ``None`` when that engine is disabled."""
        engine = self.engine or _engine._default or _engine.get_engine()
        bound = self._bound
        if bound is not None and bound[0] is engine:
            return bound[1]
        rt = engine.runtime(self) if engine.enabled else None
        self._bound = (engine, rt)
        return rt

    def passthrough(self, args: tuple[Any, ...], kwargs: dict[str, Any], result: Any) -> Any:
        """The envelope of a call made while the engine is disabled."""
        d = self.definition
        engine = self.engine or _engine._default or _engine.get_engine()
        own = self.binder.own(args)
        ctx = CallContext(d, self.binder, own, kwargs, self.binder.values(own, kwargs))
        return ReferentialPayload(d.effective_name, key_of(ctx), result, engine.clock(), None, True)

    def peek(self, *args: Any, **kwargs: Any) -> ReferentialPayload[Any] | None:
        """The stored, unexpired entry for the call."""
        rt = self.runtime()
        return None if rt is None else rt.handler.peek(rt.context(args, kwargs))

    def invalidate(self, *args: Any, **kwargs: Any) -> None:
        """Delete the stored entry for the call."""
        rt = self.runtime()
        if rt is not None:
            rt.handler.invalidate(rt.context(args, kwargs))


def _sync_shell(state: State, envelope: bool) -> Callable[..., Any]:
    """The synchronous wrapper: the call itself, or (``envelope``) its ``.referential``.

    Made once per flag, so the hot path has no extra frame to pass the flag through.
    """
    fn = state.fn

    def shell(*args: Any, **kwargs: Any) -> Any:
        bound = state._bound  # State.runtime's cache check, inlined: it runs on every call
        if bound is not None and bound[0] is (state.engine or _engine._default):
            rt = bound[1]
        else:
            rt = state.runtime()
        if rt is None:
            result = fn(*args, **kwargs)
            return state.passthrough(args, kwargs, result) if envelope else result
        ctx = rt.context(args, kwargs)
        try:
            result = rt.upstream(*args, **kwargs)
        except Exception as exc:
            out = rt.failed(ctx, exc)
            if out is None:
                raise
            return out if envelope else out.payload
        value = rt.succeeded(ctx, result)
        return rt.live_envelope(ctx, value) if envelope else value

    return shell


def _async_shell(state: State, envelope: bool) -> Callable[..., Any]:
    """The ``async def`` wrapper, as `_sync_shell`; store I/O never blocks the event loop."""
    fn = state.fn

    async def shell(*args: Any, **kwargs: Any) -> Any:
        bound = state._bound
        if bound is not None and bound[0] is (state.engine or _engine._default):
            rt = bound[1]
        else:
            rt = state.runtime()
        if rt is None:
            result = await fn(*args, **kwargs)
            return state.passthrough(args, kwargs, result) if envelope else result
        ctx = rt.context(args, kwargs)
        try:
            result = await rt.upstream(*args, **kwargs)
        except Exception as exc:
            if not rt.accepts(exc):
                raise
            if rt.blocking:
                found = await rt.on_worker(rt.recover, ctx, exc)
            else:
                found = rt.recover(ctx, exc)
            out = rt.resolve(ctx, exc, found)
            if out is None:
                raise
            return out if envelope else out.payload
        if rt.blocking_writes or (rt.new_tenants_block and rt.tenant_unmade()):
            value = await rt.on_worker(rt.succeeded, ctx, result)
        else:
            value = rt.succeeded(ctx, result)
        return rt.live_envelope(ctx, value) if envelope else value

    return shell


class _Bound(functools.partial[Any]):
    """A decorated method bound to its instance (or class): the failover attributes bind too."""

    definition: FailoverDefinition

    def __new__(cls, func: Callable[..., Any], target: object) -> Self:
        self = super().__new__(cls, func, target)
        self.definition = func.definition  # type: ignore[attr-defined]
        return self

    def referential(self, *args: Any, **kwargs: Any) -> Any:
        """The same call, returning the envelope."""
        return self.func.referential(*self.args, *args, **kwargs)  # type: ignore[attr-defined]

    def peek(self, *args: Any, **kwargs: Any) -> Any:
        """The stored, unexpired entry for these arguments."""
        return self.func.peek(*self.args, *args, **kwargs)  # type: ignore[attr-defined]

    def invalidate(self, *args: Any, **kwargs: Any) -> None:
        """Delete the stored entry for these arguments."""
        self.func.invalidate(*self.args, *args, **kwargs)  # type: ignore[attr-defined]


class _Method(Generic[P, R]):
    """Descriptor for a decorated method: class access gives the function, instance access a
    bound callable whose ``.referential``/``.peek``/``.invalidate`` pass the instance along."""

    def __init__(self, wrapper: Callable[..., Any], bind_class: bool) -> None:
        self.wrapper = wrapper
        self.bind_class = bind_class
        functools.update_wrapper(self, wrapper)

    def __get__(self, instance: object, owner: type[Any] | None = None) -> Any:
        if self.bind_class:
            return _Bound(self.wrapper, owner if owner is not None else type(instance))
        if instance is None:
            return self.wrapper
        return _Bound(self.wrapper, instance)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.wrapper(*args, **kwargs)


# -- validation --------------------------------------------------------------------------------


def _types(value: Any, owner: str, setting: str) -> tuple[type[BaseException], ...]:
    items = value if isinstance(value, tuple) else (value,)
    for item in items:
        if not (isinstance(item, type) and issubclass(item, BaseException)):
            raise ConfigurationError(
                f"failover {owner!r}: {setting}= must be exception types, got {item!r}"
            )
        if setting == "exceptions" and not issubclass(item, Exception):
            raise ConfigurationError(
                f"failover {owner!r}: exceptions= may only name Exception subclasses; "
                f"{item.__name__} is a BaseException that always propagates"
            )
    return items


def _callable_or_none(value: Any, owner: str, setting: str) -> Any:
    if value is not None and not callable(value):
        raise ConfigurationError(f"failover {owner!r}: {setting}= must be callable, got {value!r}")
    return value


def _not_yet(owner: str, setting: str) -> ConfigurationError:
    return ConfigurationError(
        f"failover {owner!r}: {setting}= is not available in this version of failover"
    )


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


def _build(
    fn: Any,
    name: str | None,
    engine: Failover | None,
    settings: dict[str, Any],
) -> Any:
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
    domain = settings["domain"]
    if domain is not None and (not isinstance(domain, str) or not domain):
        raise ConfigurationError(f"failover {name!r}: domain must be a non-empty string")
    signature = inspect.signature(fn)
    is_method = kind is classmethod or (kind is None and _is_method(fn, signature))
    ttl = parse_ttl(settings["ttl"], f"failover {name!r}")
    expiry = settings["expiry"]
    if expiry is None:
        expiry = FixedTtl(ttl)
    elif not isinstance(expiry, ExpiryPolicy):
        raise ConfigurationError(
            f"failover {name!r}: expiry= must have compute_expiry() and is_expired(), "
            f"got {expiry!r}"
        )
    exceptions = settings["exceptions"]
    if not isinstance(exceptions, type | tuple) and callable(exceptions):
        accept: Any = exceptions
    else:
        accept = _types(exceptions, name, "exceptions")
    policy = settings["policy"]
    for setting in ("breaker", "max_concurrency", "timeout"):
        if settings[setting] not in (None, False):
            raise _not_yet(name, setting)
    splitter = settings["splitter"]
    if settings["recover_all"] and splitter is None:
        raise ConfigurationError(f"failover {name!r}: recover_all=True needs a splitter=")
    acquire_timeout = settings["acquire_timeout"]
    if not isinstance(acquire_timeout, int | float) or acquire_timeout < 0:
        raise ConfigurationError(f"failover {name!r}: acquire_timeout= must be >= 0")
    unwrapped = inspect.unwrap(fn)
    definition = FailoverDefinition(
        name=name,
        domain=domain,
        effective_name=domain or name,
        ttl=ttl,
        expiry=expiry,
        key=_callable_or_none(settings["key"], name, "key"),
        exceptions=accept,
        exclude=_types(settings["exclude"], name, "exclude"),
        store_if=_callable_or_none(settings["store_if"], name, "store_if"),
        policy=None if policy is None else resolve_policy(policy, f"failover {name!r}"),
        on_recovered=_callable_or_none(settings["on_recovered"], name, "on_recovered"),
        splitter=splitter,
        recover_all=bool(settings["recover_all"]),
        breaker=None,
        max_concurrency=None,
        acquire_timeout=float(acquire_timeout),
        timeout=None,
        function=function,
        # The callable itself first: an `async def` wrapper around a sync function (asyncify)
        # is async, whatever it wraps; a plain wrapper around an `async def` returns its coroutine.
        is_async=_is_async(fn) or _is_async(unwrapped),
        is_method=is_method,
        return_annotation=signature.return_annotation,
    )
    state = State(definition, Binder(signature, is_method), fn, engine)
    shell = _async_shell if definition.is_async else _sync_shell
    wrapper = functools.update_wrapper(shell(state, False), fn)
    wrapper.referential = shell(state, True)  # type: ignore[attr-defined]
    wrapper.peek = state.peek  # type: ignore[attr-defined]
    wrapper.invalidate = state.invalidate  # type: ignore[attr-defined]
    wrapper.definition = definition  # type: ignore[attr-defined]
    wrapper._failover_state = state  # type: ignore[attr-defined]
    if engine is None:
        _engine.register_default(state)
    else:
        engine.register(state)
    if kind is staticmethod:
        return staticmethod(wrapper)
    if is_method:
        return _Method(wrapper, bind_class=kind is classmethod)
    return wrapper


class _Decorator:
    """The decorator made by ``failover(...)``: typed for sync and async functions."""

    def __init__(self, name: str | None, engine: Failover | None, settings: dict[str, Any]):
        self.name = name
        self.engine = engine
        self.settings = settings

    # An async function is also a Callable[P, R]; the first matching overload wins, as intended.
    @overload
    def __call__(  # type: ignore[overload-overlap]
        self, fn: Callable[P, Coroutine[Any, Any, R]]
    ) -> AsyncFailoverFunction[P, R]: ...
    @overload
    def __call__(self, fn: Callable[P, R]) -> FailoverFunction[P, R]: ...
    def __call__(self, fn: Callable[P, Any]) -> Any:
        return _build(fn, self.name, self.engine, self.settings)


@overload
def failover(  # type: ignore[overload-overlap]  # async first: see _Decorator.__call__
    name: Callable[P, Coroutine[Any, Any, R]], /
) -> AsyncFailoverFunction[P, R]: ...
@overload
def failover(name: Callable[P, R], /) -> FailoverFunction[P, R]: ...
@overload
def failover(
    name: str | None = None,
    *,
    ttl: timedelta | float | str = "1h",
    domain: str | None = None,
    key: Callable[..., object] | None = None,
    expiry: ExpiryPolicy | None = None,
    exceptions: type[Exception] | tuple[type[Exception], ...] | Callable[[Exception], bool] = (
        Exception,
    ),
    exclude: type[Exception] | tuple[type[Exception], ...] = (),
    store_if: Callable[[Any], bool] | None = None,
    policy: PolicyLike | None = None,
    on_recovered: Callable[[RecoverContext[Any], Any], object] | None = None,
    splitter: Any = None,
    recover_all: bool = False,
    breaker: Any = None,
    max_concurrency: int | None = None,
    acquire_timeout: float = 0.0,
    timeout: float | None = None,
    engine: Failover | None = None,
) -> _Decorator: ...
def failover(
    name: Any = None,
    *,
    ttl: timedelta | float | str = "1h",
    domain: str | None = None,
    key: Callable[..., object] | None = None,
    expiry: ExpiryPolicy | None = None,
    exceptions: Any = (Exception,),
    exclude: Any = (),
    store_if: Callable[[Any], bool] | None = None,
    policy: PolicyLike | None = None,
    on_recovered: Callable[[RecoverContext[Any], Any], object] | None = None,
    splitter: Any = None,
    recover_all: bool = False,
    breaker: Any = None,
    max_concurrency: int | None = None,
    acquire_timeout: float = 0.0,
    timeout: float | None = None,
    engine: Failover | None = None,
) -> Any:
    """Serve the last stored result, marked stale, when the decorated call fails.

    Args:
        name: the failover's name, stable across deploys (default ``module.qualname``).
        ttl: how long a stored result may be served: a timedelta, seconds, or ``"15m"``.
        domain: a namespace shared with other failovers (entries are stored under it).
        key: receives the call's arguments (without ``self``/``cls``) and returns the raw key.
        expiry: an `ExpiryPolicy` that overrides ``ttl``.
        exceptions: exception types, or a predicate on the exception, that trigger recovery.
        exclude: exception types never recovered, re-raised as they are.
        store_if: a live result failing this predicate is returned but not stored.
        policy: what happens when nothing is recovered; ``None``: the engine's policy.
        on_recovered: ``(ctx, value) -> value`` run on a recovered value.
        engine: the engine to use; default: the process-wide default engine, resolved per call.

    Raises:
        ConfigurationError: a setting that cannot work, naming the failover and the setting.
    """
    if engine is not None and not isinstance(engine, _engine.Failover):
        raise ConfigurationError(f"failover {name!r}: engine= must be a Failover, got {engine!r}")
    settings = {
        "ttl": ttl,
        "domain": domain,
        "key": key,
        "expiry": expiry,
        "exceptions": exceptions,
        "exclude": exclude,
        "store_if": store_if,
        "policy": policy,
        "on_recovered": on_recovered,
        "splitter": splitter,
        "recover_all": recover_all,
        "breaker": breaker,
        "max_concurrency": max_concurrency,
        "acquire_timeout": acquire_timeout,
        "timeout": timeout,
    }
    if callable(name) and not isinstance(name, str):
        return _build(name, None, engine, settings)
    return _Decorator(name, engine, settings)
