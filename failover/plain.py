"""The plain configuration's success path, decided once per runtime at binding.

Most failovers are plain: the default key, a fixed ``ttl``, no ``store_if``, labels, tags,
store interval, soft timeout, single flight, ``fresh_for`` or ``throttle=``, on an in-process
`InMemoryStore` or behind an async-writes queue (a store that does I/O, by default). For those,
storing a success is a key, a copy of the result and one entry put in the store's table, or
one envelope handed to the queue (`WriteQueue.submit_one`). The shells (``shells.py``) read the
time as a float and call the upstream, and `Plain.live` does the rest in one frame, with no
`Call` (and, on an in-process store, no envelope): a `Call` is made only when the upstream
fails. Any other failover goes the general way (`Call.live`, the
handler chain), and so does a plain one's call that a `failover.disabled` block or conditional
refresh steers (`failover.switches.STEERS`); a `failover.refreshing` block changes nothing for
a plain failover, whose calls all reach the upstream.

On the default clock, the wall clock is read once per `ANCHOR` seconds at most, not per call:
a call's time is its `perf_counter` reading, which the shell makes anyway to time the
upstream, plus the offset between the two clocks measured at the last reading (`Plain.at`).
`time.time` costs about twice a `perf_counter` read, and the call's own work is about a
microsecond, so this is a tenth of the success path. The two clocks advance together (NTP slews
both), so the offset only moves when the wall clock is stepped or the host was suspended; a
call's time is then off by the step for at most `ANCHOR` seconds.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from logging import DEBUG
from time import perf_counter
from time import time as wall_seconds  # the default clock's reading (`engine.clock.seconds`)
from typing import TYPE_CHECKING, Any

from .expiry import FixedTtl
from .handlers.default import DefaultHandler
from .keys import MEMO, make_key, memo_of
from .metrics.tally import FIRST, Tally
from .payload import KIND_OF, PLAIN, Building, ReferentialPayload, enrich
from .recorder import UPSTREAM_FIRST, FailoverStats, dropped
from .stores.backends.memory import InMemoryStore, dated, seconds_of
from .stores.layers.async_write import AsyncWriteStore
from .stores.layers.copying import _IMMUTABLE, CopyingStore, copy_value
from .stores.layers.deadline import DeadlineStore

if TYPE_CHECKING:
    from .core import Runtime

__all__ = ["ANCHOR", "Plain", "plain_path"]

ANCHOR = 0.5
"""How long (seconds of `perf_counter`) a reading of the default clock anchors the plain path's
times (`Plain.at`)."""

_new = object.__new__
_traces = logging.getLogger("failover.health")  # the logs observer's logger, as in recovery


class Plain:
    """What the plain success path of one runtime needs, read once.

    Attributes:
        name: the failover's effective name (its entries' name).
        ttl: the fixed time to live of its entries, in seconds.
        seconds: the engine's clock as seconds since the epoch (`Wiring.seconds`).
        offset, until: a call that began at `perf_counter` reading ``t < until`` began at
            ``t + offset`` on the engine's clock (`at` sets them; ``until`` stays ``-inf`` for
            a clock other than the default, read on every call).
        counted, count: the health recorder's ``live``, and its ``live_at``: while it is the
            one observer of ``live``, a call is counted from its float time, no datetime made
            (`live` does ``live_at``'s common case in its own frame, on ``stats``).
        stats: the failover's health recorder (`FailoverStats`).
        recounted, recount: the same for ``recovered`` (``recovered_at``).
        store: the `InMemoryStore`, whose table, lock and cap `live` uses as its ``put`` does
            (its lock read on each call: a forked child's store has a new one); ``None`` with
            ``queue``.
        queue: the async-writes queue (`WriteQueue`) a success is handed to, as an envelope
            whose times are datetimes, when the store does I/O; ``None`` for an in-process one.
        lasts: ``ttl`` as a `timedelta` (a queued envelope's expiry).
        copies: whether the result is copied before it is kept (a copying layer was in front).
        skip_first: the wrapper's first argument is ``self``/``cls``, not part of the key.
        n: how many arguments the key is made of, when they come positionally.
        memo: the memo of the failover's keys (`failover.keys.memo_of`).
        recovers: the exceptions `recover` answers from the table (``()``: none, when the
            failover has guards, an ``on_recovered`` hook, a predicate or exclusions for
            ``exceptions=``, or batched reads: the general recovery then).
        tally: the Prometheus metrics' `Tally` of the failover when its ``stored`` is the event
            stream's one observer of writes: a metered write within the first bucket is then
            counted in this frame (`Tally.stored`, inlined).
    """

    __slots__ = (
        "copies",
        "count",
        "counted",
        "lasts",
        "memo",
        "n",
        "name",
        "offset",
        "queue",
        "recount",
        "recounted",
        "recovers",
        "seconds",
        "skip_first",
        "stats",
        "store",
        "tally",
        "ttl",
        "until",
    )

    def __init__(
        self,
        name: str,
        ttl: timedelta,
        store: InMemoryStore | AsyncWriteStore,
        copies: bool,
        rt: Runtime,
        stats: FailoverStats,
        seconds: Callable[[], float],
    ) -> None:
        self.name = name
        self.ttl = ttl.total_seconds()
        self.lasts = ttl
        self.seconds = seconds
        self.offset = 0.0
        self.until = -float("inf")
        self.counted: Callable[..., None] = stats.live
        self.count = stats.live_at
        self.stats = stats
        self.recounted: Callable[..., None] = stats.recovered
        self.recount = stats.recovered_at
        self.queue: Any = store._q if isinstance(store, AsyncWriteStore) else None
        self.store: Any = None if self.queue is not None else store
        self.copies = copies
        self.skip_first = rt.binder.skip_first
        self.n = rt.binder.n if rt.binder.simple else -1  # -1: never positional alone
        self.memo = memo_of(name)
        handler: Any = rt.handler
        recovers = rt.recovers  # None: a predicate or exclusions decide (`Call` asks them)
        general = (
            self.queue is not None  # the store's reads: the general recovery's
            or rt.execution is not None
            or rt.throttle is not None
            or rt.definition.on_recovered is not None
            or handler.reads is not None
        )
        self.recovers: tuple[type[BaseException], ...] = (
            () if recovers is None or general else recovers
        )
        stored = rt.events.stored
        tally = getattr(stored, "__self__", None)
        # `stored`'s observers are the stream's for good (no observer wants it at times only)
        self.tally: Any = tally if type(tally) is Tally else None

    def at(self, start: float) -> float:
        """The engine's clock at `perf_counter` reading ``start`` (the shells read ``start +
        offset`` while ``start < until``, and call this past it): the clock read, and on the
        default clock the offset between the two kept for `ANCHOR` seconds. The clock is read
        after ``start``, so the offset errs late by the time between the two reads (well under
        a microsecond), never early."""
        now = self.seconds()
        if self.seconds is wall_seconds:
            self.offset = now - start
            self.until = start + ANCHOR  # set last: a thread reading it finds the offset set
        return now

    def live(  # noqa: PLR0915 - the plain success path in one frame
        self,
        rt: Runtime,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        result: Any,
        at: float,
        seconds: float,
        end: float,
    ) -> None:
        """Store the upstream's ``result`` of the call made ``at`` (seconds since the epoch,
        `seconds`), ``args`` as the wrapper got them, and report the call live (``seconds``: the
        upstream's time, which ended at ``end``). `Call.live` and the handler's store in one
        frame: the key from the memo, the result copied, the entry put in the store's table as
        `InMemoryStore.put` does, its times as floats; store trouble is reported, never raised.
        """
        events = rt.events
        try:
            own = args[1:] if self.skip_first else args
            if kwargs or len(own) != self.n:
                own = rt.binder.values(own, kwargs)
            # `make_key`'s memo, read here for one str or int argument (the commonest)
            key = self.memo.get(own) if len(own) == 1 and type(own[0]) in MEMO else None
            if key is None:
                key = make_key(self.name, own)
            value = result
            if self.copies:
                if type(value) is dict:  # `copy_value` of the commonest result, in this frame
                    value = value.copy()
                    for k, v in value.items():
                        t = type(v)
                        if t in _IMMUTABLE:
                            continue
                        if t is list and _IMMUTABLE.issuperset(map(type, v)):
                            value[k] = v.copy()  # a value replaced, no key added: goes on
                        else:
                            value[k] = copy_value(v)
                elif type(value) not in _IMMUTABLE:
                    value = copy_value(value)
            if (queue := self.queue) is not None:
                # `DefaultHandler.store`'s envelope, its times as datetimes for the store
                as_of = datetime.fromtimestamp(at, UTC)
                obj: Any = _new(Building)
                obj.name = self.name
                obj.key = key
                obj.payload = value
                obj.as_of = as_of
                obj.expire_on = as_of + self.lasts
                obj.up_to_date = True
                obj.cause = None
                obj.label = None
                obj.partial = False
                obj.tags = None
                obj.fresh_ended = False
                obj.__class__ = ReferentialPayload
                queue.submit_one(self.name, key, obj)
                kept = 0  # the queue counts a write a newer one kept out
            else:
                entry = (value, at, at + self.ttl, True, None, None, False, None, False)
                ident = (self.name, key)
                store = self.store
                entries = store._entries
                lock = store._lock
                kept = 0
                lock.acquire()
                try:  # `InMemoryStore.put`, inlined: its frame is a tenth of what is left to cut
                    stored = entries.pop(ident, None)
                    if stored is None:
                        entries[ident] = entry
                        if store.max_entries and len(entries) > store.max_entries:
                            entries.popitem(last=False)
                    elif (old := stored[1]) is not None and at < (
                        old if type(old) is float else seconds_of(old)
                    ):
                        entries[ident] = stored  # the newer one stays
                        kept = 1
                    else:
                        entries[ident] = entry
                finally:
                    lock.release()
            if kept:
                events.superseded(kept)
            elif events.timed:
                took = perf_counter() - end
                if took <= FIRST and (tally := self.tally) is not None:
                    # `Tally.stored`'s common case, inlined: no frame
                    tally.quick += 1.0
                    tally.quick_seconds += took
                else:
                    events.stored(True, took)
        except Exception as exc:
            if events.timed:
                events.stored(False, perf_counter() - end)
            events.trouble("store", exc, "")
        if events.live == self.counted:  # the health recorder alone: counted from the float
            stats = self.stats
            try:  # `FailoverStats.live_at`'s common case, inlined: no frame
                if seconds <= UPSTREAM_FIRST and stats._at <= at < stats._until:
                    stats._ring[stats._slot] += 1
                    stats.calls[0] += 1
                    stats.upstream_ok[0] += 1
                    stats.upstream_ok_sum += seconds
                else:  # another slot, or a slower upstream: its bucket looked up
                    self.count(at, seconds)
            except Exception:
                dropped()
            return
        try:  # another observer wants the call's time as the clock has it
            now: datetime | None = rt.clock()
        except Exception:
            now = None
        events.live(now, seconds)

    def key(self, rt: Runtime, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
        """The call's key (as `live` makes it, inline there)."""
        own = args[1:] if self.skip_first else args
        if kwargs or len(own) != self.n:
            own = rt.binder.values(own, kwargs)
        key = self.memo.get(own) if len(own) == 1 and type(own[0]) in MEMO else None
        return make_key(self.name, own) if key is None else key

    def recover(  # noqa: PLR0915 - the plain recovery in one frame
        self,
        rt: Runtime,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        cause: Exception,
        start: float,
    ) -> ReferentialPayload[Any] | None:
        """The stale answer to the call whose upstream raised ``cause`` (it began at
        ``start``, `perf_counter`): the unexpired entry of its key in the store's table, copied,
        with the facts `Call.recover` would report (``read`` when timed, ``recovered``,
        ``served``). ``None`` when this path cannot say (a cause it does not answer, a miss, an
        expired entry, a read or a copy that fails): the general recovery then decides, reads
        again and reports; nothing was reported here."""
        if not isinstance(cause, self.recovers):
            return None
        events = rt.events
        ended = perf_counter()
        seconds = ended - start
        try:
            ident = (self.name, self.key(rt, args, kwargs))
            began = perf_counter() if events.timed else 0.0
            now = ended + self.offset if ended < self.until else self.at(ended)
            store = self.store
            entries = store._entries
            lock = store._lock
            lock.acquire()
            try:  # `InMemoryStore.find` and the default expiry's check, inlined
                found = entries.get(ident)
                if found is None:
                    return None
                expire_on: Any = found[2]
                if expire_on is not None and now >= (
                    expire_on if type(expire_on) is float else expire_on.timestamp()
                ):
                    return None  # the general recovery drops it
                entries.move_to_end(ident)
                if type(found[1]) is float:
                    found = entries[ident] = dated(found)
            finally:
                lock.release()
            value = found[0]
            if self.copies and type(value) not in _IMMUTABLE:
                value = copy_value(value)
        except Exception:
            return None
        as_of: Any = found[1]  # dated above: a datetime (or None)
        if type(value) is not dict and KIND_OF(type(value)) != PLAIN:
            value = enrich(value, False, as_of)
        made: Any = _new(Building)  # the stale envelope, as `Recovery.settle` makes it
        made.name, made.key = ident
        made.payload = value
        made.as_of = as_of
        made.expire_on = found[2]
        made.up_to_date = False
        made.cause = cause
        made.label = found[5]
        made.partial = found[6]
        made.tags = found[7]
        made.fresh_ended = found[8]
        made.__class__ = ReferentialPayload
        out: ReferentialPayload[Any] = made
        if began:
            events.read("recovered", perf_counter() - began, out)
        if _traces.isEnabledFor(DEBUG):
            _traces.debug("failover %r: the upstream failed", rt.definition.name, exc_info=cause)
        if events.recovered == self.recounted:  # the health recorder alone: from the float
            self.recount(now, seconds, cause, as_of)
        else:
            events.recovered(seconds, cause, as_of)
        events.served(out)
        return out


def plain_path(rt: Runtime, seconds: Callable[[], float]) -> Plain | None:
    """The plain success path of ``rt``, or ``None`` when its failover is not plain;
    ``seconds``: the engine's clock as seconds since the epoch."""
    d = rt.definition
    handler: Any = rt.handler
    if type(handler) is not DefaultHandler or handler.tenant is not None:
        return None
    if handler.store_interval or d.store_interval or type(d.expiry) is not FixedTtl:
        return None
    if d.key is not None or d.label is not None or d.tags is not None or d.store_if is not None:
        return None
    if d.fresh_for is not None or d.refresh_ahead is not None or rt.throttle is not None:
        return None  # something to do before the upstream: the general path's
    if rt.flights is not None or rt.router is not None or rt.may_offload:  # single flight
        return None
    if not rt.bare and rt.guarded is None:  # a soft timeout: its own path
        return None
    store: Any = handler.store_
    copies = type(store) is CopyingStore
    if copies:
        store = store.inner
    if type(store) is DeadlineStore and store._queued:  # writes queued below: no deadline
        store = store.inner
    if type(store) is not AsyncWriteStore and (
        type(store) is not InMemoryStore or (store.copy and not copies)
    ):
        return None
    stats = [o for o in rt.events.observers if isinstance(o, FailoverStats)]
    if not stats:  # pragma: no cover - every engine's stream has its health recorder
        return None
    return Plain(d.effective_name, d.expiry.ttl, store, copies, rt, stats[0], seconds)
