"""`CleanupScheduler`: deletes expired entries periodically, on a daemon thread.

Expired entries are never served, but they stay in a durable store until something deletes them.
A scheduler runs one cleanup right away, then one every ``every``, until it is stopped::

    with engine.start_cleanup(every="1h"):
        serve_forever()
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Protocol, Self, runtime_checkable

from .errors import ConfigurationError
from .expiry import parse_ttl
from .metrics import NULL_METRICS, Metrics

__all__ = ["CleanupScheduler"]

log = logging.getLogger(__name__)


def _period(every: timedelta | float | str) -> timedelta:
    try:
        period = parse_ttl(every, "CleanupScheduler", "every")
    except ConfigurationError:
        raise ConfigurationError(
            "CleanupScheduler: every= must be a positive duration of at most a century (seconds, "
            f"a timedelta, or e.g. '30s', '15m', '1h'), got {every!r}"
        ) from None
    # Where a thread cannot wait that long (TIMEOUT_MAX is platform-dependent).
    if period.total_seconds() > threading.TIMEOUT_MAX:  # the thread could not wait that long
        raise ConfigurationError(
            f"CleanupScheduler: every={every!r} is too long "
            f"(at most {int(threading.TIMEOUT_MAX)} seconds)"
        )
    return period


@runtime_checkable
class Cleanable(Protocol):
    """What a scheduler can clean: a `Failover` engine, or anything with ``clean()``."""

    def clean(self) -> int:
        """Run one cleanup; return the count removed."""
        ...


class CleanupScheduler:
    """Runs a cleanup right away, then every ``every``, on a daemon thread, until stopped.

    Cleanups never overlap. For an engine, `Failover.clean` itself holds a lock per engine, so a
    scheduled run, a second scheduler and a call by hand wait for each other. For a plain callable,
    the scheduler's own lock serializes its runs. A run that raises is logged on the ``failover``
    logger and the next one still happens.

    Args:
        engine_or_callable: a `Failover` (anything with a ``clean() -> int`` method), or a
            callable that runs one cleanup and returns the count removed.
        every: the period: a timedelta, seconds, or ``"30s"``/``"15m"``/``"1h"``.
        metrics: receives ``cleanup(removed, seconds)`` after each successful run.
        turn: asked before each scheduled run, with the period in seconds: ``False`` skips
            that period (another instance of the fleet cleans it, `failover.fleet.cleanup`);
            counted in ``skipped``. ``None``: every period runs.

    Raises:
        ConfigurationError: ``every`` is not a positive duration, or the target cannot clean.
    """

    def __init__(
        self,
        engine_or_callable: Cleanable | Callable[[], int],
        every: timedelta | float | str,
        metrics: Metrics | None = None,
        turn: Callable[[float], bool] | None = None,
    ) -> None:
        self.every = _period(every)
        self.turn = turn
        self.skipped = 0  # periods another instance of the fleet cleaned
        if isinstance(engine_or_callable, Cleanable):
            self._clean: Callable[[], int] = engine_or_callable.clean
        elif callable(engine_or_callable):
            self._clean = self._serialized(engine_or_callable)
        else:
            raise ConfigurationError(
                "CleanupScheduler: expected a Failover engine or a callable, "
                f"got {engine_or_callable!r}"
            )
        self.target = engine_or_callable
        self.metrics: Metrics = NULL_METRICS if metrics is None else metrics
        self._state_lock = threading.Lock()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def __repr__(self) -> str:
        return f"CleanupScheduler({self.target!r}, every={self.every}, running={self.running})"

    @staticmethod
    def _serialized(clean: Callable[[], int]) -> Callable[[], int]:
        lock = threading.Lock()

        def run() -> int:
            with lock:
                return clean()

        return run

    @property
    def running(self) -> bool:
        """Whether the scheduler's thread is alive."""
        thread = self._thread
        return thread is not None and thread.is_alive()

    def run_once(self) -> int:
        """Run one cleanup on the calling thread (waiting for one already running).

        Returns:
            The count of entries removed.
        """
        started = time.perf_counter()
        removed = self._clean()
        self.metrics.cleanup(removed, time.perf_counter() - started)
        return removed

    def start(self) -> Self:
        """Start the thread (no-op while it runs; a stopped scheduler starts again).

        Returns:
            The scheduler itself, for ``scheduler = CleanupScheduler(...).start()``.
        """
        with self._state_lock:
            # A thread told to stop ends after its run: it does not count as running any more.
            if self.running and not self._stopping.is_set():
                return self
            # Each thread gets its own event: a thread still finishing a run after a stop() that
            # timed out must not be revived by this start().
            self._stopping = stopping = threading.Event()
            self._thread = threading.Thread(
                target=self._loop, args=(stopping,), name="failover-cleanup", daemon=True
            )
            self._thread.start()
        return self

    def stop(self, timeout: float | None = None) -> bool:
        """Stop the thread: at once while it waits, after the current run while one is running.

        Args:
            timeout: seconds to wait for a run in progress; ``None`` waits until it ends.

        Returns:
            ``True`` when the thread has ended, ``False`` when ``timeout`` passed first.
        """
        with self._state_lock:
            self._stopping.set()
            thread = self._thread
        if thread is None or thread is threading.current_thread():
            return True
        thread.join(timeout)
        return not thread.is_alive()

    def _loop(self, stopping: threading.Event) -> None:
        period = self.every.total_seconds()
        # The first run always happens, even when stop() comes before the thread gets going.
        while True:
            try:
                if self.turn is not None and not self.turn(period):
                    self.skipped += 1
                    log.debug("failover: cleanup skipped: another instance of the fleet runs it")
                    if stopping.wait(period):
                        return
                    continue
                removed = self.run_once()
            except Exception:
                log.exception("failover: cleanup failed; the next run is in %s", self.every)
            else:
                log.debug("failover: cleanup removed %d expired entries", removed)
            # Waiting on the event rather than sleeping lets stop() end the wait at once.
            if stopping.wait(period):
                return

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
