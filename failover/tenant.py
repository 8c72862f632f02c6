"""The current tenant: a `contextvars` variable, so it follows asyncio tasks and threads that copy
the context (``asyncio.to_thread``, and every worker thread the library starts).

It is the engine's default tenant resolver when multi-tenancy is enabled::

    with failover.tenant("acme"):
        find_country("FR")  # stored and recovered in acme's store
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Coroutine
from contextvars import ContextVar, Token
from typing import Any, ParamSpec, TypeVar, overload

from .errors import ConfigurationError

__all__ = ["current_tenant", "tenant"]

P = ParamSpec("P")
R = TypeVar("R")

_current: ContextVar[str | None] = ContextVar("failover_tenant", default=None)
read_tenant = _current.get
"""`current_tenant` without a Python frame: the check every call makes (`failover.call`)."""
# The tenant resolved on the calling thread before work moved to a worker thread: the router
# uses it instead of calling its resolver again there (a custom resolver may read state that
# only the calling thread has).
pinned: ContextVar[str | None] = ContextVar("failover_pinned_tenant", default=None)
# The tokens of the `tenant` blocks open in this context, innermost last. The context keeps them,
# not the instance: one instance shared by threads or tasks must give each its own tenant back.
_open: ContextVar[tuple[Token[str | None], ...]] = ContextVar("failover_tenant_blocks", default=())


def current_tenant() -> str | None:
    """The tenant set by the innermost enclosing `tenant` block, or ``None``."""
    return _current.get()


def refuse_unrouted(unrouted: str | None, name: str) -> None:
    """Raise the error of a call of failover ``name`` made inside ``failover.tenant(...)`` on
    an engine that does not route by tenant (``unrouted``: what the engine says of its store)."""
    raise ConfigurationError(
        f"{unrouted}, but failover {name!r} was called inside "
        f"failover.tenant({current_tenant()!r}): every tenant would read and write the "
        "same entries. Enable routing on the engine (Failover(store=..., "
        "tenant_resolver=...) with a store URL containing {tenant} or a factory "
        "tenant -> store), or pass ignore_tenant=True to the engine to share one store "
        "on purpose."
    )


class tenant:  # lower case: used like a function, `with failover.tenant("acme"):`
    """Set the current tenant for a block, or for every call of a decorated function.

    As a context manager, the previous tenant comes back when the block ends (blocks nest). As a
    decorator, each call (awaited, for ``async def`` functions) runs with the tenant set::

        with failover.tenant("acme"):
            ...

        @failover.tenant("acme")
        async def nightly_report() -> None: ...

    Args:
        name: the tenant id, or ``None`` for no tenant (the store's ``default_tenant`` then).

    Raises:
        ConfigurationError: ``name`` is neither a string nor ``None``.
    """

    __slots__ = ("name",)

    def __init__(self, name: str | None) -> None:
        if name is not None and not isinstance(name, str):
            raise ConfigurationError(f"tenant: the name must be a string or None, got {name!r}")
        self.name = name

    def __repr__(self) -> str:
        return f"tenant({self.name!r})"

    def __enter__(self) -> str | None:
        _open.set((*_open.get(), _current.set(self.name)))
        return self.name

    def __exit__(self, *exc: object) -> None:
        # Blocks nest within a context: the innermost one open here is the one ending.
        *outer, token = _open.get()
        _open.set(tuple(outer))
        _current.reset(token)

    @overload
    def __call__(
        self, fn: Callable[P, Coroutine[Any, Any, R]]
    ) -> Callable[P, Coroutine[Any, Any, R]]: ...
    @overload
    def __call__(self, fn: Callable[P, R]) -> Callable[P, R]: ...
    def __call__(self, fn: Callable[P, Any]) -> Callable[P, Any]:
        name = self.name
        # Each call gets its own token (not the instance's stack): concurrent calls never mix.
        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def run_async(*args: P.args, **kwargs: P.kwargs) -> Any:
                token = _current.set(name)
                try:
                    return await fn(*args, **kwargs)
                finally:
                    _current.reset(token)

            return run_async

        @functools.wraps(fn)
        def run(*args: P.args, **kwargs: P.kwargs) -> Any:
            token = _current.set(name)
            try:
                return fn(*args, **kwargs)
            finally:
                _current.reset(token)

        return run
