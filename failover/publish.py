"""`HealthPublisher`: an engine's health summary, written to the shared store every interval.

``Failover(store=..., publish_health=True)`` (or an interval: ``"15s"``, the default with
``True``) starts one: a daemon thread that writes the engine's `failover.Failover.health` (per
failover: status, calls live, fresh, served stale and not recovered over the health window,
breaker state, last failure) with the process's identity (hostname, pid, a random process id,
when it started, when it published) as one row of the store's health rows
(`failover.stores.health_rows`). The row expires three intervals after it was written, so a
process that dies drops out of the store dashboard (``failover dashboard --store URL``), which
adds the live rows up across the cluster. `failover.Failover.close` stops the thread and
removes the row.

Publishing never touches a business call: it runs on its own thread, through the engine's store
chain (under its ``store_timeout``), and a failure is logged (once with its traceback, then at
most once a minute with a count, every failure at debug level) and retried at the next interval,
or as soon as the store answers again: the publisher observes the engine's stream
(`failover.events`, ``store_state``), so that a process whose row lapsed while the store was out
shows again at once.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import ClassVar, Self

from .errors import ConfigurationError
from .events import Observer
from .expiry import parse_ttl
from .forks import AfterFork
from .health import HealthReport
from .logs import LogLimiter
from .stores.health_rows import FailoverSummary, HealthRows, ProcessHealth, health_rows

__all__ = ["DEFAULT_EVERY", "LIFETIME", "HealthPublisher", "publish_interval"]

log = logging.getLogger("failover.publish")

DEFAULT_EVERY = timedelta(seconds=15)
"""The interval of ``publish_health=True``."""

LIFETIME = 3
"""A row expires this many intervals after it was written: one late publish does not hide a
live process, and a dead one is gone within three."""


def publish_interval(value: object, owner: str = "Failover") -> timedelta | None:
    """The publishing interval of a ``publish_health`` setting; ``None`` when off.

    Raises:
        ConfigurationError: neither a bool nor a positive duration (naming ``owner``).
    """
    if value is None or value is False:
        return None
    if value is True:
        return DEFAULT_EVERY
    refused = ConfigurationError(
        f"{owner}: publish_health must be True, False or an interval (seconds, a timedelta, "
        f"or e.g. '15s', '1m'), got {value!r}"
    )
    if not isinstance(value, timedelta | int | float | str):
        raise refused
    try:
        every = parse_ttl(value, owner, "publish_health")
    except ConfigurationError:
        raise refused from None
    if every.total_seconds() * LIFETIME > threading.TIMEOUT_MAX:
        raise ConfigurationError(f"{owner}: publish_health={value!r} is too long an interval")
    return every


def summary(report: HealthReport) -> dict[str, FailoverSummary]:
    """Each failover's summary in ``report``, by name."""
    return {
        name: FailoverSummary(
            h.status,
            live=h.counts.get("live", 0),
            stale=h.counts.get("recovered", 0),
            not_recovered=h.counts.get("not_recovered", 0),
            fresh=h.counts.get("fresh", 0),
            breaker=h.breaker,
            last_failure=None if h.last_failure is None else h.last_failure.type,
        )
        for name, h in report.failovers.items()
    }


class HealthPublisher(Observer):
    """Writes one engine's health row to its store: now, then every ``every``, until stopped;
    an observer of the engine's stream: a store that answers again after failed publishes is
    published to at once.

    Args:
        store: where the row goes (the engine's store chain, which keeps health rows).
        health: the engine's health report (`failover.Failover.health`).
        clock: the engine's clock: the row's times, and its expiry.
        every: the interval between two publishes.
        owner: the engine, as messages name it.

    Raises:
        ConfigurationError: ``store`` keeps no health rows.
    """

    def __init__(
        self,
        store: object,
        health: Callable[[], HealthReport],
        clock: Callable[[], datetime],
        every: timedelta,
        owner: str = "Failover",
    ) -> None:
        rows = health_rows(store)
        if rows is None:
            raise ConfigurationError(
                f"{owner}: publish_health needs a shared store that keeps health rows "
                "(a SqlStore or a RedisStore, not routed by tenant)"
            )
        self.store: HealthRows = rows
        self.health = health
        self.clock = clock
        self.every = every
        self.owner = owner
        self.started_at = clock()
        self.hostname = socket.gethostname()
        self._identify()
        self.published = threading.Event()
        """Set once the first publish has been tried (tests join on it)."""
        self._failing = False
        self._log = LogLimiter(log, clock)  # once with its traceback, then once a minute
        self._publishing = threading.Lock()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._nudge = threading.Event()  # publish now, not at the end of the interval
        self._thread: threading.Thread | None = None

    safe: ClassVar[bool] = True

    def store_state(self, store: str, up: bool, source: object) -> None:
        """A store answers again: publish now if publishing failed (its row may have lapsed);
        the thread publishes (this runs under the store's lock: it only wakes it)."""
        if up and self._failing:
            self._nudge.set()

    def __repr__(self) -> str:
        return f"HealthPublisher({self.hostname}:{self.pid}, every={self.every})"

    def _identify(self) -> None:
        self.process = uuid.uuid4().hex
        self.pid = os.getpid()

    def row(self) -> ProcessHealth:
        """The row a publish writes now."""
        report = self.health()
        now = self.clock()
        return ProcessHealth(
            process=self.process,
            hostname=self.hostname,
            pid=self.pid,
            started_at=self.started_at,
            published_at=now,
            expire_on=now + self.every * LIFETIME,
            status=report.status,
            window=int(report.window),
            failovers=summary(report),
        )

    def publish(self) -> bool:
        """Write the row now, on the calling thread; never raises.

        Returns:
            Whether the store took it.
        """
        try:
            # One publish at a time (the thread's, one by hand): a row read from the engine
            # earlier never overwrites one read later.
            with self._publishing:
                self.store.publish_health(self.row())
        except Exception:
            self._log.report(
                "publish",
                "%s: publishing the health row failed; retried every %s",
                self.owner,
                self.every,
                exc_info=True,
                what="failures",
            )
            self._failing = True
            return False
        if self._failing:
            log.info("%s: publishing the health row again", self.owner)
            self._failing = False
        return True

    def start(self) -> Self:
        """Start the thread (a no-op while it runs)."""
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                return self
            self._stopping = stopping = threading.Event()
            self._thread = threading.Thread(
                target=self._loop, args=(stopping,), name="failover-publish", daemon=True
            )
            self._thread.start()
        _FORKS.add(self)
        return self

    def stop(self, timeout: float | None = 5.0) -> bool:
        """Stop the thread, then remove the row (left to expire when a publish still runs
        after ``timeout`` seconds, or the store refuses).

        Returns:
            Whether the row was removed.
        """
        with self._lock:
            self._stopping.set()
            self._nudge.set()
            thread, self._thread = self._thread, None
        _FORKS.discard(self)
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
            if thread.is_alive():
                return False
        try:
            self.store.remove_health(self.process)
        except Exception:
            log.debug("%s: removing the health row failed; it expires", self.owner, exc_info=True)
            return False
        return True

    def _loop(self, stopping: threading.Event) -> None:
        seconds = self.every.total_seconds()
        nudge = self._nudge
        while True:
            self.publish()
            self.published.set()
            # Waiting on an event rather than sleeping lets stop() (and a store that answers
            # again) end the wait at once.
            nudge.wait(seconds)
            if stopping.is_set():
                return
            nudge.clear()

    def _forked(self) -> None:
        """In a forked child: the thread did not come along; the child is a process of its
        own, with its own row."""
        self._identify()
        self.started_at = self.clock()
        self.published = threading.Event()
        self._nudge = threading.Event()
        self._thread = None
        self._lock, self._publishing = threading.Lock(), threading.Lock()
        self.start()


# The publishers running now: restarted in a forked child, a process with a row of its own.
_FORKS = AfterFork(HealthPublisher._forked)
