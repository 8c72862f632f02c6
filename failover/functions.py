"""What a decorated function is to its callers: the typed Protocols of sync and async
failovers, and the descriptor that binds a decorated method to its instance."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, Protocol, TypeVar, overload

from .definition import FailoverDefinition
from .payload import ReferentialPayload

if TYPE_CHECKING:
    from typing import Self

__all__ = ["AsyncFailoverFunction", "Bound", "FailoverFunction", "Method"]

P = ParamSpec("P")
R = TypeVar("R")


class _EntryMethods(Protocol[P, R]):
    """What sync and async failovers alike offer over their stored entries (synchronous for
    both): the definition, ``peek``, ``invalidate``, ``expire`` and ``invalidate_all``."""

    definition: FailoverDefinition

    def peek(self, *args: P.args, **kwargs: P.kwargs) -> ReferentialPayload[R] | None:
        """The stored, unexpired entry for these arguments; the upstream is not called.

        Raises:
            StoreError: the store failed (a call would recover as from a miss).
            SerializationError: the entry cannot be read back.
        """
        ...

    def invalidate(self, *args: P.args, **kwargs: P.kwargs) -> None:
        """Delete the stored entry for these arguments."""
        ...

    def expire(self, *args: P.args, **kwargs: P.kwargs) -> bool:
        """End the fresh window of the stored entry for these arguments, keeping it for failing
        over: the next call goes to the upstream (no ``fresh_for`` answer, no refresh ahead),
        and if the upstream fails the entry is still served stale, with its own ``as_of``.
        For scatter/gather, every slice the call would recover. Whether there was an entry.

        Raises:
            StoreError: the store failed.
        """
        ...

    def invalidate_all(self) -> int:
        """Delete every stored entry of the failover (of its effective name: the domain's, when
        one is set), in one store operation; how many were removed.

        Raises:
            StoreError: the store failed.
        """
        ...


class FailoverFunction(_EntryMethods[P, R], Protocol[P, R]):
    """A decorated synchronous function: callable as before, plus the failover's attributes."""

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        """Call the upstream; on failure, recover the last stored result."""
        ...

    def referential(self, *args: P.args, **kwargs: P.kwargs) -> ReferentialPayload[R]:
        """The same call, returning the envelope (freshness included)."""
        ...

    def refresh(self, *args: P.args, **kwargs: P.kwargs) -> R:
        """Call the upstream now and store its answer, whatever ``fresh_for`` or
        ``throttle`` say (a failure is still recovered)."""
        ...

    @overload
    def __get__(self, instance: None, owner: type[Any]) -> Self: ...
    @overload
    def __get__(
        self, instance: object, owner: type[Any] | None = None
    ) -> FailoverFunction[..., R]: ...


class AsyncFailoverFunction(_EntryMethods[P, R], Protocol[P, R]):
    """A decorated ``async def`` function; ``peek``, ``invalidate``, ``expire`` and
    ``invalidate_all`` stay synchronous, ``refresh`` is awaited."""

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> Coroutine[Any, Any, R]:
        """Await the upstream; on failure, recover the last stored result."""
        ...

    def referential(
        self, *args: P.args, **kwargs: P.kwargs
    ) -> Coroutine[Any, Any, ReferentialPayload[R]]:
        """The same call, returning the envelope (freshness included)."""
        ...

    def refresh(self, *args: P.args, **kwargs: P.kwargs) -> Coroutine[Any, Any, R]:
        """Await the upstream now and store its answer, whatever ``fresh_for`` or
        ``throttle`` say (a failure is still recovered)."""
        ...

    @overload
    def __get__(self, instance: None, owner: type[Any]) -> Self: ...
    @overload
    def __get__(
        self, instance: object, owner: type[Any] | None = None
    ) -> AsyncFailoverFunction[..., R]: ...


_FORWARDED = frozenset({"__name__", "__qualname__", "__wrapped__"})


class Bound(functools.partial[Any]):
    """A decorated method bound to its instance (or class): the failover attributes bind too."""

    definition: FailoverDefinition

    # ``func`` is a decorated function: a function object carrying the failover's attributes,
    # which its type cannot name (hence ``Any``).

    def __new__(cls, func: Any, target: object) -> Self:
        self = super().__new__(cls, func, target)
        self.definition = func.definition
        # What a bound method shows of its function (the class has its own of these two).
        self.__doc__ = func.__doc__
        self.__module__ = func.__module__
        return self

    def __getattr__(self, name: str) -> Any:
        # As a bound method: the function's name, qualified name and ``__wrapped__``
        # (`functools.update_wrapper`'s), which a partial has none of. Only reached on a miss.
        if name in _FORWARDED:
            return getattr(self.func, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @property
    def __signature__(self) -> inspect.Signature:
        # Read before ``__wrapped__``: the signature of the bound call, without self or cls.
        return inspect.signature(functools.partial(self.func, *self.args))

    def referential(self, *args: Any, **kwargs: Any) -> Any:
        """The same call, returning the envelope."""
        func: Any = self.func
        return func.referential(*self.args, *args, **kwargs)

    def peek(self, *args: Any, **kwargs: Any) -> Any:
        """The stored, unexpired entry for these arguments."""
        func: Any = self.func
        return func.peek(*self.args, *args, **kwargs)

    def invalidate(self, *args: Any, **kwargs: Any) -> None:
        """Delete the stored entry for these arguments."""
        func: Any = self.func
        func.invalidate(*self.args, *args, **kwargs)

    def refresh(self, *args: Any, **kwargs: Any) -> Any:
        """Call the upstream now and store its answer."""
        func: Any = self.func
        return func.refresh(*self.args, *args, **kwargs)

    def expire(self, *args: Any, **kwargs: Any) -> bool:
        """End the fresh window of the stored entry for these arguments."""
        func: Any = self.func
        return bool(func.expire(*self.args, *args, **kwargs))

    def invalidate_all(self) -> int:
        """Delete every stored entry of the failover."""
        func: Any = self.func
        return int(func.invalidate_all())


class Method(Generic[P, R]):
    """Descriptor for a decorated method: class access gives the function, instance access a
    bound callable whose ``.referential``/``.peek``/``.invalidate``/``.refresh`` pass the
    instance along."""

    def __init__(self, wrapper: Callable[..., Any], bind_class: bool) -> None:
        self.wrapper = wrapper
        self.bind_class = bind_class
        functools.update_wrapper(self, wrapper)

    def __get__(self, instance: object, owner: type[Any] | None = None) -> Any:
        if self.bind_class:
            return Bound(self.wrapper, owner if owner is not None else type(instance))
        if instance is None:
            return self.wrapper
        return Bound(self.wrapper, instance)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.wrapper(*args, **kwargs)
