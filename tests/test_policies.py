"""Exception policies, filters and hooks: what the caller gets when recovery finds nothing."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Mapping, Sequence
from typing import Any, Optional

import pybreaker
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


async def test_on_recovered_sees_the_entry_found_as_recovered_with_its_cause(
    engine: Failover,
) -> None:
    """The hook's ``ctx.recovered`` is what the caller gets: stale, carrying the cause (as a
    scatter/gather call's merged slices always did), sync and async alike."""
    seen: list[RecoverContext[Any]] = []
    down: list[Exception] = []

    def hook(ctx: RecoverContext[Any], value: object) -> object:
        seen.append(ctx)
        return value

    def upstream(x: str) -> str:
        if down:
            raise down[0]
        return x

    @failover.failover("hook-cause", engine=engine, on_recovered=hook)
    def f(x: str) -> str:
        return upstream(x)

    @failover.failover("hook-cause-async", engine=engine, on_recovered=hook)
    async def g(x: str) -> str:
        return upstream(x)

    f("a")
    await g("a")
    down.append(ConnectionError("refused"))
    env = f.referential("a")
    aenv = await g.referential("a")
    assert [ctx.recovered for ctx in seen] == [env, aenv]
    for ctx in seen:
        assert ctx.recovered is not None
        assert ctx.recovered.up_to_date is False
        assert ctx.recovered.cause is down[0] is ctx.cause
        assert ctx.recovered.as_of == engine.clock()


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


# -- on_recovered that raises (issue 10, item 5) ---------------------------------------------------


def test_a_raising_on_recovered_hook_keeps_the_recovered_value(
    engine: Failover, upstream: Upstream, caplog: pytest.LogCaptureFixture
) -> None:
    def hook(ctx: RecoverContext[Any], value: Any) -> Any:
        raise KeyError("bug in the hook")

    @failover.failover("hook-raises", engine=engine, on_recovered=hook)
    def f(x: str) -> dict[str, Any]:
        return upstream({"x": x})  # type: ignore[return-value]

    assert f("a") == {"x": "a"}
    upstream.fail()
    with caplog.at_level(logging.WARNING, "failover"):
        assert f("a") == {"x": "a"}
    [record] = [r for r in caplog.records if "on_recovered" in r.getMessage()]
    assert "'hook-raises'" in record.getMessage()
    assert record.exc_info is not None
    assert isinstance(record.exc_info[1], KeyError)
    env = f.referential("a")
    assert (env.payload, env.up_to_date, env.as_of) == ({"x": "a"}, False, engine.clock())
    assert isinstance(env.cause, ConnectionError)


async def test_a_raising_on_recovered_hook_under_never_throw_gives_none(
    engine: Failover, caplog: pytest.LogCaptureFixture
) -> None:
    def hook(ctx: RecoverContext[Any], value: Any) -> Any:
        raise RuntimeError("bug in the hook")

    @failover.failover("hook-nt", engine=engine, policy="never_throw", on_recovered=hook)
    async def f() -> int:
        raise ConnectionError("down")

    with caplog.at_level(logging.WARNING, "failover"):
        assert await f() is None
    assert any("'hook-nt'" in r.getMessage() for r in caplog.records)


def test_a_hook_raising_a_base_exception_still_propagates(
    engine: Failover, upstream: Upstream
) -> None:
    def hook(ctx: RecoverContext[Any], value: Any) -> Any:
        raise KeyboardInterrupt

    @failover.failover("hook-base", engine=engine, on_recovered=hook)
    def f(x: str) -> object:
        return upstream(x)

    f("a")
    upstream.fail()
    with pytest.raises(KeyboardInterrupt):
        f("a")


# -- the envelope's cause (issue 10, item 6) -------------------------------------------------------


def test_a_recovered_envelope_carries_its_cause(engine: Failover, upstream: Upstream) -> None:
    @failover.failover("cause", engine=engine)
    def f(x: str) -> object:
        return upstream(x)

    live = f.referential("a")
    assert live.cause is None
    error = ConnectionError("refused")
    upstream.fail(error)
    stale = f.referential("a")
    assert stale.cause is error
    assert not stale.up_to_date
    # The cause is not part of the value's identity.
    assert stale == dataclasses.replace(live, up_to_date=False)
    # Never stored: the entry in the store, and what peek shows, have none.
    peeked = f.peek("a")
    assert peeked is not None
    assert peeked.cause is None
    [stored] = engine.raw_store.find_all("cause")
    assert stored.cause is None


@pytest.mark.parametrize(
    ("policy", "payload"),
    [("never_throw", None), ("return_default", []), (lambda ctx: ["made"], ["made"])],
)
async def test_a_policy_made_envelope_carries_its_cause(
    engine: Failover, policy: Any, payload: object
) -> None:
    error = TimeoutError("slow")

    @failover.failover("made-cause", engine=engine, policy=policy)
    async def f(x: str) -> list[str]:
        raise error

    env = await f.referential("a")
    assert (env.payload, env.as_of, env.up_to_date, env.cause) == (payload, None, False, error)


def test_the_envelope_repr_hides_payload_and_key(engine: Failover, upstream: Upstream) -> None:
    @failover.failover("private", engine=engine)
    def f(email: str) -> object:
        return upstream({"email": email, "iban": "FR7630006000011234567890189"})

    f("jane@example.com")
    upstream.fail()
    env = f.referential("jane@example.com")
    text = repr(env)
    assert text == (
        "ReferentialPayload(name='private', as_of=2026-01-01T00:00:00+00:00, "
        "up_to_date=False, cause=ConnectionError)"
    )
    assert env.key not in text
    assert str(env) == text
    made = failover.ReferentialPayload("n", "secret-key", "secret", None, None, True)
    assert repr(made) == "ReferentialPayload(name='n', as_of=None, up_to_date=True, cause=None)"


def test_the_cause_of_a_refused_call_is_the_refusal(clock: FakeClock, upstream: Upstream) -> None:
    engine = Failover(clock=clock, metrics=False, breaker_defaults={"fail_max": 1})

    @failover.failover("breaker-cause", breaker=True, engine=engine)
    def f(x: str) -> object:
        return upstream(x)

    f("a")
    error = ConnectionError("down")
    upstream.fail(error)
    assert f.referential("a").cause is error  # the call that trips the breaker: the upstream's
    refused = f.referential("a")  # the breaker is open: the upstream is not called
    assert isinstance(refused.cause, pybreaker.CircuitBreakerError)
    assert refused.payload == "a"
    engine.close()


def test_exceptions_given_a_string_says_a_predicate_is_accepted(engine: Failover) -> None:
    with pytest.raises(failover.ConfigurationError) as raised:

        @failover.failover("words", exceptions="transient", engine=engine)  # type: ignore[arg-type]
        def fetch() -> int:
            return 1

    message = str(raised.value)
    assert "'words'" in message
    assert "exceptions=" in message
    assert "predicate" in message
    assert "failover.http.transient" in message
