"""The fleet (``Failover(fleet="redis://…")``): the engine's breakers share their state through
one Redis, read from memory and kept current by a background thread (issue 28).

Real redis-server processes started here (stopped with ``SIGSTOP`` to play a hung fleet, always
resumed), real pybreaker, two engines standing in for two processes and a real forked child.
pybreaker decides open -> half-open on its own wall clock (``opened_at + reset_timeout``): the
tests age ``opened_at`` instead of waiting (as tests/test_breaker.py does). Waits are events
with hang guards of several seconds; no assertion on time.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pybreaker
import pytest
import redis
import redis.asyncio
from prometheus_client import CollectorRegistry

import failover
from failover import ConfigurationError, Failover
from failover.execution.fleet_state import RENEW_FOR

from .conftest import FakeClock
from .own_servers import running, stopped
from .redis_server import RedisServer, unique_prefix

NAME = "fleet.rates"
HANG = 5.0  # the hang guard of every wait


@pytest.fixture(scope="module")
def server() -> Iterator[RedisServer]:
    """A redis-server of this module's own: stopping it stalls no other test."""
    yield from running(RedisServer())


@pytest.fixture
def url(server: RedisServer) -> str:
    """The fleet's URL, on a key prefix of this test's own."""
    return f"{server.url}?prefix={unique_prefix()}"


def _engine(
    url: str, clock: FakeClock, metrics: Any = False, fail_max: int = 2, timeout: float = 0.5
) -> Failover:
    """An engine on the fleet at ``url``; ``timeout`` is its store deadline, the fleet's socket
    timeout too (generous in tests whose Redis is never stopped and that count rounds)."""
    return Failover(
        clock=clock,
        metrics=metrics,
        fleet=url,
        store_timeout=timeout,
        breaker_defaults={"fail_max": fail_max, "reset_timeout": 600},
    )


class Upstream:
    """A function's upstream: counts its calls, fails while ``down``, and blocks each call on
    ``gate`` while ``held`` (``entered`` set when one is inside)."""

    def __init__(self, anyone: threading.Event | None = None) -> None:
        self.calls = 0
        self.down = False
        self.held = False
        self.entered = threading.Event()
        self.anyone = anyone  # set too when a call is inside: one event for several upstreams
        self.gate = threading.Event()

    def __call__(self, base: str) -> dict[str, float]:
        self.calls += 1
        if self.held:
            self.entered.set()
            if self.anyone is not None:
                self.anyone.set()
            assert self.gate.wait(HANG)
        if self.down:
            raise ConnectionError("rates service down")
        return {"USD": 1.08}


def _rates(engine: Failover, upstream: Upstream) -> Any:
    @failover.failover(NAME, engine=engine, breaker=True, policy="never_throw")
    def rates(base: str) -> dict[str, float]:
        return upstream(base)

    return rates


class Heard(pybreaker.CircuitBreakerListener):
    """Sets an event per state the breaker moves to (from a call, or from the fleet's thread)."""

    def __init__(self) -> None:
        self.states: dict[str, threading.Event] = {
            s: threading.Event()
            for s in (pybreaker.STATE_OPEN, pybreaker.STATE_CLOSED, pybreaker.STATE_HALF_OPEN)
        }

    def state_change(self, cb: Any, old_state: Any, new_state: Any) -> None:
        self.states[new_state.name].set()


def _listen(engine: Failover, fn: Any) -> Heard:
    heard = Heard()
    engine.breaker(fn.definition).add_listener(heard)
    return heard


def _age(*engines: Failover) -> None:
    """Let the open breaker's reset timeout pass, in every engine (on pybreaker's wall clock)."""
    for engine in engines:
        assert engine.fleet is not None
        storage = engine.fleet.breaker_storage(NAME)
        storage.opened_at = datetime.now(UTC) - timedelta(seconds=601)


def _trial_leases(url: str, engines: list[Failover]) -> str:
    """What each engine knows of the fleet's trial lease, and what Redis holds: the message of a
    wait for a trial that did not come."""
    client = redis.Redis.from_url(url.partition("?")[0])
    now = time.monotonic()
    lines = []
    for i, engine in enumerate(engines):
        assert engine.fleet is not None
        storage = engine.fleet.breaker_storage(NAME)
        shared = engine.fleet.breakers
        key = shared.key(NAME) + ":trial"
        lines.append(
            f"engine {i} (token {shared.token[:8]}): state {storage.state}, lease for "
            f"{storage.lease_until - now:.3f} s more, wanted {storage.wanted}, trying "
            f"{storage.trying}, fleet up {engine.fleet.up}, errors {dict(engine.fleet.errors)}; "
            f"Redis {key}: {client.get(key)!r}, {client.pttl(key)} ms"
        )
    client.close()
    return "no trial came: " + "; ".join(lines)


def _cause(fn: Any) -> str:
    return type(fn.referential("EUR").cause).__name__


def _acause(fn: Any) -> str:
    """`_cause`, of a sync or an async failover."""
    return type(_run(fn.referential("EUR")).cause).__name__


def _resync(engine: Failover) -> None:
    """A round that gets through (a Redis just resumed, on a loaded machine, may miss one)."""
    assert engine.fleet is not None
    assert any(engine.fleet.sync() for _ in range(5))


def _pid(server: RedisServer) -> int:
    assert server.process is not None
    return server.process.pid


# -- the setting ---------------------------------------------------------------------------------


def test_the_fleet_setting_is_checked_naming_fleet(clock: FakeClock, url: str) -> None:
    for bad in (42, "http://redis.internal", "redis://h/0?prefix=with space"):
        with pytest.raises(ConfigurationError, match="fleet"):
            Failover(clock=clock, metrics=False, fleet=bad)
    with pytest.raises(ConfigurationError, match="fleet"):
        Failover(
            clock=clock,
            metrics=False,
            fleet=url,
            breaker_defaults={
                "state_storage": lambda name: pybreaker.CircuitMemoryStorage("closed")
            },
        )
    with pytest.raises(ConfigurationError, match="FAILOVER_FLEET"):
        Failover.from_env(environ={"FAILOVER_FLEET": "http://nope"}, metrics=False)
    engine = Failover.from_env(environ={"FAILOVER_FLEET": url}, metrics=False, clock=clock)
    try:
        assert engine.fleet is not None
        assert engine.fleet.sync()
    finally:
        engine.close()


@pytest.mark.parametrize("kind", ["sync", "asyncio"])
def test_a_given_client_is_copied_into_a_client_of_the_fleets_own_with_timeouts(
    kind: str, server: RedisServer, clock: FakeClock
) -> None:
    client: Any = (redis.Redis if kind == "sync" else redis.asyncio.Redis)(port=server.port)
    engine = Failover(clock=clock, metrics=False, fleet=client, store_timeout=0.5)
    try:
        assert engine.fleet is not None
        own = engine.fleet.client
        assert isinstance(own, redis.Redis)
        assert own is not client
        kwargs = own.connection_pool.connection_kwargs
        assert kwargs["socket_timeout"] == kwargs["socket_connect_timeout"] == 0.5
        assert engine.fleet.sync()
    finally:
        engine.close()
    assert engine.fleet is not None
    assert not engine.fleet._thread.is_alive()


# -- one trip, one trial ---------------------------------------------------------------------


def test_a_trip_in_one_engine_keeps_the_other_off_the_upstream(url: str, clock: FakeClock) -> None:
    here, there = _engine(url, clock), _engine(url, clock)
    try:
        failing, answering = Upstream(), Upstream()
        failing.down = True
        tripper, other = _rates(here, failing), _rates(there, answering)
        assert other.referential("EUR").up_to_date
        heard = _listen(there, other)
        assert [_cause(tripper) for _ in range(3)] == ["ConnectionError"] * 2 + [
            "CircuitBreakerError"
        ]
        # No call on the other engine: its fleet thread applies the trip and its listeners hear it.
        assert heard.states[pybreaker.STATE_OPEN].wait(HANG)
        calls = answering.calls
        assert [_cause(other) for _ in range(3)] == ["CircuitBreakerError"] * 3
        assert answering.calls == calls  # its upstream, which would answer, is not called
    finally:
        here.close()
        there.close()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="POSIX only")
@pytest.mark.parametrize("make", ["sync", "async"])
def test_a_trip_in_a_forked_process_reaches_the_parent(
    url: str, clock: FakeClock, make: str
) -> None:
    """A preforking server's worker: the child's fleet starts anew (its own thread, client and
    lease token) and its trip reaches the parent, another process."""
    engine = _engine(url, clock)
    upstream = Upstream()
    rates = (_rates if make == "sync" else _arates)(engine, upstream)
    assert _run(rates.referential("EUR")).up_to_date
    heard = _listen(engine, rates)
    assert engine.fleet is not None
    parent_token = engine.fleet.breakers.token
    reading, writing = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report through the pipe, never return into pytest
        try:
            upstream.down = True
            causes = [_acause(rates) for _ in range(3)]
            fleet = engine.fleet
            published = fleet.sync()
            said = [causes, published, fleet.breakers.token, fleet._thread.is_alive()]  # type: ignore[union-attr]
            os.write(writing, json.dumps(said).encode())
        finally:
            os._exit(0)
    os.close(writing)
    with os.fdopen(reading) as pipe:
        causes, published, token, alive = json.loads(pipe.read())
    os.waitpid(pid, 0)
    try:
        assert causes == ["ConnectionError"] * 2 + ["CircuitBreakerError"]
        assert published
        assert alive
        assert token != parent_token
        assert heard.states[pybreaker.STATE_OPEN].wait(HANG)
        calls = upstream.calls
        assert _acause(rates) == "CircuitBreakerError"
        assert upstream.calls == calls
    finally:
        engine.close()


def _arates(engine: Failover, upstream: Upstream) -> Any:
    @failover.failover(NAME, engine=engine, breaker=True, policy="never_throw")
    async def rates(base: str) -> dict[str, float]:
        return upstream(base)  # held on a thread's event: each call runs in its own loop

    return rates


def _run(result: Any) -> Any:
    """A sync call's result, or an async call's, run to its end in a loop of its own."""
    return asyncio.run(result) if asyncio.iscoroutine(result) else result


@pytest.mark.parametrize("make", [_rates, _arates], ids=["sync", "async"])
def test_half_open_lets_one_trial_through_for_the_whole_fleet(
    url: str, clock: FakeClock, make: Any
) -> None:
    engines = [_engine(url, clock), _engine(url, clock)]
    try:
        trial = threading.Event()  # a trial is in, in either engine
        upstreams = [Upstream(trial), Upstream(trial)]
        fns = [make(e, u) for e, u in zip(engines, upstreams, strict=True)]
        heard = _listen(engines[1], fns[1])
        upstreams[0].down = True
        for _ in range(2):
            _run(fns[0]("EUR"))
        assert heard.states[pybreaker.STATE_OPEN].wait(HANG)
        _age(*engines)
        upstreams[0].down = False
        for u in upstreams:
            u.held, u.calls = True, 0

        def knock() -> None:  # both engines, in turn, until one lets its trial in
            for _ in range(1000):
                for fn in fns:
                    _run(fn("EUR"))
                    if trial.is_set():
                        return
                if trial.wait(0.005):
                    return

        knocker = threading.Thread(target=knock, daemon=True)
        knocker.start()
        assert trial.wait(HANG), _trial_leases(url, engines)
        holder = 0 if upstreams[0].entered.is_set() else 1
        other = 1 - holder
        # Listening before the trial ends: the other engine may notice the verdict at once.
        closed = _listen(engines[other], fns[other])
        # The trial is in flight in one engine: every other call, in either engine, is refused.
        assert [_acause(fn) for fn in fns for _ in range(3)] == ["CircuitBreakerError"] * 6
        assert sum(u.calls for u in upstreams) == 1
        for u in upstreams:
            u.held = False
            u.gate.set()
        knocker.join(HANG)
        assert not knocker.is_alive()
        assert sum(u.calls for u in upstreams) == 1  # one trial for the fleet, not one each
        assert closed.states[pybreaker.STATE_CLOSED].wait(HANG)  # the verdict, published
        assert _run(fns[other].referential("EUR")).up_to_date
    finally:
        for u in upstreams:
            u.gate.set()
        for e in engines:
            e.close()


def test_a_lease_taken_unknowingly_is_taken_again_by_its_holder(url: str, clock: FakeClock) -> None:
    """A lease ask that Redis ran but whose reply was lost (the round timed out) left the lease
    held under this process's token without its knowing: the next ask renews it, and the trial
    runs at once rather than after the lease lapses."""
    engine = _engine(url, clock, timeout=HANG)
    try:
        upstream = Upstream()
        fn = _rates(engine, upstream)
        heard = _listen(engine, fn)
        upstream.down = True
        for _ in range(2):
            fn("EUR")
        assert heard.states[pybreaker.STATE_OPEN].wait(HANG)
        _age(engine)
        upstream.down = False
        assert engine.fleet is not None
        breakers = engine.fleet.breakers
        client = redis.Redis.from_url(url.split("?", maxsplit=1)[0])
        try:  # as if this process's ask had been run and its reply lost: held for a minute
            client.set(breakers.key(NAME) + ":trial", breakers.token, px=60_000)
        finally:
            client.close()
        assert _cause(fn) == "CircuitBreakerError"  # no lease known here yet: it asks
        assert engine.fleet.sync()  # the ask: this process's own lease, renewed
        assert fn.referential("EUR").up_to_date  # the trial, not a minute later
        assert heard.states[pybreaker.STATE_CLOSED].wait(HANG)
    finally:
        engine.close()


def test_a_trial_slower_than_its_lease_keeps_the_lease(url: str, clock: FakeClock) -> None:
    """The lease a trial holds is renewed each round while the trial runs: a trial slower than
    the lease's life (a dying upstream is slow) stays the fleet's only one."""
    engines = [_engine(url, clock, timeout=HANG), _engine(url, clock, timeout=HANG)]
    try:
        trial = threading.Event()
        upstreams = [Upstream(trial), Upstream(trial)]
        fns = [_rates(e, u) for e, u in zip(engines, upstreams, strict=True)]
        heard = _listen(engines[1], fns[1])
        upstreams[0].down = True
        for _ in range(2):
            fns[0]("EUR")
        assert heard.states[pybreaker.STATE_OPEN].wait(HANG)
        _age(*engines)
        upstreams[0].down = False
        upstreams[0].held = True
        assert engines[0].fleet is not None
        breakers = engines[0].fleet.breakers
        assert _cause(fns[0]) == "CircuitBreakerError"  # asks for the lease
        assert engines[0].fleet.sync()  # takes it
        caller = threading.Thread(target=fns[0], args=("EUR",), daemon=True)
        caller.start()  # the trial, held in the upstream
        assert trial.wait(HANG)
        lease = breakers.key(NAME) + ":trial"
        client = redis.Redis.from_url(url.split("?", maxsplit=1)[0])
        try:
            client.pexpire(lease, 1_000)  # as if most of its life had passed
            assert engines[0].fleet.sync()  # a round while the trial runs
            assert client.pttl(lease) > 1_000  # renewed
            assert client.get(lease) == breakers.token.encode()
            # A trial running for longer than RENEW_FOR (hung) is no longer renewed: the lease
            # lapses, and another process may try.
            storage = breakers.storage(NAME)
            began = storage.trying
            storage.trying = began - RENEW_FOR - 1
            client.pexpire(lease, 1_000)
            assert engines[0].fleet.sync()
            assert client.pttl(lease) <= 1_000
            storage.trying = began
        finally:
            client.close()
        assert _cause(fns[1]) == "CircuitBreakerError"
        assert engines[1].fleet is not None
        assert engines[1].fleet.sync()  # asks, and is refused the lease
        assert _cause(fns[1]) == "CircuitBreakerError"
        assert upstreams[1].calls == 0
        upstreams[0].gate.set()  # the trial ends (a success: the verdict is closed)
        caller.join(HANG)
        assert not caller.is_alive()
        assert storage.trying == 0.0  # back at rest: nothing left to renew
        assert engines[0].fleet.sync()  # the verdict's round gives the lease back
        client = redis.Redis.from_url(url.split("?", maxsplit=1)[0])
        try:
            # Given back (the other engine, asked by its refused calls, may have taken it since).
            assert client.get(lease) != breakers.token.encode()
        finally:
            client.close()
    finally:
        for u in upstreams:
            u.gate.set()
        for e in engines:
            e.close()


# -- a fleet that does not answer ----------------------------------------------------------------


def _fleet_up(registry: CollectorRegistry) -> float | None:
    return registry.get_sample_value("failover_store_up", {"store": "fleet"})


def test_with_the_fleet_stopped_sync_calls_answer_live_and_breakers_work_locally(
    server: RedisServer, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    url = f"{server.url}?prefix={unique_prefix()}"
    registry = CollectorRegistry()
    here, there = _engine(url, clock, metrics=registry), _engine(url, clock)
    try:
        upstream, healthy = Upstream(), Upstream()
        rates, other = _rates(here, upstream), _rates(there, Upstream())

        @failover.failover("fleet.healthy", engine=here, breaker=True, policy="never_throw")
        def quotes(base: str) -> dict[str, float]:
            return healthy(base)

        assert rates.referential("EUR").up_to_date
        assert quotes.referential("EUR").up_to_date
        assert other.referential("EUR").up_to_date
        _resync(here)
        assert _fleet_up(registry) == 1
        heard = _listen(there, other)
        caplog.set_level(logging.WARNING, logger="failover.fleet")
        with stopped([_pid(server)]):
            assert here.fleet is not None
            assert not here.fleet.sync()
            assert not here.fleet.sync()
            assert _fleet_up(registry) == 0
            errors = registry.get_sample_value(
                "failover_store_errors_total",
                {"store": "fleet", "operation": "sync", "reason": "timeout"},
            )
            assert errors is not None
            assert errors >= 2
            assert here.health().stores["fleet"].status == "down"
            # Calls answer live from threads, none held by the stopped Redis.
            done: list[bool] = []
            workers = [
                threading.Thread(target=lambda: done.append(quotes.referential("EUR").up_to_date))
                for _ in range(8)
            ]
            for w in workers:
                w.start()
            for w in workers:
                w.join(HANG)
            assert done == [True] * 8
            # The breaker works in this process alone: it trips, refuses, and its trial runs
            # here (no lease to ask a stopped Redis for).
            upstream.down = True
            assert [_cause(rates) for _ in range(3)] == ["ConnectionError"] * 2 + [
                "CircuitBreakerError"
            ]
            calls = upstream.calls
            _age(here)
            upstream.down = False
            assert rates.referential("EUR").up_to_date
            assert upstream.calls == calls + 1
            upstream.down = True  # and it trips again: the state to re-sync
            assert [_cause(rates) for _ in range(3)] == ["ConnectionError"] * 2 + [
                "CircuitBreakerError"
            ]
        _resync(here)  # publishes what it decided meanwhile
        assert _fleet_up(registry) == 1
        assert heard.states[pybreaker.STATE_OPEN].wait(HANG)
        assert _cause(other) == "CircuitBreakerError"
        lines = [r.getMessage() for r in caplog.records if r.name == "failover.fleet"]
        # Logged once per engine (this one failed several rounds; the other one's thread may
        # have met the stopped Redis too), and once again when it answers.
        assert 1 <= len([m for m in lines if "unreachable" in m]) <= 2
        assert 1 <= len([m for m in lines if "answers again" in m]) <= 2
    finally:
        here.close()
        there.close()


def test_with_the_fleet_stopped_async_calls_answer_live_and_the_loop_never_stalls(
    server: RedisServer, clock: FakeClock
) -> None:
    url = f"{server.url}?prefix={unique_prefix()}"
    engine = _engine(url, clock, fail_max=1)
    answers = Upstream()
    failing = Upstream()
    failing.down = True

    @failover.failover("fleet.answers", engine=engine, breaker=True, policy="never_throw")
    async def quotes(base: str) -> dict[str, float]:
        return answers(base)

    @failover.failover("fleet.fails", engine=engine, breaker=True, policy="never_throw")
    async def broken(base: str) -> dict[str, float]:
        return failing(base)

    async def scenario() -> tuple[list[bool], list[str], float]:
        assert (await quotes.referential("EUR")).up_to_date
        assert engine.fleet is not None
        assert await asyncio.to_thread(engine.fleet.sync)
        lag = [0.0]
        stop = asyncio.Event()

        async def probe() -> None:  # the most the loop was late to wake a sleeper
            while not stop.is_set():
                before = time.monotonic()
                await asyncio.sleep(0.01)
                lag[0] = max(lag[0], time.monotonic() - before - 0.01)

        prober = asyncio.create_task(probe())
        with stopped([_pid(server)]):
            await asyncio.sleep(0)
            calls = [quotes.referential("EUR") for _ in range(50)]
            trips = [broken.referential("EUR") for _ in range(3)]  # a transition to publish
            got = await asyncio.wait_for(asyncio.gather(*calls, *trips), HANG)
            # A round of the fleet's thread, off the loop, meets the stopped Redis.
            synced = await asyncio.to_thread(engine.fleet.sync)
            assert not synced
            more = await asyncio.wait_for(
                asyncio.gather(*[quotes.referential("EUR") for _ in range(20)]), HANG
            )
        stop.set()
        await prober
        live = [r.up_to_date for r in [*got[:50], *more]]
        return live, [type(r.cause).__name__ for r in got[50:]], lag[0]

    try:
        live, causes, lag = asyncio.run(scenario())
        assert live == [True] * 70
        assert causes == ["ConnectionError", "CircuitBreakerError", "CircuitBreakerError"]
        assert lag < 2.0  # a hang guard: a round trip on the loop would stall it
    finally:
        engine.close()


# -- cost ------------------------------------------------------------------------------------


def _commands(client: Any) -> int:
    stats = client.info("commandstats")
    return sum(int(v["calls"]) for v in stats.values())


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_no_round_trip_per_call_in_the_closed_state(
    kind: str, url: str, server: RedisServer, clock: FakeClock
) -> None:
    engine = _engine(url, clock)
    upstream = Upstream()
    rates = _rates(engine, upstream)

    @failover.failover("fleet.async", engine=engine, breaker=True, policy="never_throw")
    async def arates(base: str) -> dict[str, float]:
        return upstream(base)

    client = server.client()
    try:
        calls = 400
        rates("EUR") if kind == "sync" else asyncio.run(arates("EUR"))
        before = _commands(client)
        if kind == "sync":
            for _ in range(calls):
                rates("EUR")
        else:

            async def many() -> None:
                for _ in range(calls):
                    await arates("EUR")

            asyncio.run(many())
        after = _commands(client)
        # The fleet's thread runs a round every half second (a few commands); a round trip per
        # call would be at least one command each.
        assert after - before < calls // 4, after - before
        assert upstream.calls == calls + 1
    finally:
        client.close()
        engine.close()


def test_the_fleets_password_is_never_shown(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="failover.fleet")
    engine = Failover(clock=clock, metrics=False, fleet="redis://:s3cret@127.0.0.1:1/0")
    try:
        assert engine.fleet is not None
        assert not engine.fleet.sync()  # nothing listens on port 1: refused
        assert "s3cret" not in repr(engine.fleet)
        assert "***" in repr(engine.fleet)
        assert caplog.records
        assert not any("s3cret" in r.getMessage() for r in caplog.records)
    finally:
        engine.close()
