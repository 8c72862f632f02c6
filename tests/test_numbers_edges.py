"""The operational numbers tell the truth: a scripted mix of calls (live, recovered, not
recovered under each policy, excluded exceptions, refusals of an open breaker and of a full
bulkhead, soft timeouts, fresh answers, single-flight followers, a partial scatter/gather
recovery), and every counter of a real Prometheus registry, the health report and OpenTelemetry
add up to exactly what happened; from one caller, from 8 threads and from 50 tasks."""

from __future__ import annotations

import asyncio
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pybreaker
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

import failover
from failover import Failover
from failover.metrics import Metrics, PrometheusMetrics
from failover.metrics.base import METHODS
from failover.scatter import ListSplitter

from .conftest import FakeClock
from .execution_support import ABlocking, Blocking, watch

CALLS = "failover_calls_total"
RECOVERIES = "failover_recoveries_total"
ERRORS = "failover_upstream_errors_total"
BULKHEAD = "failover_bulkhead_rejected_total"
PARTIAL = "failover_recoveries_partial_total"
HOOKS = "failover_hook_errors_total"


def family(registry: CollectorRegistry, sample: str, *labels: str) -> dict[tuple[str, ...], float]:
    """Every non-zero sample ``sample`` of the registry's text output, by its ``labels``."""
    text = generate_latest(registry).decode()
    return {
        tuple(s.labels[label] for label in labels): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name == sample and s.value
    }


@dataclass
class Expected:
    """What the script did, counted by the script itself."""

    calls: Counter[tuple[str, str]] = field(default_factory=Counter)
    recoveries: Counter[tuple[str, str]] = field(default_factory=Counter)
    errors: Counter[tuple[str, str]] = field(default_factory=Counter)
    bulkhead: Counter[tuple[str, str]] = field(default_factory=Counter)
    partial: Counter[tuple[str]] = field(default_factory=Counter)
    hooks: Counter[tuple[str, str]] = field(default_factory=Counter)
    stale_ages: list[float] = field(default_factory=list)

    def call(self, name: str, outcome: str, error: str | None = None, age: float = 0) -> None:
        """One call of ``name`` that got ``outcome``; ``error``: the upstream's exception (not
        for a refusal); ``age``: a recovered value's age."""
        self.calls[name, outcome] += 1
        if outcome == "recovered":
            self.stale_ages.append(age)
        if error is not None:
            self.errors[name, error] += 1
        if outcome in ("recovered", "not_recovered"):
            self.recoveries[name, outcome] += 1

    def add(self, other: Expected) -> None:
        for mine, theirs in zip(
            (self.calls, self.recoveries, self.errors, self.bulkhead, self.partial, self.hooks),
            (
                other.calls,
                other.recoveries,
                other.errors,
                other.bulkhead,
                other.partial,
                other.hooks,
            ),
            strict=True,
        ):
            mine.update(theirs)
        self.stale_ages += other.stale_ages


def check(eng: Failover, registry: CollectorRegistry, expected: Expected) -> None:
    """Every counter of ``registry`` and ``eng.health()`` agree with ``expected``, exactly."""
    assert family(registry, CALLS, "name", "outcome") == dict(+expected.calls)
    assert family(registry, RECOVERIES, "name", "outcome") == dict(+expected.recoveries)
    assert family(registry, ERRORS, "name", "exception") == dict(+expected.errors)
    assert family(registry, BULKHEAD, "name", "pool") == dict(+expected.bulkhead)
    assert family(registry, PARTIAL, "name") == dict(+expected.partial)
    assert family(registry, HOOKS, "name", "hook") == dict(+expected.hooks)
    # Each value served stale had its age observed once (a refusal's as much as a failure's).
    ages = family(registry, "failover_stale_age_seconds_count", "name")
    assert sum(ages.values()) == len(expected.stale_ages)
    assert sum(family(registry, "failover_stale_age_seconds_sum", "name").values()) == sum(
        expected.stale_ages
    )
    # The upstream's time counts each call that reached it once: ok or error.
    errors_by_name: Counter[str] = Counter()
    for (name, _), n in expected.errors.items():
        errors_by_name[name] += n
    seconds = family(registry, "failover_upstream_seconds_count", "name", "result")
    assert {k[0]: v for k, v in seconds.items() if k[1] == "error"} == dict(+errors_by_name)
    # The health report counts the same calls (all within its minute).
    report = eng.health()
    health = {
        (name, outcome): n
        for name, h in report.failovers.items()
        for outcome, n in h.counts.items()
        if n
    }
    assert health == dict(+expected.calls)
    assert sum(health.values()) == sum(family(registry, CALLS, "name", "outcome").values())
    for pool in report.pools.values():
        for name, n in pool.rejected.items():
            assert expected.bulkhead[name, pool.name] == n


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


@dataclass(frozen=True)
class Country:
    code: str


class Down:
    """A switchable upstream error."""

    def __init__(self) -> None:
        self.error: Exception | None = None

    def check(self) -> None:
        if self.error is not None:
            raise self.error


def sync_mix(eng: Failover, clock: FakeClock) -> Expected:
    """One of every kind of call, on ``eng``; what happened, as the script counts it."""
    ex = Expected()
    down = Down()

    @failover.failover("never", engine=eng, policy="never_throw", exclude=KeyError)
    def never(key: str) -> str:
        down.check()
        return key

    @failover.failover("rethrow", engine=eng, policy="rethrow")
    def rethrow(key: str) -> str:
        down.check()
        return key

    @failover.failover("default", engine=eng, policy="return_default")
    def default(key: str) -> str:
        down.check()
        return key

    @failover.failover("made", engine=eng, policy=lambda ctx: "made")
    def made(key: str) -> str:
        down.check()
        return key

    @failover.failover("guarded", engine=eng, breaker=True, policy="never_throw")
    def guarded(key: str) -> str:
        down.check()
        return key

    @failover.failover("fresh", engine=eng, fresh_for=60, policy="never_throw")
    def fresh(key: str) -> str:
        down.check()
        return key

    @failover.failover("countries", engine=eng, splitter=ListSplitter("code"))
    def countries(codes: list[str]) -> list[Country]:
        down.check()
        return [Country(c) for c in codes]

    def broken_hook(ctx: Any, value: str) -> str:
        raise RuntimeError("the hook's bug")

    @failover.failover("hooked", engine=eng, on_recovered=broken_hook)
    def hooked(key: str) -> str:
        down.check()
        return key

    for key in ("a", "b"):  # live, stored
        for fn in (never, rethrow, default, made, guarded, hooked):
            fn(key)
            ex.call(fn.definition.name, "live")
    assert fresh("a") == "a"
    ex.call("fresh", "live")
    assert fresh("a") == "a"  # within fresh_for: the upstream not called
    ex.call("fresh", "fresh")
    assert countries(["FR", "DE"]) == [Country("FR"), Country("DE")]
    ex.call("countries", "live")

    clock.advance(30)
    down.error = ConnectionError("down")
    for fn in (never, rethrow, default, made, hooked):  # recovered, 30 s old
        assert fn("a") == "a"
        ex.call(fn.definition.name, "recovered", "ConnectionError", age=30)
    ex.hooks["hooked", "on_recovered"] += 1
    assert never("zz") is None  # not recovered, under each policy
    ex.call("never", "not_recovered", "ConnectionError")
    with pytest.raises(ConnectionError):
        rethrow("zz")
    ex.call("rethrow", "not_recovered", "ConnectionError")
    assert default("zz") == ""
    ex.call("default", "not_recovered", "ConnectionError")
    assert made("zz") == "made"
    ex.call("made", "not_recovered", "ConnectionError")
    down.error = KeyError("excluded")  # the upstream's own answer: live, with its error
    with pytest.raises(KeyError):
        never("a")
    ex.call("never", "live", "KeyError")
    down.error = ConnectionError("down")
    assert fresh("a") == "a"  # still within fresh_for, though the upstream is down
    ex.call("fresh", "fresh")
    # A partial scatter/gather recovery: a recovered call, counted partial.
    assert countries(["FR", "IT"]) == [Country("FR")]
    ex.call("countries", "recovered", "ConnectionError", age=30)
    ex.partial["countries",] += 1

    # The breaker (fail_max 2): opens on the second failure, then refuses: recovered, the
    # upstream neither called nor counted.
    assert guarded("a") == "a"
    ex.call("guarded", "recovered", "ConnectionError", age=30)
    assert guarded("b") == "b"
    ex.call("guarded", "recovered", "ConnectionError", age=30)
    assert eng.health().failovers["guarded"].breaker == "open"
    assert guarded("a") == "a"
    ex.call("guarded", "recovered", age=30)
    assert guarded("zz") is None
    ex.call("guarded", "not_recovered")
    return ex


def guarded_mix(eng: Failover) -> Expected:
    """A full bulkhead's refusals, a soft timeout, single-flight followers (sync)."""
    ex = Expected()
    held = Blocking()

    @failover.failover("narrow", engine=eng, max_concurrency=1, policy="never_throw")
    def narrow(key: str) -> str:
        if key == "hold":
            return str(held(key))
        return key

    narrow("a")
    ex.call("narrow", "live")
    worker = threading.Thread(target=narrow, args=("hold",))
    worker.start()
    held.wait_entered()
    assert narrow("a") == "a"  # no permit: recovered, the upstream not called
    ex.call("narrow", "recovered")
    assert narrow("zz") is None
    ex.call("narrow", "not_recovered")
    ex.bulkhead["narrow", "narrow"] += 2
    held.release.set()
    worker.join()
    ex.call("narrow", "live")

    slow_up = Blocking()

    @failover.failover("slow", engine=eng, timeout=0.05, policy="never_throw")
    def slow(key: str) -> str:
        if key == "wait":
            return str(slow_up(key))
        return key

    slow("a")
    ex.call("slow", "live")
    assert slow("wait") is None  # the soft timeout: an upstream error, nothing stored
    ex.call("slow", "not_recovered", "SoftTimeoutError")
    slow_up.release.set()  # its late result is stored, not counted as a call

    flown_up = Blocking()

    @failover.failover("flown", engine=eng, single_flight=True, policy="never_throw")
    def flown(key: str) -> str:
        return str(flown_up(key))

    flights = watch(flown)
    results: list[object] = []
    threads = [threading.Thread(target=lambda: results.append(flown("k"))) for _ in range(4)]
    threads[0].start()
    flown_up.wait_entered()
    for t in threads[1:]:
        t.start()
    flights.reach(leads=1, follows=3)
    flown_up.release.set()
    for t in threads:
        t.join()
    assert results == ["k"] * 4
    assert flown_up.calls == 1
    for _ in threads:  # a follower got the leader's answer: live
        ex.call("flown", "live")
    return ex


def test_a_scripted_mix_adds_up_in_every_counter_and_in_health(
    registry: CollectorRegistry, clock: FakeClock
) -> None:
    eng = Failover(clock=clock, metrics=registry, breaker_defaults={"fail_max": 2})
    ex = sync_mix(eng, clock)
    ex.add(guarded_mix(eng))
    check(eng, registry, ex)
    assert sum(ex.calls.values()) == 41
    eng.close()


# -- many callers at once ------------------------------------------------------------------------


@pytest.fixture
def switchy() -> Iterator[None]:
    """Threads switch as often as the interpreter allows: races show up, if there are any."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(before)


ROUNDS = 60


class Mix:
    """The failovers of the concurrent mix, on one engine, their stored entries in place and
    the breaker of ``open`` open; `one` makes one call of each and counts what it got."""

    def __init__(self, eng: Failover, is_async: bool) -> None:
        self.down = Down()
        cb = pybreaker.CircuitBreaker(fail_max=1, reset_timeout=3600, name="open")
        down = self.down

        def up(key: str) -> str:
            return key

        def failing(key: str) -> str:
            down.check()
            return key

        def excluded(key: str) -> str:
            raise KeyError(key)

        def busy(key: str) -> str:
            sum(range(2_000))  # a while inside the permit: other callers find it taken
            return key

        fns: dict[str, Any] = {"up": up, "down": failing, "gone": failing, "excl": excluded}
        fns |= {"fresh": failing, "open": failing, "narrow": busy, "flown": up}
        if is_async:
            fns = {name: _async(fn) for name, fn in fns.items()}
        options: dict[str, dict[str, Any]] = {
            "excl": {"exclude": KeyError},
            "fresh": {"fresh_for": 60},
            "open": {"breaker": cb},
            "narrow": {"max_concurrency": 1},
            "flown": {"single_flight": True},
        }
        self.fns = {
            name: failover.failover(name, engine=eng, policy="never_throw", **options.get(name, {}))
            for name in fns
        }
        self.fns = {name: decorate(fns[name]) for name, decorate in self.fns.items()}
        self.cb = cb

    def prepare(self) -> None:
        for name in ("down", "fresh", "open"):
            assert self.fns[name]("s") == "s"
        self.down.error = ConnectionError("down")
        self.cb.open()

    async def aprepare(self) -> None:
        for name in ("down", "fresh", "open"):
            assert await self.fns[name]("s") == "s"
        self.down.error = ConnectionError("down")
        self.cb.open()

    @staticmethod
    def count(ex: Expected, got: dict[str, Any], who: int) -> None:
        ex.call("up", "live")
        assert got["down"] == "s"
        ex.call("down", "recovered", "ConnectionError")
        assert got["gone"] is None
        ex.call("gone", "not_recovered", "ConnectionError")
        assert isinstance(got["excl"], KeyError)
        ex.call("excl", "live", "KeyError")
        assert got["fresh"] == "s"
        ex.call("fresh", "fresh")
        assert got["open"] == "s"
        ex.call("open", "recovered")
        if got["narrow"] is None:  # refused by the full bulkhead, nothing stored for the key
            ex.call("narrow", "not_recovered")
            ex.bulkhead["narrow", "narrow"] += 1
        else:
            assert got["narrow"] == f"n{who}"
            ex.call("narrow", "live")
        assert got["flown"] == "f"
        ex.call("flown", "live")

    def one(self, who: int, ex: Expected) -> None:
        got: dict[str, Any] = {}
        for name, fn in self.fns.items():
            key = {"down": "s", "fresh": "s", "open": "s", "flown": "f"}.get(name, f"n{who}")
            if name == "gone":
                key = f"never-{who}"
            try:
                got[name] = fn(key)
            except KeyError as e:
                got[name] = e
        self.count(ex, got, who)

    async def aone(self, who: int, ex: Expected) -> None:
        got: dict[str, Any] = {}
        for name, fn in self.fns.items():
            key = {"down": "s", "fresh": "s", "open": "s", "flown": "f"}.get(name, f"n{who}")
            if name == "gone":
                key = f"never-{who}"
            try:
                got[name] = await fn(key)
            except KeyError as e:
                got[name] = e
        self.count(ex, got, who)


def _async(fn: Any) -> Any:
    async def wrapped(key: str) -> Any:
        await asyncio.sleep(0)  # another task runs here
        return fn(key)

    wrapped.__name__ = fn.__name__
    return wrapped


def prepared(ex: Expected) -> None:
    for name in ("down", "fresh", "open"):
        ex.call(name, "live")


def test_the_mix_from_8_threads_adds_up_exactly(
    registry: CollectorRegistry, clock: FakeClock, switchy: None
) -> None:
    eng = Failover(clock=clock, metrics=registry)
    mix = Mix(eng, is_async=False)
    mix.prepare()
    counted = [Expected() for _ in range(8)]
    start = threading.Barrier(8)

    def worker(i: int) -> None:
        start.wait()
        for r in range(ROUNDS):
            mix.one(i * ROUNDS + r, counted[i])

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ex = Expected()
    prepared(ex)
    for c in counted:
        ex.add(c)
    assert sum(ex.calls.values()) == 3 + 8 * ROUNDS * len(mix.fns)
    assert ex.bulkhead, "8 threads at once never met the full bulkhead"
    check(eng, registry, ex)
    eng.close()


async def test_the_mix_from_50_tasks_adds_up_exactly(
    registry: CollectorRegistry, clock: FakeClock
) -> None:
    eng = Failover(clock=clock, metrics=registry)
    mix = Mix(eng, is_async=True)
    await mix.aprepare()
    counted = [Expected() for _ in range(50)]

    async def worker(i: int) -> None:
        for r in range(ROUNDS // 6):
            await mix.aone(i * ROUNDS + r, counted[i])

    await asyncio.gather(*(worker(i) for i in range(50)))
    ex = Expected()
    prepared(ex)
    for c in counted:
        ex.add(c)
    assert sum(ex.calls.values()) == 3 + 50 * (ROUNDS // 6) * len(mix.fns)
    assert ex.bulkhead, "50 tasks at once never met the full bulkhead"
    check(eng, registry, ex)
    eng.close()


async def test_the_scripted_mix_of_async_failovers_adds_up(
    registry: CollectorRegistry, clock: FakeClock
) -> None:
    eng = Failover(clock=clock, metrics=registry, breaker_defaults={"fail_max": 2})
    ex = Expected()
    down = Down()

    @failover.failover("anever", engine=eng, policy="never_throw", exclude=KeyError)
    async def anever(key: str) -> str:
        down.check()
        return key

    @failover.failover("aguarded", engine=eng, breaker=True, policy="never_throw")
    async def aguarded(key: str) -> str:
        down.check()
        return key

    @failover.failover("afresh", engine=eng, fresh_for=60, policy="never_throw")
    async def afresh(key: str) -> str:
        down.check()
        return key

    held = ABlocking()

    @failover.failover("anarrow", engine=eng, max_concurrency=1, policy="never_throw")
    async def anarrow(key: str) -> str:
        return str(await held(key)) if key == "hold" else key

    flown_up = ABlocking()

    @failover.failover("aflown", engine=eng, single_flight=True, policy="never_throw")
    async def aflown(key: str) -> str:
        return str(await flown_up(key))

    @failover.failover("aslow", engine=eng, timeout=0.05, policy="never_throw")
    async def aslow(key: str) -> str:
        return str(await held(key)) if key == "hold" else key

    for fn in (anever, aguarded, afresh, anarrow, aslow):
        assert await fn("a") == "a"
        ex.call(fn.definition.name, "live")
    assert await afresh("a") == "a"
    ex.call("afresh", "fresh")
    clock.advance(5)
    down.error = ConnectionError("down")
    assert await anever("a") == "a"
    ex.call("anever", "recovered", "ConnectionError", age=5)
    assert await anever("zz") is None
    ex.call("anever", "not_recovered", "ConnectionError")
    down.error = KeyError("mine")
    with pytest.raises(KeyError):
        await anever("a")
    ex.call("anever", "live", "KeyError")
    down.error = ConnectionError("down")
    for _ in range(2):
        assert await aguarded("a") == "a"
        ex.call("aguarded", "recovered", "ConnectionError", age=5)
    assert await aguarded("a") == "a"  # refused by the open breaker
    ex.call("aguarded", "recovered", age=5)

    holder = asyncio.ensure_future(anarrow("hold"))
    await held.wait_entered()
    assert await anarrow("a") == "a"  # refused by the full bulkhead
    ex.call("anarrow", "recovered", age=5)
    ex.bulkhead["anarrow", "anarrow"] += 1
    assert await aslow("hold") is None  # the soft timeout, nothing stored for the key
    ex.call("aslow", "not_recovered", "SoftTimeoutError")
    held.release.set()
    assert await holder == "hold"
    ex.call("anarrow", "live")

    flights = watch(aflown)
    flown_up.error = ConnectionError("down")
    leader = asyncio.ensure_future(aflown("k"))
    await flown_up.wait_entered()
    followers = [asyncio.ensure_future(aflown("k")) for _ in range(5)]
    await flights.areach(leads=1, follows=5)
    flown_up.release.set()
    assert await asyncio.gather(leader, *followers) == [None] * 6  # one failure, six calls
    assert flown_up.calls == 1
    for _ in range(6):  # each follower recovers from the leader's error itself
        ex.call("aflown", "not_recovered", "ConnectionError")
    check(eng, registry, ex)
    eng.close()


# -- a failing metrics object ----------------------------------------------------------------------


class Raising(Metrics):
    """A custom metrics object whose every method raises."""

    def __init__(self) -> None:
        self.tried: Counter[str] = Counter()


def _raiser(method: str) -> Any:
    def raising(self: Raising, *args: Any, **kwargs: Any) -> None:
        self.tried[method] += 1
        raise RuntimeError(f"metrics {method} broke")

    return raising


for _method in METHODS:
    setattr(Raising, _method, _raiser(_method))


def test_a_raising_metrics_object_never_breaks_a_call_and_health_still_counts(
    clock: FakeClock,
) -> None:
    metrics = Raising()
    eng = Failover(clock=clock, metrics=metrics, breaker_defaults={"fail_max": 2})
    ex = sync_mix(eng, clock)  # every call answers as it does with metrics that work
    ex.add(guarded_mix(eng))
    health = {
        (name, outcome): n
        for name, h in eng.health().failovers.items()
        for outcome, n in h.counts.items()
        if n
    }
    assert health == dict(+ex.calls)
    # Each kind of report was tried (and failed) on the way.
    for method in ("track", "stored", "recovered", "partial", "circuit_state", "refused"):
        assert metrics.tried[method], method
    assert metrics.tried["partial"] == 1
    # Every guard's refusal, once (issue 28: `bulkhead_rejected` counted the bulkhead's only).
    assert metrics.tried["refused"] == 2 + 2 + 1
    eng.close()


# -- label values and cardinality ------------------------------------------------------------------

ODD = 'we"ird\\na\nme {x="1"}, é ✓'


def test_odd_names_and_error_kinds_keep_the_exposition_valid(
    registry: CollectorRegistry, clock: FakeClock
) -> None:
    eng = Failover(clock=clock, metrics=registry)
    odd_error = type('Odd"Err\\or\n', (Exception,), {})

    @failover.failover(ODD, engine=eng, policy="never_throw")
    def odd(key: str) -> str:
        if key == "boom":
            raise odd_error("boom")
        return key

    assert odd("a") == "a"
    assert odd("boom") is None
    assert family(registry, CALLS, "name", "outcome") == {
        (ODD, "live"): 1,
        (ODD, "not_recovered"): 1,
    }
    assert family(registry, ERRORS, "name", "exception") == {(ODD, 'Odd"Err\\or\n'): 1}
    info = family(registry, "failover_info", "name", "effective_name")
    assert info == {(ODD, ODD): 1}
    assert eng.health().failovers[ODD].counts["not_recovered"] == 1
    eng.close()


def test_names_past_the_cap_fold_into_other_and_still_add_up(
    registry: CollectorRegistry, clock: FakeClock
) -> None:
    metrics = PrometheusMetrics(registry, max_names=3)
    eng = Failover(clock=clock, metrics=metrics)
    down = Down()
    fns = []
    for i in range(12):

        @failover.failover(f"n{i}-{ODD}", engine=eng, policy="never_throw")
        def fn(key: str) -> str:
            down.check()
            return key

        fns.append(fn)
    for fn in fns:
        fn("a")
    down.error = ConnectionError("down")
    for fn in fns:
        fn("a")
        fn("zz")
    named = [f"n{i}-{ODD}" for i in range(3)]
    calls = family(registry, CALLS, "name", "outcome")
    expected: dict[tuple[str, str], float] = {}
    for label, n in [*((name, 1) for name in named), ("__other__", 9)]:
        for outcome in ("live", "recovered", "not_recovered"):
            expected[label, outcome] = n
    assert calls == expected
    recoveries = family(registry, RECOVERIES, "name", "outcome")
    assert recoveries == {k: v for k, v in expected.items() if k[1] != "live"}
    assert family(registry, ERRORS, "name", "exception") == {
        **{(name, "ConnectionError"): 2 for name in named},
        ("__other__", "ConnectionError"): 18,
    }
    # One info series per named failover; the folded ones have none (it would be 9 series).
    assert set(family(registry, "failover_info", "name")) == {(name,) for name in named}
    assert sum(calls.values()) == 36
    assert sum(sum(h.counts.values()) for h in eng.health().failovers.values()) == 36
    eng.close()


# -- the stale report of a unit of work ------------------------------------------------------------


def test_the_stale_report_lists_exactly_the_answers_that_were_not_live(
    engine: Failover, clock: FakeClock
) -> None:
    down = Down()
    made: dict[str, Any] = {}
    for name, options in {
        "live": {},
        "fresh": {"fresh_for": 600},
        "stale": {},
        "policy": {"policy": "never_throw"},
        "rethrow": {"policy": "rethrow"},
        "excluded": {"exclude": KeyError},
        "v2": {"domain": "shared"},
    }.items():

        @failover.failover(name, engine=engine, **options)
        def fn(key: str) -> str:
            down.check()
            return key

        made[name] = fn

    @failover.failover("countries", engine=engine, splitter=ListSplitter("code"))
    def countries(codes: list[str]) -> list[Country]:
        down.check()
        return [Country(c) for c in codes]

    made["stale"]("a")
    made["fresh"]("a")
    clock.advance(100)
    made["v2"]("a")
    countries(["FR"])
    clock.advance(20)

    with failover.served.collect() as outer:
        assert made["live"]("a") == "a"
        down.error = ConnectionError("down")
        assert made["fresh"]("a") == "a"  # within fresh_for: up to date, not listed
        with pytest.raises(ConnectionError):
            made["rethrow"]("zz")  # the caller got the exception: no answer to list
        down.error = KeyError("mine")
        with pytest.raises(KeyError):
            made["excluded"]("a")  # the upstream's own answer
        assert not outer
        down.error = ConnectionError("down")
        with failover.served.collect() as inner:
            assert made["v2"]("a") == "a"  # its own name, not its domain; 20 s old
            assert made["policy"]("zz") is None  # a policy-made value: no age
        assert inner.names == ("v2", "policy")
        assert inner.age == 20
        assert made["stale"]("a") == "a"  # 120 s old
        assert made["stale"]("a") == "a"  # listed once
        assert countries(["FR", "IT"]) == [Country("FR")]  # a partial recovery, 20 s old
        down.error = None
        assert made["live"]("b") == "b"
    assert outer.names == ("v2", "policy", "stale", "countries")
    assert outer.age == 120
    down.error = ConnectionError("down")
    assert made["stale"]("a") == "a"  # after the block: its report is closed
    assert outer.names == ("v2", "policy", "stale", "countries")


async def _request(app: Any, path: str) -> dict[bytes, bytes]:
    """One HTTP request through ``app``: its response's headers."""
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Any) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "GET", "path": path, "headers": []}
    await app(scope, receive, send)
    assert sent[0]["type"] == "http.response.start"
    return dict(sent[0]["headers"])


async def test_the_stale_headers_of_each_request_list_its_own_calls_across_its_tasks(
    engine: Failover, clock: FakeClock
) -> None:
    from failover.asgi import StaleHeaders

    down = Down()
    shared = ABlocking()

    @failover.failover("aold", engine=engine)
    async def aold(key: str) -> str:
        await asyncio.sleep(0)
        down.check()
        return key

    @failover.failover("anew", engine=engine, policy="never_throw")
    async def anew(key: str) -> str:
        await asyncio.sleep(0)
        down.check()
        return key

    @failover.failover("sync", engine=engine)
    def sync(key: str) -> str:
        down.check()
        return key

    @failover.failover("flown", engine=engine, single_flight=True)
    async def flown(key: str) -> str:
        return str(await shared(key))

    await aold("a")
    sync("a")
    shared.release.set()
    await flown("k")  # stored; the next flight fails
    await shared.wait_entered()
    shared.release.clear()
    shared.error = ConnectionError("down")
    clock.advance(300)
    await anew("a")
    clock.advance(7)
    down.error = ConnectionError("down")

    async def inner(scope: Any, receive: Any, send: Any) -> None:
        path = scope["path"]
        if path == "/tasks":  # three tasks and a worker thread of one request
            await asyncio.gather(aold("a"), anew("a"), anew("zz"), asyncio.to_thread(sync, "a"))
        elif path == "/flown":
            await flown("k")
        elif path == "/live":
            down.error = None
            await anew("b")
            down.error = ConnectionError("down")
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    app = StaleHeaders(inner)
    flights = watch(flown)
    leader = asyncio.ensure_future(_request(app, "/flown"))
    await shared.wait_entered()
    tasks = asyncio.ensure_future(_request(app, "/tasks"))
    followers = [asyncio.ensure_future(_request(app, "/flown")) for _ in range(2)]
    live = await _request(app, "/live")
    await flights.areach(leads=1, follows=2)
    shared.release.set()
    answers = await asyncio.gather(leader, *followers, tasks)
    assert b"x-failover-stale" not in live
    assert b"age" not in live
    for headers in answers[:3]:  # the leader's request and each follower's: one stale call
        assert headers[b"x-failover-stale"] == b"flown"
        assert headers[b"age"] == b"307"
    headers = answers[3]
    assert set(headers[b"x-failover-stale"].split(b", ")) == {b"aold", b"anew", b"sync"}
    assert headers[b"age"] == b"307"  # the oldest of the stale values (anew's is 7 s old)
    assert headers[b"warning"] == b'110 - "Response is Stale"'


# -- OpenTelemetry agrees ------------------------------------------------------------------------


def test_opentelemetry_counts_the_same_calls_as_prometheus_and_health(
    registry: CollectorRegistry, clock: FakeClock
) -> None:
    pytest.importorskip("opentelemetry.sdk")
    from .test_otel import Telemetry

    tel = Telemetry()
    eng = Failover(
        clock=clock, metrics=registry, opentelemetry=tel.otel, breaker_defaults={"fail_max": 2}
    )
    ex = sync_mix(eng, clock)
    ex.add(guarded_mix(eng))
    check(eng, registry, ex)
    # OTel names the excluded exception's call `raised` (the docs' outcome); Prometheus and
    # the health report count it live, with its error.
    otel_calls = Counter(ex.calls)
    otel_calls["never", "live"] -= 1
    otel_calls["never", "raised"] += 1
    points = {
        (dict(k)["failover.name"], dict(k)["failover.outcome"]): p.value
        for k, p in tel.points("failover.calls").items()
    }
    assert points == dict(+otel_calls)
    spans = [s for s in tel.spans.get_finished_spans() if s.name == "failover.call"]
    assert len(spans) == sum(ex.calls.values())
    refused = [s for s in spans if any(e.name == "failover.guard_refused" for e in s.events)]
    # The open breaker's, the full bulkhead's, and the soft timeout's (a guard's refusal too
    # since issue 28: it was left out, as the upstream had been called).
    assert len(refused) == 2 + 2 + 1
    guards = Counter(s.attributes["failover.guard"] for s in refused)
    assert guards == {"breaker": 2, "bulkhead": 2, "timeout": 1}
    recover_spans = Counter(
        (s.attributes["failover.name"], s.attributes["failover.outcome"])
        for s in tel.spans.get_finished_spans()
        if s.name == "failover.recover"
    )
    assert dict(recover_spans) == dict(+ex.recoveries)
    # The upstream's time: as many observations as Prometheus has (ok and error).
    durations = {
        dict(k)["failover.name"]: p.count
        for k, p in tel.points("failover.upstream.duration").items()
    }
    seconds: Counter[str] = Counter()
    for (name, _), n in family(
        registry, "failover_upstream_seconds_count", "name", "result"
    ).items():
        seconds[name] += int(n)
    assert durations == dict(+seconds)
    eng.close()


def test_threads_refused_at_once_are_each_counted(switchy: None, clock: FakeClock) -> None:
    """The bulkhead's refusals, counted per failover by its pool and by Prometheus, add up when
    threads are refused at the same moment (a read then a write of the count lost some)."""
    registry = CollectorRegistry()
    eng = Failover("memory://", clock=clock, metrics=registry)
    up = Blocking()

    @failover.failover(
        "num.refused", engine=eng, max_concurrency=1, acquire_timeout=0, policy="never_throw"
    )
    def f(x: str) -> object:
        return up(x) if x == "hold" else x

    holder = threading.Thread(target=f, args=("hold",))
    holder.start()
    up.wait_entered()  # the one permit is held: every other call is refused at once
    threads, calls = 16, 1_000

    def refused() -> None:
        for _ in range(calls):
            assert f("x") is None

    workers = [threading.Thread(target=refused) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    up.release.set()
    holder.join()
    labels = {"name": "num.refused", "pool": "num.refused"}
    assert eng.health().pools["num.refused"].rejected == {"num.refused": threads * calls}
    assert registry.get_sample_value("failover_bulkhead_rejected_total", labels) == threads * calls
    eng.close()
