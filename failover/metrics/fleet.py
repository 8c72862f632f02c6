"""What the fleets of the engines on one registry told their streams (observed by
`failover.fleet.observers.FleetMetrics`, never counted on a call's critical section), and the
samples of their families at scrape time."""

from __future__ import annotations

import threading
from typing import Any

from .base import safe

__all__ = ["FleetTally"]


class FleetTally:
    """The fleet's counts: flights per failover name and result, messages per direction,
    resyncs, and scheduled cleanup periods ran or skipped."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # a read then a write, from several threads
        self.active = False  # an engine with a fleet is observed: its counts are exported
        self.flights: dict[tuple[str, str], int] = {}
        self.messages = {"sent": 0, "received": 0}
        self.resyncs = 0
        self.cleanups = {"ran": 0, "skipped": 0}

    @safe
    def flight(self, label: str, result: str) -> None:
        """A flight of the failover labelled ``label``: ``result``."""
        key = (label, result)
        with self._lock:
            self.flights[key] = self.flights.get(key, 0) + 1

    @safe
    def message(self, direction: str, count: int) -> None:
        """``count`` messages ``sent`` or ``received``."""
        with self._lock:
            self.messages[direction] = self.messages.get(direction, 0) + count

    @safe
    def resync(self) -> None:
        """The backplane resynced."""
        with self._lock:
            self.resyncs += 1

    @safe
    def cleanup(self, ran: bool) -> None:
        """A scheduled cleanup period under a fleet."""
        with self._lock:
            self.cleanups["ran" if ran else "skipped"] += 1

    def samples(self, f: dict[str, Any]) -> None:
        """Add the counts to the declared families (none while no fleet is observed)."""
        if not self.active:
            return
        with self._lock:
            flights = dict(self.flights)
            messages = dict(self.messages)
            resyncs = self.resyncs
            cleanups = dict(self.cleanups)
        for labels, n in flights.items():
            f["fleet_flights"].add_metric(labels, n)
        for direction, n in messages.items():
            f["fleet_messages"].add_metric((direction,), n)
        f["fleet_resyncs"].add_metric((), resyncs)
        for result, n in cleanups.items():
            f["cleanups"].add_metric((result,), n)
