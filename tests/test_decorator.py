"""The decorator on every kind of callable, and the success / recover paths through it."""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
from dataclasses import dataclass
from typing import Any

import pytest

import failover
from failover import ConfigurationError, Failover, ReferentialPayload

from .conftest import BrokenStore, FakeClock, Upstream


def test_success_stores_and_failure_recovers_stale(
    engine: Failover, clock: FakeClock, upstream: Upstream
) -> None:
    @failover.failover("country", ttl="24h", engine=engine)
    def find_country(code: str) -> dict[str, str]:
        return upstream({"code": code, "name": "France"})  # type: ignore[return-value]

    assert find_country("FR") == {"code": "FR", "name": "France"}
    stored_at = clock()
    clock.advance(minutes=5)
    upstream.fail()
    env = find_country.referential("FR")
    assert env.payload == {"code": "FR", "name": "France"}
    assert env.up_to_date is False
    assert env.as_of == stored_at
    assert env.expire_on == stored_at + engine.definitions()[0].ttl
    assert find_country("FR") == {"code": "FR", "name": "France"}


def test_live_envelope(engine: Failover, clock: FakeClock) -> None:
    @failover.failover("live", ttl=60, engine=engine)
    def f(x: int) -> list[int]:
        return [x]

    env = f.referential(3)
    assert isinstance(env, ReferentialPayload)
    assert (env.payload, env.up_to_date, env.as_of, env.name) == ([3], True, clock(), "live")
    assert env.expire_on == clock.advance(60)


def test_expired_entry_is_never_served_and_is_deleted(
    engine: Failover, clock: FakeClock, upstream: Upstream
) -> None:
    @failover.failover("exp", ttl="10s", engine=engine)
    def f(x: str) -> object:
        return upstream(x)

    f("a")
    clock.advance(10)
    upstream.fail()
    with pytest.raises(ConnectionError) as info:
        f("a")
    assert "expired" in info.value.__notes__[0]
    assert engine.raw_store.find_all("exp") == []  # the expired entry was deleted


def test_peek_and_invalidate(engine: Failover, clock: FakeClock, upstream: Upstream) -> None:
    @failover.failover("pi", ttl=60, engine=engine)
    def f(x: str) -> object:
        return upstream(x)

    assert f.peek("a") is None
    f("a")
    calls = upstream.calls
    peeked = f.peek("a")
    assert peeked is not None
    assert (peeked.payload, peeked.up_to_date) == ("a", False)
    assert upstream.calls == calls  # peek never calls the upstream
    f.invalidate("a")
    assert f.peek("a") is None
    f("b")
    clock.advance(61)
    assert f.peek("b") is None  # expired entries are not shown


def test_metadata_preserved() -> None:
    def plain(code: str, limit: int = 3) -> list[str]:
        """Docs."""
        return [code] * limit

    async def coro(code: str) -> int:
        return 1

    wrapped = failover.failover("m1")(plain)
    awrapped = failover.failover("m2")(coro)
    assert inspect.signature(wrapped) == inspect.signature(plain)
    assert wrapped.__wrapped__ is plain  # type: ignore[attr-defined]
    assert wrapped.__doc__ == "Docs."
    assert wrapped.__name__ == "plain"
    assert wrapped.__annotations__ == plain.__annotations__
    assert not inspect.iscoroutinefunction(wrapped)
    assert inspect.iscoroutinefunction(awrapped)
    assert inspect.signature(awrapped) == inspect.signature(coro)


def test_bare_decorator_uses_qualified_name() -> None:
    @failover.failover
    def bare(x: int) -> int:
        return x

    assert bare(2) == 2
    assert (
        bare.definition.name == f"{__name__}.test_bare_decorator_uses_qualified_name.<locals>.bare"
    )


async def test_async_function(engine: Failover, clock: FakeClock, upstream: Upstream) -> None:
    @failover.failover("rates", ttl="15m", engine=engine)
    async def fetch_rates(base: str) -> list[float]:
        await asyncio.sleep(0)
        return upstream([1.0, 2.0])  # type: ignore[return-value]

    assert await fetch_rates("EUR") == [1.0, 2.0]
    upstream.fail()
    clock.advance(60)
    env = await fetch_rates.referential("EUR")
    assert (env.payload, env.up_to_date, env.as_of) == ([1.0, 2.0], False, clock.now - _s(60))
    assert fetch_rates.peek("EUR") is not None  # synchronous for async functions too
    fetch_rates.invalidate("EUR")
    with pytest.raises(ConnectionError):
        await fetch_rates("EUR")


def _s(seconds: float) -> Any:
    from datetime import timedelta

    return timedelta(seconds=seconds)


class Service:
    def __init__(self, upstream: Upstream) -> None:
        self.upstream = upstream

    @failover.failover("svc.method", ttl=60)
    def method(self, code: str) -> object:
        return self.upstream(("m", code))

    @failover.failover("svc.amethod", ttl=60)
    async def amethod(self, code: str) -> object:
        return self.upstream(("a", code))

    @failover.failover("svc.static", ttl=60)
    @staticmethod
    def static(code: str) -> object:
        return ("s", code)

    @failover.failover("svc.klass", ttl=60)
    @classmethod
    def klass(cls, code: str) -> object:
        return (cls.__name__, code)

    @classmethod
    @failover.failover("svc.klass2", ttl=60)
    def klass2(cls, code: str) -> object:
        return (cls.__name__, code)


async def test_methods_leave_the_instance_out_of_the_key(upstream: Upstream) -> None:
    a, b = Service(upstream), Service(upstream)
    assert a.method("FR") == ("m", "FR")
    assert await a.amethod("FR") == ("a", "FR")
    upstream.fail()
    # another instance recovers what the first stored: the instance is not part of the key
    assert b.method("FR") == ("m", "FR")
    assert await b.amethod("FR") == ("a", "FR")
    env = b.method.referential("FR")
    assert env.up_to_date is False
    peeked = b.method.peek("FR")
    assert peeked is not None
    assert peeked.payload == ("m", "FR")
    assert (await b.amethod.referential("FR")).payload == ("a", "FR")
    b.method.invalidate("FR")
    assert a.method.peek("FR") is None
    assert inspect.iscoroutinefunction(a.amethod)
    assert inspect.iscoroutinefunction(Service.amethod)
    assert list(inspect.signature(a.method).parameters) == ["code"]
    assert a.method.definition.is_method


def test_static_and_class_methods() -> None:
    assert Service.static("x") == ("s", "x")
    assert Service(Upstream()).static("x") == ("s", "x")
    assert Service.static.referential("x").payload == ("s", "x")
    assert Service.klass("x") == ("Service", "x")
    assert Service.klass.referential("x").payload == ("Service", "x")
    assert Service.klass.definition.is_method
    assert Service.klass2("y") == ("Service", "y")
    assert Service.static.definition.is_method is False


def test_partial_and_callable_objects() -> None:
    def add(a: int, b: int) -> int:
        return a + b

    class AsyncCallable:
        async def __call__(self, x: int) -> int:
            return x

    part = failover.failover("partial")(functools.partial(add, 1))
    assert part(2) == 3
    obj = failover.failover("acallable")(AsyncCallable())
    assert obj.definition.is_async
    assert asyncio.run(obj(5)) == 5


def test_configure_after_decoration_takes_effect(clock: FakeClock, upstream: Upstream) -> None:
    @failover.failover("late", ttl=60)
    def f(x: str) -> object:
        return upstream(x)

    first = failover.get_engine()
    f("a")
    second = failover.configure(clock=clock, metrics=False)
    assert second is failover.get_engine()
    assert second is not first
    assert [d.name for d in second.definitions()] == ["late"]
    upstream.fail()
    with pytest.raises(ConnectionError):  # the new engine's store is empty
        f("a")
    upstream.recover()
    f("a")
    upstream.fail()
    assert f.referential("a").as_of == clock()


def test_disabled_engine_is_a_pass_through(clock: FakeClock, upstream: Upstream) -> None:
    eng = Failover(enabled=False, clock=clock, metrics=False)

    @failover.failover("off", engine=eng)
    def f(x: str) -> object:
        return upstream(x)

    assert f("a") == "a"
    env = f.referential("a")
    assert (env.payload, env.up_to_date, env.as_of) == ("a", True, clock())
    upstream.fail()
    with pytest.raises(ConnectionError) as info:
        f("a")
    assert not getattr(info.value, "__notes__", None)
    assert f.peek("a") is None


def test_redecorating_a_name_replaces_it_with_a_warning(engine: Failover) -> None:
    @failover.failover("dup", engine=engine)
    def one() -> int:
        return 1

    with pytest.warns(UserWarning, match="'dup'.*replaces"):

        @failover.failover("dup", engine=engine)
        def two() -> int:
            return 2

    assert [d.function.rsplit(".", 1)[1] for d in engine.definitions()] == ["two"]


def test_domain_shares_entries(engine: Failover, upstream: Upstream) -> None:
    @failover.failover("by-code", domain="countries", engine=engine)
    def by_code(code: str) -> object:
        return upstream({"code": code})

    @failover.failover("by-code-v2", domain="countries", engine=engine)
    def by_code_v2(code: str) -> object:
        return upstream({"code": code, "v": 2})

    by_code("FR")
    upstream.fail()
    assert by_code_v2("FR") == {"code": "FR"}
    assert by_code_v2.definition.effective_name == "countries"


def test_domain_with_different_ttls_warns(engine: Failover) -> None:
    @failover.failover("d1", domain="shared", ttl="1h", engine=engine)
    def one() -> int:
        return 1

    with pytest.warns(UserWarning, match="different ttl"):

        @failover.failover("d2", domain="shared", ttl="2h", engine=engine)
        def two() -> int:
            return 2


@dataclass
class Box:
    value: int


def test_copying_isolates_both_ways(engine: Failover, upstream: Upstream) -> None:
    @failover.failover("iso", engine=engine)
    def f(x: str) -> Any:
        return upstream({"items": [1, 2], "box": Box(1)})

    live = f("a")
    live["items"].append(3)  # the caller mutates its live result
    live["box"].value = 99
    upstream.fail()
    recovered = f("a")
    assert recovered == {"items": [1, 2], "box": Box(1)}
    recovered["items"].clear()  # ... or a recovered one
    assert f("a") == {"items": [1, 2], "box": Box(1)}


def test_store_if_filters_what_is_stored(engine: Failover, upstream: Upstream) -> None:
    @failover.failover("store-if", engine=engine, store_if=bool)
    def f(x: Any) -> Any:
        return upstream(x)

    assert f([]) == []  # returned, not stored
    upstream.fail()
    with pytest.raises(ConnectionError):
        f([])


def test_store_failure_never_breaks_the_call(
    clock: FakeClock, upstream: Upstream, caplog: pytest.LogCaptureFixture
) -> None:
    eng = Failover(BrokenStore(), clock=clock, metrics=False)

    @failover.failover("broken", engine=eng, policy="never_throw")
    def f(x: str) -> object:
        return upstream(x)

    assert f("a") == "a"  # the live result still returns
    assert "storing the live result failed" in caplog.text
    upstream.fail()
    assert f("a") is None  # a failing recover behaves like a miss
    assert "recovering failed" in caplog.text


def test_recover_error_note_under_rethrow(clock: FakeClock, upstream: Upstream) -> None:
    eng = Failover(BrokenStore(), clock=clock, metrics=False)

    @failover.failover("broken2", engine=eng)
    def f(x: str) -> object:
        return upstream(x)

    upstream.fail()
    with pytest.raises(ConnectionError) as info:
        f("a")
    assert "store failed" in info.value.__notes__[0]


def test_bad_call_raises_type_error_without_calling_upstream(
    engine: Failover, upstream: Upstream
) -> None:
    @failover.failover("sig", engine=engine)
    def f(x: str) -> object:
        return upstream(x)

    with pytest.raises(TypeError):
        f("a", "b")  # type: ignore[call-arg]
    assert upstream.calls == 0


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"ttl": 0}, "ttl must be positive"),
        ({"ttl": -5}, "ttl must be positive"),
        ({"ttl": "soon"}, "not a duration"),
        ({"ttl": "0s"}, "ttl must be positive"),
        ({"policy": "sometimes"}, "policy 'sometimes' is unknown"),
        ({"exceptions": (KeyboardInterrupt,)}, "exceptions= may only name Exception"),
        ({"exceptions": ("nope",)}, "exceptions= must be exception types"),
        ({"exclude": 3}, "exclude= must be exception types"),
        ({"key": "code"}, "key= must be callable"),
        ({"store_if": 1}, "store_if= must be callable"),
        ({"on_recovered": 1}, "on_recovered= must be callable"),
        ({"recover_all": True}, "recover_all=True needs a splitter"),
        ({"expiry": object()}, "expiry= must have"),
        ({"domain": ""}, "domain must be a non-empty string"),
        ({"acquire_timeout": -1}, "acquire_timeout= must be a finite number of seconds >= 0"),
    ],
)
def test_misconfiguration_fails_at_decoration(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigurationError, match=match) as info:

        @failover.failover("bad-one", **kwargs)
        def f() -> None: ...

    assert "bad-one" in str(info.value)


def test_engine_must_be_an_engine() -> None:
    with pytest.raises(ConfigurationError, match="engine= must be a Failover"):
        failover.failover("x", engine="memory://")  # type: ignore[call-overload]


def test_nothing_is_created_at_import() -> None:
    import subprocess
    import sys

    code = (
        "import threading, failover, failover.engine.default as e; "
        "assert e.installed is None; assert threading.active_count() == 1; print('ok')"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "ok"


async def test_async_wrapper_over_a_sync_function_is_async(
    engine: Failover, upstream: Upstream
) -> None:
    def asyncify(fn: Any) -> Any:  # as asyncer.asyncify: an `async def` wrapping a sync function
        @functools.wraps(fn)
        async def wrapper(*args: Any, **kwargs: Any) -> Any:
            return fn(*args, **kwargs)

        return wrapper

    def fetch(code: str) -> object:
        return upstream(code)

    wrapped = failover.failover("asyncified", engine=engine)(asyncify(fetch))
    assert wrapped.definition.is_async
    assert inspect.iscoroutinefunction(wrapped)
    assert await wrapped("FR") == "FR"  # the awaited value is stored, not a coroutine
    upstream.fail()
    assert await wrapped("FR") == "FR"


def test_a_default_name_must_be_stable(engine: Failover) -> None:
    class Fetcher:
        def __call__(self, code: str) -> str:
            return code

    # Its repr carries its address: a name from it would change with every process.
    with pytest.raises(ConfigurationError, match="pass name="):
        failover.failover(engine=engine)(Fetcher())
    with pytest.raises(ConfigurationError, match="pass name="):
        failover.failover(functools.partial(lambda a, b: a + b, 1))  # type: ignore[misc]


def test_referential_survives_a_failing_key_callable(
    engine: Failover, caplog: pytest.LogCaptureFixture
) -> None:
    def key(code: str) -> str:
        raise KeyError(code)

    @failover.failover("bad-key", key=key, engine=engine)
    def f(code: str) -> str:
        return code

    assert f("a") == "a"  # the store failed (logged); the live result still returns
    env = f.referential("a")
    assert (env.payload, env.up_to_date) == ("a", True)
    assert "storing the live result failed" in caplog.text


def test_recovery_never_deletes_a_fresh_entry_stored_meanwhile(
    clock: FakeClock, upstream: Upstream
) -> None:
    """The expired entry is found, then a concurrent success stores a fresh one before the
    expired one is deleted: the fresh one must survive."""

    class Racing(failover.InMemoryStore):
        on_find: Any = None

        def find(self, name: str, key: str) -> Any:
            found = super().find(name, key)
            hook, self.on_find = self.on_find, None
            if hook is not None:
                hook()  # the concurrent success, right after the expired entry was read
            return found

    store = Racing()
    eng = Failover(store, clock=clock, metrics=False)

    @failover.failover("race", ttl=10, engine=eng)
    def f(x: str) -> object:
        return upstream(x)

    f("a")
    clock.advance(20)
    store.on_find = lambda: f("a")  # upstream still up for this one call

    @failover.failover("race-reader", domain="race", ttl=10, engine=eng)
    def reader(x: str) -> object:
        raise ConnectionError("down")

    with pytest.raises(ConnectionError, match="down"):
        reader("a")  # finds the expired entry: a miss, and the fresh one must stay
    upstream.fail()
    env = f.referential("a")  # the fresh entry is still there
    assert (env.payload, env.as_of) == ("a", clock())


def test_a_failing_store_if_never_breaks_the_call(
    engine: Failover, upstream: Upstream, caplog: pytest.LogCaptureFixture
) -> None:
    def picky(result: object) -> bool:
        raise ValueError("bug in store_if")

    @failover.failover("picky", engine=engine, store_if=picky)
    def f(x: str) -> object:
        return upstream(x)

    assert f("a") == "a"
    assert "storing the live result failed" in caplog.text


def test_a_sync_failover_called_on_a_running_event_loop_warns_once(
    engine: Failover, caplog: pytest.LogCaptureFixture
) -> None:
    @failover.failover("blocking", engine=engine)
    def blocking(code: str) -> str:
        return code

    @failover.failover("other", engine=engine)
    def other(code: str) -> str:
        return code

    blocking("outside")  # no loop on this thread: nothing to say
    assert "event loop" not in caplog.text

    async def handler() -> list[str]:
        return [blocking("a"), blocking("b"), other("c"), blocking.referential("d").payload]

    caplog.set_level(logging.WARNING, "failover")
    assert asyncio.run(handler()) == ["a", "b", "c", "d"]
    said = [r.getMessage() for r in caplog.records if "event loop" in r.getMessage()]
    assert len(said) == 2  # once per failover, however many calls
    assert said[0].startswith("failover 'blocking':")
    assert "async def" in said[0]
    assert said[1].startswith("failover 'other':")


# -- a result the store refuses to encode ---------------------------------------------------------


class Opaque:
    """Nothing a JSON store can encode (an HTTP response object, say)."""


def test_a_result_the_store_refuses_is_logged_once_then_not_offered_again(
    tmp_path: Any, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    eng = Failover(f"sqlite:///{tmp_path}/f.db", clock=clock, metrics=False, async_writes=False)
    up = Upstream()
    answers = Opaque()

    @failover.failover("opaque", engine=eng)
    def fetch(key: str):  # type: ignore[no-untyped-def]  # no annotation: found at call time
        up(key)
        return answers

    with caplog.at_level(logging.WARNING, "failover"):
        for _ in range(3):
            assert fetch("a") is answers  # returned live every time
    refusals = [r for r in caplog.records if "cannot encode" in r.getMessage()]
    assert len(refusals) == 1  # logged once, not on every call
    assert "Opaque" in refusals[0].getMessage()
    assert not [r for r in caplog.records if r.exc_info]  # no traceback per call
    up.fail()
    with pytest.raises(ConnectionError) as raised:
        fetch("a")
    assert "cannot encode" in str(raised.value.__notes__)
    assert "Opaque" in str(raised.value.__notes__)
    eng.close()
