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
from failover.scatter import ListSplitter

from .conftest import FakeClock
from .execution_support import Blocking, watch

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

    def call(self, name: str, outcome: str, error: str | None = None, read: bool = True) -> None:
        """One call of ``name`` that got ``outcome``; ``error``: the upstream's exception (not
        for a refusal); ``read``: whether the store was read to recover it."""
        self.calls[name, outcome] += 1
        if error is not None:
            self.errors[name, error] += 1
        if outcome in ("recovered", "not_recovered") and read:
            self.recoveries[name, outcome] += 1

    def add(self, other: Expected) -> None:
        for mine, theirs in zip(
            (self.calls, self.recoveries, self.errors, self.bulkhead, self.partial),
            (other.calls, other.recoveries, other.errors, other.bulkhead, other.partial),
            strict=True,
        ):
            mine.update(theirs)


def check(eng: Failover, registry: CollectorRegistry, expected: Expected) -> None:
    """Every counter of ``registry`` and ``eng.health()`` agree with ``expected``, exactly."""
    assert family(registry, CALLS, "name", "outcome") == dict(+expected.calls)
    assert family(registry, RECOVERIES, "name", "outcome") == dict(+expected.recoveries)
    assert family(registry, ERRORS, "name", "exception") == dict(+expected.errors)
    assert family(registry, BULKHEAD, "name", "pool") == dict(+expected.bulkhead)
    assert family(registry, PARTIAL, "name") == dict(+expected.partial)
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

    for key in ("a", "b"):  # live, stored
        for fn in (never, rethrow, default, made, guarded):
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
    for fn in (never, rethrow, default, made):  # recovered
        assert fn("a") == "a"
        ex.call(fn.definition.name, "recovered", "ConnectionError")
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
    ex.call("countries", "recovered", "ConnectionError")
    ex.partial["countries",] += 1

    # The breaker (fail_max 2): opens on the second failure, then refuses: recovered, the
    # upstream neither called nor counted.
    assert guarded("a") == "a"
    ex.call("guarded", "recovered", "ConnectionError")
    assert guarded("b") == "b"
    ex.call("guarded", "recovered", "ConnectionError")
    assert eng.health().failovers["guarded"].breaker == "open"
    assert guarded("a") == "a"
    ex.call("guarded", "recovered")
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
    assert sum(ex.calls.values()) == 38
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
