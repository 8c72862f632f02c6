"""Helpers of the execution-layer tests: upstreams that block until released, bounded waits, and
metrics read back from a real registry's text exposition."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from failover.flight import Flights

WAIT = 5.0  # the most a test waits for something that must happen


class Blocking:
    """A sync upstream: each call says it entered, then blocks until `release` (or raises
    `error` once released, when set). Counts calls and the most inside at once."""

    def __init__(self) -> None:
        self.calls = 0
        self.inside = 0
        self.most = 0
        self.error: Exception | None = None
        self.entered = threading.Semaphore(0)
        self.release = threading.Event()
        self._lock = threading.Lock()

    def __call__(self, value: Any) -> Any:
        with self._lock:
            self.calls += 1
            self.inside += 1
            self.most = max(self.most, self.inside)
        self.entered.release()
        try:
            if not self.release.wait(WAIT):
                raise AssertionError("the test never released the upstream")
            if self.error is not None:
                raise self.error
            return value
        finally:
            with self._lock:
                self.inside -= 1

    def wait_entered(self, n: int = 1) -> None:
        """Wait until ``n`` more calls are inside."""
        for _ in range(n):
            assert self.entered.acquire(timeout=WAIT), "the upstream was never entered"


class ABlocking:
    """`Blocking` for ``async def`` upstreams (one event loop)."""

    def __init__(self) -> None:
        self.calls = 0
        self.inside = 0
        self.most = 0
        self.cancelled = 0
        self.error: Exception | None = None
        self.entered = asyncio.Semaphore(0)
        self.release = asyncio.Event()

    async def __call__(self, value: Any) -> Any:
        self.calls += 1
        self.inside += 1
        self.most = max(self.most, self.inside)
        self.entered.release()
        try:
            await asyncio.wait_for(self.release.wait(), WAIT)
            if self.error is not None:
                raise self.error
            return value
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        finally:
            self.inside -= 1

    async def wait_entered(self, n: int = 1) -> None:
        """Wait until ``n`` more calls are inside."""
        for _ in range(n):
            await asyncio.wait_for(self.entered.acquire(), WAIT)


def until(condition: Callable[[], bool], what: str = "the condition") -> None:
    """Wait (at most `WAIT` seconds) for ``condition``, which another thread makes true."""
    end = time.monotonic() + WAIT
    while not condition():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.001)


async def auntil(condition: Callable[[], bool], what: str = "the condition") -> None:
    """`until` for a condition other tasks make true."""
    end = time.monotonic() + WAIT
    while not condition():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        await asyncio.sleep(0.001)


def metric(registry: CollectorRegistry, name: str, /, **labels: str) -> float | None:
    """One sample of ``registry``'s text exposition, or ``None`` when it is not there."""
    text = generate_latest(registry).decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and sample.labels == labels:
                return float(sample.value)
    return None


class Watched(Flights):
    """A failover's flights (the real ones), counting the calls that lead or follow one, for
    the test to wait on: a condition for threads, an event for tasks."""

    def __init__(self) -> None:
        super().__init__()
        self.leads = 0
        self.follows = 0
        self.changed = threading.Condition()
        self.achanged: asyncio.Event | None = None

    def join(self, key: Any, loop: asyncio.AbstractEventLoop | None) -> Any:
        flight, leads = super().join(key, loop)
        with self.changed:
            if leads:
                self.leads += 1
            else:
                self.follows += 1
            self.changed.notify_all()
        if loop is not None and self.achanged is not None:
            self.achanged.set()  # a task of the loop the test waits on
        return flight, leads

    def _reached(self, leads: int, follows: int) -> bool:
        return self.leads >= leads and self.follows >= follows

    def reach(self, leads: int = 0, follows: int = 0) -> None:
        """Until that many calls (threads) led and followed a flight."""
        with self.changed:
            assert self.changed.wait_for(lambda: self._reached(leads, follows), WAIT), (
                f"leads {self.leads}, follows {self.follows}; waited for {leads}, {follows}"
            )

    async def areach(self, leads: int = 0, follows: int = 0) -> None:
        """`reach` for tasks of the running loop."""
        if self.achanged is None:
            self.achanged = asyncio.Event()
        while not self._reached(leads, follows):
            self.achanged.clear()
            await asyncio.wait_for(self.achanged.wait(), WAIT)


def watch(fn: Any) -> Watched:
    """Count the joins of ``fn``'s flights from now on."""
    rt = fn._failover_state.runtime()
    rt.flights = watched = Watched()
    return watched
