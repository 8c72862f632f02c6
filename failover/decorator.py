"""The ``@failover`` decorator: validates settings once, then wraps the function in its two thin
shells (sync and async, `failover.shells`) around the shared `Runtime` decisions."""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Callable, Coroutine
from typing import Any, ParamSpec, TypeVar, Unpack, overload

from . import conditional, switches
from .core import Binder
from .engine import Failover
from .engine import default as default_engine
from .errors import ConfigurationError
from .functions import AsyncFailoverFunction, FailoverFunction, Method
from .settings import Options, check_names, described, parameters, resolve
from .shells import State, async_shell, sync_shell

__all__ = ["AsyncFailoverFunction", "FailoverFunction", "failover"]

log = logging.getLogger("failover")
P = ParamSpec("P")
R = TypeVar("R")


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
    shell = async_shell if definition.is_async else sync_shell
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
