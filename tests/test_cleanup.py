"""The cleanup scheduler and `Failover.clean`: periodic, prompt to stop, resilient, never
overlapping, and never losing a live entry to a cleanup racing with writers.

Periodic runs are observed through events set by the cleanup callable itself; nothing sleeps.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest

import failover
from failover import CleanupScheduler, ConfigurationError
from failover.metrics import NullMetrics
from failover.payload import envelope
from failover.stores import FailoverStore, InMemoryStore, make_store

from .conftest import FakeClock

WAIT = 5.0  # an upper bound for events that come within milliseconds; never reached when green


class Counting:
    """A cleanup callable that counts its runs and sets ``reached`` on the ``target``-th."""

    def __init__(self, target: int, fail_first: int = 0) -> None:
        self.runs = 0
        self.target = target
        self.fail_first = fail_first
        self.reached = threading.Event()

    def __call__(self) -> int:
        self.runs += 1
        if self.runs >= self.target:
            self.reached.set()
        if self.runs <= self.fail_first:
            raise RuntimeError(f"cleanup {self.runs} failed")
        return self.runs


class RecordingMetrics(NullMetrics):
    def __init__(self) -> None:
        self.cleanups: list[tuple[int, float]] = []

    def cleanup(self, removed: int, seconds: float) -> None:
        self.cleanups.append((removed, seconds))


def entry(name: str, key: str, as_of: datetime, ttl: timedelta) -> failover.ReferentialPayload[str]:
    return envelope(name, key, f"value of {key}", as_of, as_of + ttl, True)


@pytest.fixture
def scheduler_factory() -> Iterator[Callable[..., CleanupScheduler]]:
    """Makes schedulers and stops every one of them at the end, even when a test fails."""
    made: list[CleanupScheduler] = []

    def make(*args: object, **kwargs: object) -> CleanupScheduler:
        scheduler = CleanupScheduler(*args, **kwargs)  # type: ignore[arg-type]
        made.append(scheduler)
        return scheduler

    yield make
    for scheduler in made:
        scheduler.stop(timeout=WAIT)


# -- periodic runs ---------------------------------------------------------------------------


def test_runs_at_start_then_repeatedly(scheduler_factory: Callable[..., CleanupScheduler]) -> None:
    clean = Counting(target=3)
    scheduler = scheduler_factory(clean, every=0.001).start()
    assert clean.reached.wait(WAIT)
    assert scheduler.running
    assert scheduler.stop(timeout=WAIT)
    assert not scheduler.running


def test_stop_does_not_wait_for_the_period(
    scheduler_factory: Callable[..., CleanupScheduler],
) -> None:
    clean = Counting(target=1)
    scheduler = scheduler_factory(clean, every="1h").start()
    assert clean.reached.wait(WAIT)  # the first run happens at start; the next is an hour away
    assert scheduler.stop(timeout=WAIT)  # False if stop waited for the hour
    assert clean.runs == 1


def test_a_failing_run_is_logged_and_the_next_runs(
    scheduler_factory: Callable[..., CleanupScheduler], caplog: pytest.LogCaptureFixture
) -> None:
    clean = Counting(target=3, fail_first=2)
    with caplog.at_level(logging.ERROR, logger="failover"):
        scheduler = scheduler_factory(clean, every=0.001).start()
        assert clean.reached.wait(WAIT)
        assert scheduler.running
        assert scheduler.stop(timeout=WAIT)
    failures = [r for r in caplog.records if "cleanup failed" in r.getMessage()]
    assert len(failures) == 2
    assert failures[0].exc_info is not None
    assert "cleanup 1 failed" in str(failures[0].exc_info[1])


def test_reports_each_run_to_metrics(engine: failover.Failover, clock: FakeClock) -> None:
    engine.store.store(entry("n", "old", clock(), timedelta(minutes=1)))
    clock.advance(minutes=2)
    metrics = RecordingMetrics()
    scheduler = CleanupScheduler(engine, every="1h", metrics=metrics)
    assert scheduler.run_once() == 1
    assert scheduler.run_once() == 0
    assert [removed for removed, _ in metrics.cleanups] == [1, 0]
    assert all(seconds >= 0 for _, seconds in metrics.cleanups)


# -- the engine's schedulers --------------------------------------------------------------------


def test_engine_schedulers_report_to_the_engine_metrics(clock: FakeClock) -> None:
    metrics = RecordingMetrics()
    with failover.Failover(clock=clock, metrics=metrics) as engine:
        engine.store.store(entry("n", "old", clock(), timedelta(minutes=1)))
        clock.advance(minutes=2)
        assert engine.start_cleanup(every="1h").stop(timeout=WAIT)
    assert [removed for removed, _ in metrics.cleanups] == [1]


def test_start_cleanup_as_a_context_manager(engine: failover.Failover, clock: FakeClock) -> None:
    engine.store.store(entry("n", "old", clock(), timedelta(minutes=1)))
    engine.store.store(entry("n", "new", clock(), timedelta(hours=2)))
    clock.advance(hours=1)
    with engine.start_cleanup(every="1h") as scheduler:
        assert scheduler.running
        assert scheduler.every == timedelta(hours=1)
    assert not scheduler.running
    assert [p.key for p in engine.store.find_all("n")] == ["new"]


def test_close_stops_the_schedulers_it_started(engine: failover.Failover) -> None:
    first = engine.start_cleanup()
    second = engine.start_cleanup(every=timedelta(minutes=5))
    assert first.running
    assert second.running
    engine.close()
    assert not first.running
    assert not second.running
    with pytest.raises(RuntimeError, match="closed engine"):
        engine.start_cleanup()


@pytest.mark.parametrize("every", [0, -1, "0s", "soon", "", True, None, timedelta(0)])
def test_every_must_be_a_positive_duration(engine: failover.Failover, every: object) -> None:
    with pytest.raises(ConfigurationError, match=r"CleanupScheduler: every= must be a positive"):
        engine.start_cleanup(every=every)  # type: ignore[arg-type]


def test_the_target_must_clean() -> None:
    with pytest.raises(ConfigurationError, match="engine or a callable"):
        CleanupScheduler(42, every="1h")  # type: ignore[arg-type]


def test_durations_are_parsed() -> None:
    assert CleanupScheduler(lambda: 0, every="15m").every == timedelta(minutes=15)
    assert CleanupScheduler(lambda: 0, every=90).every == timedelta(seconds=90)


# -- never two at once ----------------------------------------------------------------------------


class Blocking:
    """A cleanup that blocks on ``release``; records how many run at once."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self.active = 0
        self.max_active = 0
        self.runs = 0
        self.lock = threading.Lock()

    def __call__(self) -> int:
        with self.lock:
            self.active += 1
            self.runs += 1
            self.max_active = max(self.max_active, self.active)
        self.entered.set()
        assert self.release.wait(WAIT)
        with self.lock:
            self.active -= 1
        return 0


def _second_trigger(run: Callable[[], object]) -> threading.Thread:
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    # The second run must be held back while the first blocks: still alive after a short join.
    thread.join(timeout=0.05)
    assert thread.is_alive()
    return thread


def test_a_manual_run_waits_for_the_scheduled_one(
    scheduler_factory: Callable[..., CleanupScheduler],
) -> None:
    clean = Blocking()
    scheduler = scheduler_factory(clean, every="1h").start()
    assert clean.entered.wait(WAIT)
    second = _second_trigger(scheduler.run_once)
    clean.release.set()
    second.join(WAIT)
    assert not second.is_alive()
    assert clean.runs == 2
    assert clean.max_active == 1


class BlockingStore(InMemoryStore):
    """A real in-memory store whose cleanup blocks like a long DELETE would."""

    def __init__(self) -> None:
        super().__init__()
        self.blocker = Blocking()

    def clean_by_expiry(self, now: datetime) -> int:
        self.blocker()
        return super().clean_by_expiry(now)


def test_engine_clean_by_hand_waits_for_the_scheduler(clock: FakeClock) -> None:
    store = BlockingStore()
    with failover.Failover(store, clock=clock, metrics=False) as engine:
        scheduler = engine.start_cleanup(every="1h")
        assert store.blocker.entered.wait(WAIT)
        second = _second_trigger(engine.clean)
        store.blocker.release.set()
        second.join(WAIT)
        assert not second.is_alive()
        assert scheduler.stop(timeout=WAIT)
    assert store.blocker.runs == 2
    assert store.blocker.max_active == 1


# -- cleanup racing with writers ---------------------------------------------------------------


# name -> (a fresh raw store, the engine's async_writes)
STORES: dict[str, tuple[Callable[[Path], FailoverStore], bool]] = {
    "memory": (lambda tmp: InMemoryStore(max_entries=0), False),
    "sqlite": (lambda tmp: make_store(f"sqlite:///{tmp / 'cleanup.db'}"), False),
    "sqlite, async writes": (lambda tmp: make_store(f"sqlite:///{tmp / 'cleanup.db'}"), True),
}


@pytest.mark.parametrize("kind", sorted(STORES))
def test_cleanup_racing_with_writers_loses_no_live_entry(
    kind: str, clock: FakeClock, tmp_path: Path
) -> None:
    writers, per_writer = 4, 150
    make, async_writes = STORES[kind]
    # A generous store deadline: writers and a cleaner race on one file, and a loaded host's
    # write or read past the default 0.5 s would lose a live entry to the deadline, not the race.
    with failover.Failover(
        make(tmp_path), clock=clock, metrics=False, async_writes=async_writes, store_timeout=WAIT
    ) as engine:
        start = threading.Barrier(writers + 1)
        written = threading.Event()
        live: set[str] = set()

        def write(w: int) -> None:
            start.wait(WAIT)
            for i in range(per_writer):
                key = f"w{w}-{i}"
                # Half the entries are written already expired, half live for an hour.
                ttl = timedelta(hours=1) if i % 2 else -timedelta(seconds=1)
                engine.store.store(entry("race", key, clock(), ttl))

        for w in range(writers):
            live.update(f"w{w}-{i}" for i in range(1, per_writer, 2))
        threads = [threading.Thread(target=write, args=(w,)) for w in range(writers)]
        for thread in threads:
            thread.start()

        cleanups = 0

        def clean_until_written() -> None:
            nonlocal cleanups
            start.wait(WAIT)
            while not written.is_set():
                engine.clean()
                cleanups += 1

        cleaner = threading.Thread(target=clean_until_written)
        cleaner.start()
        for thread in threads:
            thread.join(WAIT * 4)
        written.set()
        cleaner.join(WAIT)
        assert cleanups >= 1
        engine.clean()  # what the racing cleanups left: only entries written after their last run

        remaining = {p.key for p in engine.store.find_all("race")}
    assert remaining == live


def test_start_after_a_stop_that_timed_out_keeps_the_scheduler_running(
    scheduler_factory: Callable[..., CleanupScheduler],
) -> None:
    clean = Blocking()
    scheduler = scheduler_factory(clean, every="1h").start()
    assert clean.entered.wait(WAIT)
    old = scheduler._thread
    assert old is not None
    assert scheduler.stop(timeout=0) is False  # the run in progress goes on
    scheduler.start()  # must not count on the old thread, which ends after its run
    clean.release.set()
    old.join(WAIT)
    assert not old.is_alive()
    assert scheduler.running


def test_close_waits_for_a_cleanup_run_by_hand(clock: FakeClock) -> None:
    store = BlockingStore()
    engine = failover.Failover(store, clock=clock, metrics=False)
    cleaner = threading.Thread(target=engine.clean)
    cleaner.start()
    assert store.blocker.entered.wait(WAIT)
    try:
        closer = _second_trigger(engine.close)  # the store is not closed under the cleanup
    finally:
        store.blocker.release.set()
        cleaner.join(WAIT)
    closer.join(WAIT)
    assert not closer.is_alive()


def test_a_period_longer_than_a_thread_can_wait_is_refused() -> None:
    with pytest.raises(ConfigurationError, match=r"CleanupScheduler: every= .*at most a century"):
        CleanupScheduler(lambda: 0, every=1e10)
