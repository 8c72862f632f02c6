"""The backplane: near copies (a `TieredStore`'s ``near``) kept coherent across the fleet.

When a process stores, invalidates, expires or clears entries, it says so on the fleet's bus
(kind ``"n"``, one item per name and kind: ``[op, tenant, name, keys]``); every other process
drops its near copies of those entries, so that its next read asks the far store. Dropping,
not replacing: a message stays a few bytes whatever the payload, and the next read refills
near from far. A process's own messages are not acted on (its near copy is the one it wrote).

Sending is a queue append (`failover.fleet.bus.Bus.send`): nothing on a call's path waits for
the backplane. Messages are batched by the fleet's thread (everything queued since its last
round goes in one message per `failover.fleet.bus.BATCH` items) and reach the other processes
within one round trip of the fleet's Redis after the write, typically a few milliseconds.

After an outage of the bus (each (re)subscription), every attached store drops all its near
copies: what was published meanwhile was missed, so nothing near is trusted. A backlog past the
bus's bound is sent as one "drop everything" item for the same reason.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

__all__ = ["Backplane", "Coherent"]

log = logging.getLogger("failover.fleet")

# The ops of a message item.
STORED, INVALIDATED, EXPIRED, CLEARED, TAGGED, EVERYTHING = "s", "d", "e", "c", "t", "*"


class Bus(Protocol):
    overflow: dict[str, Any]

    def send(self, kind: str, items: Sequence[Any]) -> None: ...


class Coherent(Protocol):
    """What the backplane drops near copies of (`TieredStore`)."""

    def drop_near(self, name: str, keys: Iterable[str]) -> None: ...

    def drop_near_all(self, name: str | None = None) -> None: ...


class Backplane:
    """One process's side of the backplane on one fleet.

    Args:
        bus: the fleet's bus.
    """

    def __init__(self, bus: Bus) -> None:
        self.bus = bus
        bus.overflow["n"] = [EVERYTHING, None, "", []]
        self._stores: dict[str | None, weakref.WeakSet[Any]] = {}
        self._lock = threading.Lock()
        self.dropped = 0  # near copies dropped on other processes' word, batches applied
        self.resyncs = 0  # times every near copy was dropped after a bus outage
        self.applied = threading.Event()  # set after each batch applied (tests and tools)

    def attach(self, store: Any, tenant: str | None = None) -> None:
        """Keep ``store`` (a `TieredStore`; ``tenant``'s under a router) coherent: what it
        stores or deletes is sent, and what others send is dropped from its near copies."""
        with self._lock:
            self._stores.setdefault(tenant, weakref.WeakSet()).add(store)
        store.cohere(_Scope(self, tenant))

    # -- outgoing: one method per kind of message (none of them waits) -------------------------

    def stored(self, tenant: str | None, name: str, keys: Sequence[str]) -> None:
        """Entries were stored: the others drop their near copies (a newer one is in far)."""
        self.bus.send("n", [[STORED, tenant, name, list(keys)]])

    def invalidated(self, tenant: str | None, name: str, keys: Sequence[str]) -> None:
        """Entries were deleted."""
        self.bus.send("n", [[INVALIDATED, tenant, name, list(keys)]])

    def expired(self, tenant: str | None, name: str, keys: Sequence[str]) -> None:
        """Entries were made to expire (``.expire()``)."""
        self.bus.send("n", [[EXPIRED, tenant, name, list(keys)]])

    def cleared(self, tenant: str | None, name: str | None) -> None:
        """Every entry of ``name`` (``None``: of every name) was deleted (``.invalidate_all()``)."""
        self.bus.send("n", [[CLEARED, tenant, name, []]])

    def tagged(self, tenant: str | None, tags: Sequence[str]) -> None:
        """The entries of ``tags`` were invalidated (``engine.invalidate_tag()``): near copies
        do not know their tags, so the others drop all of theirs."""
        self.bus.send("n", [[TAGGED, tenant, None, list(tags)]])

    # -- incoming ------------------------------------------------------------------------------

    def heard(self, items: list[Any]) -> None:
        """Other processes' items: drop the near copies they name."""
        for item in items:
            if not isinstance(item, list) or len(item) != 4:
                continue
            op, tenant, name, keys = item
            everywhere = op == EVERYTHING
            for store in self._scope(None if everywhere else tenant, everywhere):
                if op in (STORED, INVALIDATED, EXPIRED) and isinstance(keys, list):
                    store.drop_near(name, keys)
                elif op == CLEARED:
                    store.drop_near_all(name)
                else:  # tags, everything, or an op of another version: nothing trusted
                    store.drop_near_all(None)
        self.dropped += 1
        self.applied.set()

    def resync(self) -> None:
        """The bus was out (or is new): every near copy may be stale; drop them all."""
        for store in self._scope(None, True):
            try:
                store.drop_near_all(None)
            except Exception:
                log.warning("fleet: dropping near copies failed", exc_info=True)
        self.resyncs += 1
        self.applied.set()

    def _scope(self, tenant: str | None, everywhere: bool) -> list[Any]:
        with self._lock:
            if everywhere:
                return [s for group in self._stores.values() for s in list(group)]
            return list(self._stores.get(tenant, ()))


class _Scope:
    """A store's link to the backplane: its tenant said on each message."""

    __slots__ = ("backplane", "tenant")

    def __init__(self, backplane: Backplane, tenant: str | None) -> None:
        self.backplane = backplane
        self.tenant = tenant

    def stored(self, name: str, keys: Sequence[str]) -> None:
        self.backplane.stored(self.tenant, name, keys)

    def invalidated(self, name: str, keys: Sequence[str]) -> None:
        self.backplane.invalidated(self.tenant, name, keys)

    def expired(self, name: str, keys: Sequence[str]) -> None:
        self.backplane.expired(self.tenant, name, keys)

    def cleared(self, name: str | None) -> None:
        self.backplane.cleared(self.tenant, name)

    def tagged(self, tags: Sequence[str]) -> None:
        self.backplane.tagged(self.tenant, tags)
