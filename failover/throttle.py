"""The fail-safe throttle (``throttle=``): after a failed call of a key was served stale, the
calls of that key are served the same stale entry without calling the upstream, for a while.

The breaker stops calling an upstream for a whole failover once it fails often enough; the
throttle stops calling it for one key at once, from the first failure answered stale (FusionCache's
``FailSafeThrottleDuration``). A throttled call is refused by the ``throttle`` guard
(`failover.errors.Throttled` is its cause) and recovered like any refusal: a stale answer,
counted as such, its reason the guard's. When the entry is gone by then (deleted, evicted), the
call goes to the upstream: there is nothing to serve.

One table per failover and engine, keyed as the tables of calls in flight are (the key, or
``(tenant, key)`` on a failover routed by tenant: `failover.core.Runtime.flight_key`), on the
engine's clock. It holds at most ``max_keys`` keys (10,000 by default): past that, the key marked
longest ago leaves first (it is the first to stop being throttled anyway), and its next call
calls the upstream again, which is where a throttle's absence leads in any case. A forked child
starts with no key throttled.
"""

from __future__ import annotations

import threading
from datetime import datetime, timedelta
from typing import Any

from .forks import AfterFork

__all__ = ["MAX_KEYS", "Throttle"]

MAX_KEYS = 10_000
"""The most keys one failover's throttle holds."""


class Throttle:
    """The keys of one failover served stale within ``duration`` of a failure.

    Args:
        duration: how long a key is throttled after a failure served stale.
        max_keys: the most keys held (the one marked longest ago leaves first).
    """

    __slots__ = ("__weakref__", "duration", "lock", "max_keys", "until")

    def __init__(self, duration: timedelta, max_keys: int = MAX_KEYS) -> None:
        self.duration = duration
        self.max_keys = max_keys
        # slot -> until when it is throttled; the dict's order is the marking order.
        self.until: dict[Any, datetime] = {}
        self.lock = threading.Lock()
        _FORKS.add(self)

    def __repr__(self) -> str:
        return f"Throttle({self.duration}, {len(self.until)} keys)"

    def __len__(self) -> int:
        return len(self.until)

    def holds(self, slot: Any, now: datetime) -> bool:
        """Whether ``slot`` is throttled at ``now`` (a key whose throttle ended is dropped)."""
        until = self.until.get(slot)  # one dict read, no lock: the common answer is "no"
        if until is None:
            return False
        if now < until:
            return True
        with self.lock:
            if self.until.get(slot) == until:  # a newer mark is left alone
                del self.until[slot]
        return False

    def mark(self, slot: Any, now: datetime, expire_on: datetime | None) -> None:
        """``slot`` was served stale at ``now`` after a failure: throttled for ``duration``,
        and never past ``expire_on``, the entry's own end (an expired entry serves nobody)."""
        until = now + self.duration
        if expire_on is not None and expire_on < until:
            until = expire_on
        table = self.until
        with self.lock:
            table.pop(slot, None)
            table[slot] = until  # re-inserted last: the dict's order is the marking order
            if len(table) > self.max_keys:
                del table[next(iter(table))]

    def forget(self, slot: Any) -> None:
        """``slot`` is throttled no more (its entry was deleted, or refreshed)."""
        with self.lock:
            self.until.pop(slot, None)

    def clear(self) -> None:
        """No key is throttled any more."""
        with self.lock:
            self.until.clear()

    def forked(self) -> None:
        """In a forked child: a new lock (another thread may have held it at the fork), and no
        key throttled (the child's calls judge the upstream for themselves)."""
        self.lock = threading.Lock()
        self.until = {}


_FORKS = AfterFork(Throttle.forked)
