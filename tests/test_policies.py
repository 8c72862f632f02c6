"""Exception policies, filters and hooks: what the caller gets when recovery finds nothing."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any, Optional

import pytest

import failover
from failover import ExceptionPolicy, Failover, RecoverContext

from .conftest import FakeClock, Upstream


class HttpError(Exception):
    def __init__(self, status: int) -> None:
        super().__init__(f"HTTP {status}")
        self.status = status


class NotFound(Exception):
    pass


def test_rethrow_is_the_default_and_keeps_the_original(engine: Failover) -> None:
    error = ConnectionError("refused")

    @failover.failover("rethrow", engine=engine)
    def f() -> int:
        raise error

    with pytest.raises(ConnectionError) as info:
        f()
    assert info.value is error
    assert info.value.__notes__ == ["failover 'rethrow': nothing recovered (no stored entry)"]


def test_never_throw_returns_none_or_on_recovered(engine: Failover) -> None:
    seen: list[RecoverContext[Any]] = []

    def hook(ctx: RecoverContext[Any], value: Any) -> Any:
        seen.append(ctx)
        return value if value is not None else "fallback"

    @failover.failover("nt", policy="never_throw", on_recovered=hook, engine=engine)
    def f(code: str) -> str:
        raise ConnectionError(code)

    assert f("x") == "fallback"
    ctx = seen[0]
    assert ctx.recovered is None
    assert isinstance(ctx.cause, ConnectionError)
    assert ctx.arguments == {"code": "x"}
    assert ctx.definition.name == "nt"
    env = f.referential("x")
    assert (env.payload, env.up_to_date, env.as_of, env.expire_on) == (
        "fallback",
        False,
        None,
        None,
    )


def test_never_throw_without_hook(engine: Failover) -> None:
    @failover.failover("nt2", policy=ExceptionPolicy.NEVER_THROW, engine=engine)
    def f() -> list[int]:
        raise ConnectionError

    assert f() is None


@pytest.mark.parametrize(
    ("annotation", "expected"),
    [
        (list[int], []),
        (list, []),
        (dict[str, int], {}),
        (set[str], set()),
        (frozenset[str], frozenset()),
        (tuple[int, ...], ()),
        (str, ""),
        (bytes, b""),
        (int, 0),
        (float, 0.0),
        (bool, False),
        (int | None, None),
        (Optional[list[int]], None),  # noqa: UP045  # the spelling under test
        (Sequence[int], []),
        (Mapping[str, int], {}),
        (object, None),
        (Any, None),
    ],
)
def test_return_default_fits_the_annotation(
    engine: Failover, annotation: Any, expected: Any
) -> None:
    def f() -> None:
        raise ConnectionError

    f.__annotations__["return"] = annotation
    wrapped = failover.failover(f"rd-{annotation!r}", policy="return_default", engine=engine)(f)
    value = wrapped()
    assert value == expected
    assert type(value) is type(expected)


def test_return_default_values_are_fresh(engine: Failover) -> None:
    @failover.failover("fresh", policy="return_default", engine=engine)
    def f() -> list[int]:
        raise ConnectionError

    first = f()
    first.append(1)
    assert f() == []


async def test_return_default_uses_the_awaited_type(engine: Failover) -> None:
    @failover.failover("async-rd", policy="return_default", engine=engine)
    async def f() -> dict[str, int]:
        raise ConnectionError

    assert await f() == {}


def test_return_default_resolves_forward_references(engine: Failover) -> None:
    @failover.failover("fwd", policy="return_default", engine=engine)
    def f() -> LaterDefined:
        raise ConnectionError

    assert f() == []


LaterDefined = list[int]


def test_callable_policy_value_or_exception(engine: Failover) -> None:
    class Degraded(Exception):
        pass

    def policy(ctx: RecoverContext[Any]) -> Any:
        if ctx.arguments["code"] == "raise":
            raise Degraded("no data") from ctx.cause
        return {"code": ctx.arguments["code"], "unknown": True}

    @failover.failover("callable", policy=policy, engine=engine)
    def f(code: str) -> dict[str, Any]:
        raise ConnectionError

    assert f("x") == {"code": "x", "unknown": True}
    with pytest.raises(Degraded) as info:
        f("raise")
    assert isinstance(info.value.__cause__, ConnectionError)


def test_engine_policy_applies_when_the_failover_sets_none(clock: FakeClock) -> None:
    eng = Failover(policy="never_throw", clock=clock, metrics=False)

    @failover.failover("inherit", engine=eng)
    def f() -> int:
        raise ConnectionError

    @failover.failover("own", engine=eng, policy="rethrow")
    def g() -> int:
        raise ConnectionError

    assert f() is None
    with pytest.raises(ConnectionError):
        g()


def test_on_recovered_runs_on_a_hit(engine: Failover, upstream: Upstream) -> None:
    @failover.failover(
        "hook-hit",
        engine=engine,
        on_recovered=lambda ctx, value: {**value, "stale_since": ctx.recovered.as_of},
    )
    def f(x: str) -> dict[str, Any]:
        return upstream({"x": x})  # type: ignore[return-value]

    f("a")
    upstream.fail()
    assert f("a")["stale_since"] == engine.clock()


def test_exceptions_predicate_on_the_instance(engine: Failover, upstream: Upstream) -> None:
    @failover.failover(
        "predicate",
        engine=engine,
        exceptions=lambda e: isinstance(e, HttpError) and e.status >= 500,
    )
    def f(x: str) -> object:
        return upstream(x)

    f("a")
    upstream.fail(HttpError(503))
    assert f("a") == "a"
    upstream.fail(HttpError(404))
    with pytest.raises(HttpError) as info:
        f("a")
    assert not getattr(info.value, "__notes__", None)  # not recovered at all: no note


def test_exceptions_types_and_exclude(engine: Failover, upstream: Upstream) -> None:
    @failover.failover(
        "types", engine=engine, exceptions=(ConnectionError, HttpError), exclude=NotFound
    )
    def f(x: str) -> object:
        return upstream(x)

    f("a")
    upstream.fail(HttpError(500))
    assert f("a") == "a"
    upstream.fail(ValueError("bug"))
    with pytest.raises(ValueError, match="bug"):
        f("a")
    upstream.fail(NotFound())
    with pytest.raises(NotFound):
        f("a")


def test_exclude_wins_over_exceptions(engine: Failover, upstream: Upstream) -> None:
    class Gone(ConnectionError):
        pass

    @failover.failover("excl", engine=engine, exclude=(Gone,))
    def f(x: str) -> object:
        return upstream(x)

    f("a")
    upstream.fail(Gone())
    with pytest.raises(Gone):
        f("a")


@pytest.mark.parametrize("exc_type", [KeyboardInterrupt, SystemExit, GeneratorExit])
def test_base_exceptions_always_propagate(
    engine: Failover, upstream: Upstream, exc_type: type[BaseException]
) -> None:
    @failover.failover(f"base-{exc_type.__name__}", engine=engine, policy="never_throw")
    def f(x: str) -> object:
        return upstream(x)

    f("a")
    upstream.error = exc_type()  # type: ignore[assignment]
    with pytest.raises(exc_type):
        f("a")


async def test_cancellation_propagates(engine: Failover) -> None:
    started = asyncio.Event()

    @failover.failover("cancel", engine=engine, policy="never_throw")
    async def f() -> int:
        started.set()
        await asyncio.Event().wait()
        return 1

    task = asyncio.create_task(f())
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


def test_rethrow_note_is_added_once_per_failover(engine: Failover, clock: FakeClock) -> None:
    error = ConnectionError("refused")  # one object, raised again and again (a cached failure)

    @failover.failover("inner", engine=engine)
    def inner() -> int:
        raise error

    @failover.failover("outer", engine=engine)
    def outer() -> int:
        return inner()

    for _ in range(3):
        with pytest.raises(ConnectionError):
            outer()
    assert error.__notes__ == [
        "failover 'inner': nothing recovered (no stored entry)",
        "failover 'outer': nothing recovered (no stored entry)",
    ]
