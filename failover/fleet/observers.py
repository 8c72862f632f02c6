"""The fleet as its facts on the engine's stream tell it (`failover.events`: ``fleet_state``,
``fleet_flight``, ``fleet_messages``, ``fleet_resync``, ``cleanup_turn``, told by
`failover.fleet`): its health (`FleetHealth`, read by ``HealthReport.stores`` and
``failover_store_up{store="fleet"}``), its log lines (`FleetLog`, once per outage) and its
Prometheus counts (`FleetMetrics`). Each records or logs; none waits nor talks to Redis.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections import Counter
from typing import Any, ClassVar

from ..events import Events, Observer
from ..health import StoreHealth
from ..metrics.prometheus import PrometheusMetrics

__all__ = ["FleetHealth", "FleetLog", "FleetMetrics", "fleet_observers"]

log = logging.getLogger("failover.fleet")


class FleetHealth(Observer):
    """Whether the fleet answers, as its ``fleet_state`` facts left it, and its error counts
    (per operation and reason, counted by the fleet as a store's are).

    Args:
        fleet: the engine's `failover.fleet.Fleet`.
        label: its ``store`` label.
    """

    __slots__ = ("__weakref__", "fleet", "label", "up")

    safe: ClassVar[bool] = True

    def __init__(self, fleet: Any, label: str) -> None:
        self.fleet = fleet
        self.label = label
        self.up = True

    def __repr__(self) -> str:
        return f"FleetHealth({self.label!r}, up={self.up})"

    def fleet_state(
        self, up: bool, operation: str, cause: BaseException | None, failures: int
    ) -> None:
        """The fleet went out, or answers again."""
        self.up = up

    @property
    def errors(self) -> Counter[tuple[str, str]]:
        """The fleet's failed operations, by ``(operation, reason)``."""
        found: Counter[tuple[str, str]] = self.fleet.errors
        return found

    def health(self) -> StoreHealth:
        """The fleet's health, as a store's (``HealthReport.stores``)."""
        errors: Counter[str] = Counter()
        for (_, reason), n in list(self.errors.items()):
            errors[reason] += n
        return StoreHealth(self.label, "up" if self.up else "down", dict(errors))


class FleetLog(Observer):
    """The fleet's log lines (logger ``failover.fleet``): one when it goes out (with the
    failure's traceback), one when the first flight of the outage flies per process, one when it
    answers again (with the counts of the outage), and one per resync of the backplane. Never
    per call: a flight is asked of it only while the fleet is out (and counted, not logged).

    Args:
        shown: the fleet, as the lines name it (its URL without a password).
    """

    __slots__ = ("_events", "_local", "_out", "lock", "shown")

    safe: ClassVar[bool] = True

    def __init__(self, shown: str) -> None:
        self.shown = shown
        self.lock = threading.Lock()
        self._out = False  # the fleet is out: flights are counted (the first one logged)
        self._local = 0  # flights flown per process in the outage
        self._events: Events | None = None

    def __repr__(self) -> str:
        return f"FleetLog({self.shown!r})"

    def attach(self, events: Events) -> None:
        """The stream it observes: flights are asked of it only during an outage."""
        self._events = events
        events.resubscribe("fleet_flight")

    def wants(self, fact: str) -> bool:
        """``fleet_flight`` only while the fleet is out."""
        return fact != "fleet_flight" or self._out

    def fleet_state(
        self, up: bool, operation: str, cause: BaseException | None, failures: int
    ) -> None:
        """The fleet went out (a warning with the failure), or answers again."""
        with self.lock:
            local, self._local = self._local, 0
            self._out = not up
            events = self._events
            if events is not None:
                events.resubscribe("fleet_flight")
        with contextlib.suppress(Exception):  # a log line never breaks the fleet
            if not up:
                log.warning(
                    "fleet %s: unreachable (%s, %s); breakers, single flight and cleanups keep "
                    "working in this process alone until it answers",
                    self.shown,
                    operation,
                    type(cause).__name__,
                    exc_info=cause,
                )
            else:
                log.warning(
                    "fleet %s: answers again after %d failed operations (%d flights flew per "
                    "process meanwhile); breaker states re-synced",
                    self.shown,
                    failures,
                    local,
                )

    def fleet_flight(self, name: str, result: str) -> None:
        """A flight while the fleet is out: counted; the first flown per process logged."""
        if result != "local":
            return
        with self.lock:
            self._local += 1
            first = self._local == 1 and self._out
        if first:
            with contextlib.suppress(Exception):
                log.warning(
                    "fleet %s: single_flight='fleet' of %r (and every other) flies per process "
                    "until the fleet answers",
                    self.shown,
                    name,
                )

    def fleet_resync(self) -> None:
        """The backplane subscribed again: near copies dropped."""
        with contextlib.suppress(Exception):
            log.warning(
                "fleet %s: the backplane is back; every near copy was dropped (what was "
                "published meanwhile was missed)",
                self.shown,
            )


class FleetMetrics(Observer):
    """The fleet's counts in the engine's Prometheus metrics (`failover.metrics.fleet`):
    ``failover_fleet_flights_total``, ``failover_fleet_messages_total``,
    ``failover_fleet_resyncs_total`` and ``failover_cleanups_total``.

    Args:
        metrics: the engine's `PrometheusMetrics`.
    """

    __slots__ = ("metrics",)

    safe: ClassVar[bool] = True

    def __init__(self, metrics: PrometheusMetrics) -> None:
        self.metrics = metrics
        metrics.fleet.active = True

    def __repr__(self) -> str:
        return f"FleetMetrics({self.metrics!r})"

    def fleet_flight(self, name: str, result: str) -> None:
        """A flight's step, per failover."""
        self.metrics.fleet_flight(name, result)

    def fleet_messages(self, direction: str, count: int) -> None:
        """Messages sent or received."""
        self.metrics.fleet.message(direction, count)

    def fleet_resync(self) -> None:
        """A resync of the backplane."""
        self.metrics.fleet.resync()

    def cleanup_turn(self, ran: bool) -> None:
        """A scheduled cleanup period: ran or skipped."""
        self.metrics.fleet.cleanup(ran)


def fleet_observers(fleet: Any, health: FleetHealth, metrics: object) -> list[Observer]:
    """The observers of an engine's fleet on its stream: ``health`` (also exported as
    ``failover_store_up{store="fleet"}`` with Prometheus ``metrics``), the logs, the counts."""
    found: list[Observer] = [health, FleetLog(fleet.shown)]
    if isinstance(metrics, PrometheusMetrics):
        from ..store_metrics import StoreMetrics

        StoreMetrics.for_registry(metrics.registry).track_source(health, health.label)
        found.append(FleetMetrics(metrics))
    return found
