"""The fleet's bus: small batched messages between the processes of a fleet, over Redis pub/sub.

Outgoing, a part of the fleet's round (`Bus.commands`): what the process queued since the last
round (`Bus.send`, which never waits) goes out as one ``PUBLISH`` per batch of at most
`BATCH` items, on the fleet's thread, woken at once by a send. Each message is JSON,
``{"o": sender, "k": {kind: [item, ...]}}``; a message of this process's own is not acted on.
A round that fails keeps its items queued (bounded by `MAX_QUEUED` per kind: past it, a kind's
``overflow`` item takes the place of the oldest, e.g. "drop every near copy").

Incoming, a thread of its own subscribed to the fleet's channel (a subscribed connection
cannot run other commands): it hands each kind's items to that kind's handler. It sends a
``PING`` every `HEARTBEAT` seconds; a pong missing for longer than that plus the socket
timeout twice (a stopped or partitioned Redis says nothing: the subscription alone would
wait for ever) counts as an outage: it reconnects with backoff, and each (re)subscription runs
the resync callbacks, since whatever was published meanwhile was missed. Messages sent and
received, and each resubscription, are told to the engine's stream
(`failover.events.Observer.fleet_messages`, `fleet_resync`).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

__all__ = ["BATCH", "HEARTBEAT", "MAX_QUEUED", "Bus"]

log = logging.getLogger("failover.fleet")

BATCH = 500  # items per message, at most
MAX_QUEUED = 10_000  # items per kind kept while Redis does not answer
HEARTBEAT = 1.0  # seconds between two pings of the subscribed connection
_BACKOFF = (0.05, 0.1, 0.2, 0.5, 1.0)  # seconds between two reconnects


class Link(Protocol):
    """What the bus needs of its fleet."""

    timeout: float
    events: Any  # the engine's stream (`failover.events.Events`)

    def wake(self) -> None: ...

    def subscriber(self) -> Any: ...

    def trouble(self, operation: str, exc: BaseException) -> None: ...


class Bus:
    """One process's side of the fleet's channel.

    Args:
        link: the fleet (its clients, its thread, its trouble).
        channel: the channel's name.
        token: this process's name on its messages.
    """

    def __init__(self, link: Link, channel: str, token: str) -> None:
        self.link = link
        self.channel = channel
        self.token = token
        self.handlers: dict[str, Callable[[list[Any]], None]] = {}
        self.overflow: dict[str, Any] = {}  # kind -> the item that stands for a lost backlog
        self.resyncs: list[Callable[[], None]] = []
        self.sent = 0  # messages published
        self.received = 0  # messages of other processes acted on
        self.resynced = 0  # (re)subscriptions, each followed by the resync callbacks
        self.heartbeat = HEARTBEAT
        self.subscribed = threading.Event()  # set while subscribed (tests and tools)
        self.lost = threading.Event()  # set when the subscription broke (tests and tools)
        self._queued: dict[str, list[Any]] = {}
        self._lock = threading.Lock()  # held for list steps only, never around I/O
        self._closed = False
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    # -- outgoing ------------------------------------------------------------------------------

    def send(self, kind: str, items: Sequence[Any]) -> None:
        """Queue ``items`` of ``kind`` for the next round, and wake the fleet's thread; never
        waits on Redis."""
        with self._lock:
            queued = self._queued.setdefault(kind, [])
            queued.extend(items)
            if len(queued) > MAX_QUEUED:
                self._overflowed(kind, queued)
        self.link.wake()

    def _overflowed(self, kind: str, queued: list[Any]) -> None:
        stand_in = self.overflow.get(kind)
        del queued[: len(queued) - MAX_QUEUED + (stand_in is not None)]
        if stand_in is not None:
            queued.insert(0, stand_in)

    def pending(self) -> int:
        """Items queued, not yet published."""
        with self._lock:
            return sum(len(v) for v in self._queued.values())

    def commands(self, pipe: Any) -> _Round:
        """Put one ``PUBLISH`` per batch on ``pipe`` (a part of the fleet's round)."""
        with self._lock:
            queued, self._queued = self._queued, {}
        messages = []
        for kind, items in queued.items():
            for at in range(0, len(items), BATCH):
                messages.append({kind: items[at : at + BATCH]})
        for body in messages:
            pipe.execute_command("PUBLISH", self.channel, json.dumps({"o": self.token, "k": body}))
        return _Round(self, queued, len(messages))

    def requeue(self, queued: dict[str, list[Any]]) -> None:
        """Items of a round that failed, queued again in front of newer ones."""
        with self._lock:
            for kind, items in queued.items():
                mine = self._queued.setdefault(kind, [])
                mine[:0] = items
                if len(mine) > MAX_QUEUED:
                    self._overflowed(kind, mine)

    # -- incoming ------------------------------------------------------------------------------

    def start(self) -> None:
        """Start the subscriber thread."""
        self._closed = False
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._listen, name="failover-fleet-bus", daemon=True)
        self._thread.start()

    def stop(self, timeout: float | None = None) -> bool:
        """Stop the subscriber thread; return whether it ended in time."""
        self._closed = True
        self._stopping.set()
        thread = self._thread
        if thread is None or thread is threading.current_thread():
            return True
        thread.join(timeout)
        return not thread.is_alive()

    def forked(self) -> None:
        """In a forked child: the parent's queue and thread are not the child's."""
        self._lock = threading.Lock()
        self._queued = {}
        self.subscribed = threading.Event()
        self.lost = threading.Event()
        if not self._closed:
            self.start()

    def _listen(self) -> None:
        failures = 0
        while not self._closed:
            pubsub = None
            try:
                pubsub = self.link.subscriber()
                pubsub.subscribe(self.channel)
                failures = 0
                self._follow(pubsub)
            except Exception as exc:
                if self._closed:
                    break
                self.subscribed.clear()
                self.lost.set()
                self.link.trouble("bus", exc)
                failures += 1
            finally:
                if pubsub is not None:
                    _close(pubsub)
            self._stopping.wait(_BACKOFF[min(failures, len(_BACKOFF) - 1)])
        self.subscribed.clear()

    def _follow(self, pubsub: Any) -> None:
        """Read the subscription until it breaks or the bus closes."""
        heard = pinged = time.monotonic()
        beat = self.heartbeat
        silence = beat + 2 * self.link.timeout
        while not self._closed:
            message = pubsub.get_message(timeout=min(0.2, beat / 2))
            now = time.monotonic()
            if message is not None:
                heard = now
                self._heard(message)
            elif now - heard > silence:
                raise TimeoutError(f"no answer on the fleet's channel for {silence:g}s")
            if now - pinged >= beat:
                pubsub.ping()
                pinged = now

    def _heard(self, message: dict[str, Any]) -> None:
        kind = message.get("type")
        if kind == "subscribe":
            self.resynced += 1
            for resync in self.resyncs:  # what was published while unsubscribed was missed
                try:
                    resync()
                except Exception:
                    log.warning("fleet: a resync failed", exc_info=True)
            if self.resynced > 1:  # subscribed again after an outage (the first is no resync)
                self.link.events.fleet_resync()
            self.subscribed.set()
            return
        if kind != "message":
            return  # a pong: heard
        try:
            body = json.loads(message["data"])
            if body.get("o") == self.token:
                return  # this process's own
            kinds = body.get("k")
            if not isinstance(kinds, dict):
                raise TypeError("no kinds")
        except Exception:
            log.debug("fleet: a message that is not the bus's", exc_info=True)
            return
        self.received += 1
        self.link.events.fleet_messages("received", 1)
        for kind_of, items in kinds.items():
            handler = self.handlers.get(kind_of)
            if handler is None or not isinstance(items, list):
                continue  # a kind another version sends
            try:
                handler(items)
            except Exception:
                log.warning("fleet: handling a %r message failed", kind_of, exc_info=True)


class _Round:
    """One round of the bus on the fleet's pipeline."""

    def __init__(self, bus: Bus, queued: dict[str, list[Any]], count: int) -> None:
        self.bus = bus
        self.queued = queued
        self.count = count

    def replies(self, answers: Sequence[Any]) -> None:
        """Published."""
        self.bus.sent += self.count
        if self.count:
            self.bus.link.events.fleet_messages("sent", self.count)

    def failed(self) -> None:
        """Not published: queued again."""
        self.bus.requeue(self.queued)


def _close(pubsub: Any) -> None:
    try:
        pubsub.close()
    except Exception:
        log.debug("fleet: closing the subscription failed", exc_info=True)
