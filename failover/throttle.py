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

import logging
import threading
from datetime import datetime, timedelta
from time import perf_counter
from typing import TYPE_CHECKING, Any

from .errors import Throttled
from .forks import AfterFork
from .handlers import key_of
from .payload import ReferentialPayload

if TYPE_CHECKING:
    from .context import Miss
    from .handlers.lookup import Lookup

# A call (`failover.call.Call`) and its runtime (`failover.core.Runtime`), typed loosely here:
# both modules use this one.
_Call = Any
_Runtime = Any

log = logging.getLogger("failover")

__all__ = [
    "MAX_KEYS",
    "Throttle",
    "mark_throttled",
    "serve_throttled",
    "throttled_read",
    "unthrottle",
]

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


# -- a call's side ---------------------------------------------------------------------------


def _slot(call: _Call) -> Any:
    """The call's key in its failover's throttle: per tenant on a failover routed by tenant, as
    the tables of calls in flight are (`failover.core.Runtime.flight_key`)."""
    rt = call.rt
    key = key_of(call)
    return key if rt.router is None else rt.flight_key(key)


def throttled_read(call: _Call) -> Lookup | None:
    """The read that answers ``call`` stale without calling the upstream, when its key failed
    and was served stale less than ``throttle`` ago; else ``None``."""
    rt = call.rt
    throttle = rt.throttle
    now = call.now
    if throttle is None or now is None:
        return None
    try:
        if not throttle.holds(_slot(call), now):
            return None
        cause = Throttled(
            f"failover {call.definition.name!r}: this key failed and was served stale less "
            f"than {throttle.duration} ago; served stale again, the upstream not called"
        )
        lookup: Lookup = rt.handler.lookup(call, cause)
    except Exception:  # a failing key function: the call's own path meets it
        return None
    lookup.start = perf_counter() if rt.events.timed else 0.0
    return lookup


def serve_throttled(
    call: _Call, lookup: Lookup, found: ReferentialPayload[Any] | Miss
) -> ReferentialPayload[Any] | None:
    """A throttled call's answer: the entry found, stale (refused by the ``throttle`` guard,
    then recovered); ``None`` when none is left to serve (the upstream is called then)."""
    if not isinstance(found, ReferentialPayload):
        return None
    cause = lookup.cause
    assert cause is not None  # a throttled read has its cause
    call.seconds = None  # the upstream was not called
    call.rt.events.refused(Throttled.guard, cause)
    out: ReferentialPayload[Any] | None = call.settle(lookup, found)
    return out


def mark_throttled(call: _Call, throttle: Throttle, found: ReferentialPayload[Any]) -> None:
    """``call`` failed and was served ``found``: its key is throttled."""
    now = call.now
    if now is None:
        return
    try:
        throttle.mark(_slot(call), now, found.expire_on)
    except Exception:  # a failing key function: not throttled, the next call asks again
        log.debug("failover %r: throttling failed", call.definition.name, exc_info=True)


def unthrottle(rt: _Runtime, call: _Call) -> None:
    """``call``'s key is throttled no more: it is refreshed, or its entry deleted."""
    throttle = rt.throttle
    if throttle is not None:
        try:
            throttle.forget(_slot(call))
        except Exception:  # a failing key function: nothing was throttled under it
            log.debug("failover %r: unthrottling failed", rt.definition.name, exc_info=True)
