"""Logs an operator can read (`failover.logs.LogLimiter`): each kind of trouble is logged once
with its traceback, then at most once a minute with a count of what was left out; every
occurrence goes to debug. Time is the engine's fake clock: nothing here sleeps."""

from __future__ import annotations

import logging
import threading
from contextlib import suppress

import pytest

import failover
from failover import Failover
from failover.logs import LogLimiter

from .conftest import FakeClock
from .redis_server import RedisServer

THREADS = 64


def warnings(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_kind_is_logged_once_then_once_an_interval_with_a_count(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    logs = LogLimiter(logging.getLogger("failover.test"), clock)
    caplog.set_level(logging.DEBUG, "failover.test")
    for i in range(5):
        try:
            raise ConnectionError(f"down {i}")
        except ConnectionError:
            logs.report("store", "the store failed (%s)", "redis", exc_info=True)
    logs.report("recover", "recovering failed")  # another kind: its own first line
    said = warnings(caplog)
    assert [r.getMessage() for r in said] == ["the store failed (redis)", "recovering failed"]
    assert said[0].exc_info is not None  # the first with its traceback
    debug = [r for r in caplog.records if r.levelno == logging.DEBUG]
    assert len(debug) == 4  # the others went to debug, each with its traceback
    assert all(r.exc_info is not None for r in debug)
    caplog.clear()
    clock.advance(59)
    logs.report("store", "the store failed (%s)", "redis")
    assert warnings(caplog) == []  # still within the minute
    clock.advance(2)
    logs.report("store", "the store failed (%s)", "redis")
    (line,) = warnings(caplog)
    assert line.getMessage() == (
        "the store failed (redis) (5 more like it since the last such line, at debug level)"
    )
    assert line.exc_info is None  # one line, no traceback
    caplog.clear()
    clock.advance(61)
    logs.report("store", "the store failed (%s)", "redis", exc_info=True)
    (line,) = warnings(caplog)
    assert line.getMessage() == "the store failed (redis)"  # a new episode: as a first one


def test_a_line_asked_for_again_is_not_counted_twice(clock: FakeClock) -> None:
    logs = LogLimiter(logging.getLogger("failover.test"), clock)
    assert logs.due("state") == 0
    assert logs.due("state") is None  # left out: counted
    assert logs.due("state", count=False) is None  # asked again: not counted
    clock.advance(60)
    assert logs.due("state", count=False) == 1


def test_a_failing_clock_still_logs(caplog: pytest.LogCaptureFixture) -> None:
    def broken() -> object:
        raise OSError("no time")

    logs = LogLimiter(logging.getLogger("failover.test"), broken)  # type: ignore[arg-type]
    with caplog.at_level(logging.WARNING, "failover.test"):
        assert logs.report("k", "trouble")
    assert [r.getMessage() for r in caplog.records] == ["trouble"]


class Flapping:
    """An upstream that fails every other call, whatever the threads' interleaving."""

    def __init__(self) -> None:
        self.calls = 0
        self.lock = threading.Lock()

    def __call__(self, x: int) -> int:
        with self.lock:
            self.calls += 1
            fails = self.calls % 2 == 0
        if fails:
            raise ConnectionError("flap")
        return x


def _hammer(fn: object, calls: int) -> list[BaseException]:
    errors: list[BaseException] = []
    start = threading.Barrier(THREADS)

    def work() -> None:
        start.wait()
        for i in range(calls):
            try:
                fn(i % 3)  # type: ignore[operator]
            except ConnectionError:
                pass  # nothing usable yet for that key: the upstream's own exception
            except BaseException as exc:  # collected, re-raised on the main thread
                errors.append(exc)
                return

    threads = [threading.Thread(target=work) for _ in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


def test_a_flapping_upstream_under_64_threads_logs_a_handful_of_lines(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    engine = Failover(clock=clock, metrics=False)
    upstream = Flapping()

    @failover.failover("flappy", engine=engine)
    def get(x: int) -> int:
        return upstream(x)

    with caplog.at_level(logging.INFO, "failover"):
        assert _hammer(get, 50) == []
        said = warnings(caplog)
        assert upstream.calls == THREADS * 50
        assert 1 <= len(said) <= 3  # a state line or so, not one per flip
        assert all("'flappy'" in r.getMessage() for r in said)
        caplog.clear()
        clock.advance(61)
        for i in range(4):  # the state, once more, with what was left out
            with suppress(ConnectionError):
                get(i % 3)
        (line,) = warnings(caplog)
    assert "state changes since the last such line" in line.getMessage()
    engine.close()


@pytest.fixture
def redis_gone() -> str:
    """The URL of a redis-server that was started, then stopped: the store refuses."""
    server = RedisServer().start()
    url = server.url
    server.stop()
    return url


def test_a_store_down_logs_no_traceback_per_call(
    redis_gone: str, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    engine = Failover(redis_gone, clock=clock, metrics=False)
    upstream = Flapping()

    @failover.failover("stored", engine=engine)
    def get(x: int) -> int:
        return upstream(x)

    with caplog.at_level(logging.DEBUG, "failover"):
        assert _hammer(get, 20) == []
        # Every queued write tried; they wait for the store (retried), so the flush says False.
        assert not engine.flush(30)
        said = warnings(caplog)
        tracebacks = [r for r in said if r.exc_info]
        # Once per kind of trouble: a failing recovery, a failing queued write (and perhaps a
        # write of one entry), not one per call.
        assert 1 <= len(tracebacks) <= 3
        assert len(said) <= 6
        # How many failures reach debug depends on how the concurrent reads and queued writes
        # were batched (and on the store breaker): each goes there with its traceback, as the
        # limiter's own test above shows with a fake clock.
    engine.close()
