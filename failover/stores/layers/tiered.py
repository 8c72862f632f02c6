"""`TieredStore`: a process-local store in front of a shared one."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import threading
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any, TypeVar

from ...errors import ConfigurationError
from ...expiry import parse_ttl
from ...forks import AfterFork
from ...metrics import Metrics
from ..base import (
    Capabilities,
    FailoverStore,
    Payload,
    delete_many,
    does_io,
    writes_async,
)
from ..browsing import BrowsingLayer
from ..health_rows import HealthRowsLayer
from .async_write import AsyncWriteStore
from .coherent import Coherence, CoherentNear, by_name
from .hedging import HedgingDeadline
from .tiered_async import TieredAsync
from .tiered_control import TieredControl

__all__ = ["TieredStore"]

log = logging.getLogger(__name__)

T = TypeVar("T")


def _fresher(a: Payload | None, b: Payload | None) -> Payload | None:
    """The entry stored last (``a`` on a tie: it is the same write, or as good)."""
    if a is None or b is None:
        return a if b is None else b
    if b.as_of is not None and (a.as_of is None or b.as_of > a.as_of):
        return b
    return a


class TieredStore(
    CoherentNear, TieredControl, TieredAsync, HealthRowsLayer, BrowsingLayer, Capabilities
):
    """A process-local store (``near``) in front of a shared one (``far``, e.g. Redis or
    PostgreSQL).

    Writes go to both: to ``near`` at once, to ``far`` through async writes (an
    `AsyncWriteStore` is put in front of it, unless it writes asynchronously already or does no
    I/O), so a write never waits for the network. Reads ask both and answer with the entry
    stored last (the other instances may have written a fresher one to ``far``), keeping what
    ``far`` had in ``near`` for the next outage. While ``far`` is down, reads answer from
    ``near`` alone (a miss there, with ``far`` down, is a recover error); writes to ``far`` fail
    and are counted by the async-writes layer.

    In an engine with a ``store_timeout``, ``far`` gets a deadline layer of its own (its
    failures counted and shown like any store's, its store breaker skipping it), and a read
    hedges: when ``near`` holds an entry, ``far`` gets ``hedge_after`` to answer, then ``near``
    answers (``far``'s answer, if it comes within the deadline, is kept in ``near`` for later);
    a ``far`` that fails or whose breaker is open leaves ``near`` to answer at once.

    Under an engine with ``fleet=``, the near copies stay coherent across processes: what this
    store writes or deletes is said on the fleet's backplane (``coherence``), and what other
    processes write or delete is dropped from ``near`` (`drop_near`), within about one round
    trip of the fleet's Redis; after the backplane was out, every near copy is dropped.

    Args:
        near: an in-process store (`InMemoryStore`, `CachetoolsStore`), which does no I/O.
        far: the shared store.
        metrics: where the async-writes layer put in front of ``far`` reports its queue, its
            drops and its failures; default: the metrics of the engine the store is given to.
        hedge_after: how long a read waits for ``far`` when ``near`` has an answer: a duration
            (seconds, ``"50ms"``, a timedelta; default 50 ms).

    Raises:
        ConfigurationError: a ``near`` store that does I/O, arguments that are not stores, or a
            ``hedge_after`` that is not a positive duration.
    """

    writes_async = True  # near keeps objects in memory; far's writes are queued

    def __init__(
        self,
        near: FailoverStore,
        far: FailoverStore,
        *,
        metrics: Metrics | None = None,
        hedge_after: timedelta | float | str = 0.05,
    ) -> None:
        for setting, store in (("near", near), ("far", far)):
            if not isinstance(store, FailoverStore):
                raise ConfigurationError(f"TieredStore: {setting} must be a store, got {store!r}")
        self.hedge_after = parse_ttl(hedge_after, "TieredStore", "hedge_after").total_seconds()
        if does_io(near):
            raise ConfigurationError(
                f"TieredStore: near must be an in-process store (one that does no I/O), got "
                f"{near!r}"
            )
        self.near = near
        self.far: FailoverStore = (
            far if writes_async(far) or not does_io(far) else AsyncWriteStore(far, metrics=metrics)
        )
        # Writes to `near` and the refills of `near` from `far` take turns: a refill never
        # replaces an entry written meanwhile by a fresher one, nor brings back one deleted
        # while it was read (`_deletes` counts the deletes).
        self._lock = threading.Lock()
        self._deletes = 0
        self._tasks: set[asyncio.Future[Any]] = set()  # hedged async reads still running
        # The fleet's backplane (`cohere`), told of this store's writes once far has them:
        # `_told` at once after far's own call, or far's queue after each batch; None: none.
        self._told: Coherence | None = None
        _FORKS.add(self)

    def guard_far(
        self, timeout: float, clock: Callable[[], datetime], reset: float, after: int = 3
    ) -> None:
        """Put the engine's store deadline (``timeout`` seconds; its breaker open ``reset``
        seconds on ``clock`` once ``after`` operations in a row were out) in front of ``far``,
        and hedge reads: called by the engine."""
        if does_io(self.far) and not isinstance(self.far, HedgingDeadline):
            self.far = HedgingDeadline(self.far, timeout, clock, open_for=reset, after=after)

    @property
    def _guard(self) -> HedgingDeadline | None:
        far = self.far
        return far if isinstance(far, HedgingDeadline) else None

    def __repr__(self) -> str:
        return f"TieredStore(near={self.near!r}, far={self.far!r})"

    def forked(self) -> None:
        """In a forked child: the parent's hedged reads run on its loops, not the child's (kept,
        they would keep the child's reads off ``far``), and its lock may have been held."""
        self._lock = threading.Lock()
        self._tasks = set()

    @property
    def does_io(self) -> bool:
        """Whether reads do I/O (the far store's)."""
        return does_io(self.far)

    def layers_below(self) -> tuple[FailoverStore, FailoverStore]:
        """Both tiers: `flush` waits for the far one's queue."""
        return self.near, self.far

    def browsed(self) -> FailoverStore:
        """The far store: it holds every entry (the near one, this process's recent ones)."""
        return self.far

    # -- writes -----------------------------------------------------------------------------------

    def store(self, payload: Payload) -> int | None:
        """Store in both tiers (in the far one through its queue); each keeps its newer
        entry. What the far one kept out (the shared store)."""
        with self._lock:
            self.near.store(payload)
        kept = self.far.store(payload)
        if self._told is not None:
            self._told.stored(payload.name, (payload.key,))
        return kept

    def store_many(self, payloads: Sequence[Payload]) -> int | None:
        """Store in both tiers (in the far one through its queue); what the far one kept out."""
        with self._lock:
            self.near.store_many(payloads)
        kept = self.far.store_many(payloads)
        if self._told is not None:
            for name, keys in by_name(payloads).items():
                self._told.stored(name, keys)
        return kept

    def delete(self, name: str, key: str) -> None:
        """Delete from both tiers."""
        with self._lock:
            self._deletes += 1
            self.near.delete(name, key)
        self.far.delete(name, key)
        if self._told is not None:
            self._told.invalidated(name, (key,))

    def delete_many(self, name: str, keys: Iterable[str]) -> None:
        """Delete from both tiers, in one go each."""
        keys = list(keys)
        with self._lock:
            self._deletes += 1
            delete_many(self.near, name, keys)
        delete_many(self.far, name, keys)
        if self._told is not None:
            self._told.invalidated(name, keys)

    # -- reads ------------------------------------------------------------------------------------

    def _from_far(self, read: Callable[[], T], answered: bool, operation: str) -> T | None:
        """``far``'s answer; ``None`` when it fails and ``near`` ``answered`` on its own."""
        try:
            return read()
        except Exception:
            if not answered:
                raise  # nothing to answer with: the engine counts the failure
            log.debug(
                "failover: %s: the far store failed; answering from the near one",
                operation,
                exc_info=True,
            )
            return None

    def _keep(self, found: Iterable[Payload], deletes: int) -> None:
        """Keep entries of ``far`` in ``near``, unless ``near`` has one as fresh meanwhile, or
        a delete came since ``far`` was read (``deletes``: the count then): what ``far`` said
        may be what was deleted."""
        with self._lock:
            if self._deletes != deletes:
                return
            for far in found:
                held = self.near.find(far.name, far.key)
                if _fresher(held, far) is far:
                    if held is not None and held.tags and far.tags is None:
                        # A far store reads no tags back; a key's tags are its arguments',
                        # the same on every write: kept, invalidate_tag still finds it here.
                        far = dataclasses.replace(far, tags=held.tags)  # noqa: PLW2901
                    self.near.store(far)

    def _hedged(
        self,
        guard: HedgingDeadline,
        name: str,
        keys: list[str],
        near: dict[str, Payload],
        deletes: int,
    ) -> dict[str, Payload] | None:
        """``far``'s answer within ``hedge_after``; ``None`` (``near`` answers) when it has
        not answered by then, failed, or is skipped by its breaker."""
        try:
            answered, far = guard.hedged(
                "find_many",
                guard.inner.find_many,
                name,
                keys,
                budget=self.hedge_after,
                late=lambda found: self._merged(near, found, deletes),
            )
        except Exception:
            log.debug("failover: the far store failed; answering from the near one", exc_info=True)
            return None
        return far if answered else None

    def find(self, name: str, key: str) -> Payload | None:
        """The fresher of the two tiers' entries (``near``'s alone while ``far`` fails or is
        slower than ``hedge_after``)."""
        deletes = self._deletes
        near = self.near.find(name, key)
        guard = self._guard
        if near is not None and guard is not None:
            found = self._hedged(guard, name, [key], {key: near}, deletes)
            far = None if found is None else found.get(key)
        else:
            far = self._from_far(lambda: self.far.find(name, key), near is not None, "find")
        best = _fresher(near, far)
        if best is not None and best is not near:
            self._keep((best,), deletes)
        return best

    def find_many(self, name: str, keys: Iterable[str]) -> dict[str, Payload]:
        """Per key, the fresher of the two tiers' entries (``near``'s alone while ``far``
        fails)."""
        keys = list(keys)
        deletes = self._deletes
        near = self.near.find_many(name, keys)
        guard = self._guard
        if near and guard is not None:
            far = self._hedged(guard, name, keys, near, deletes)
        else:
            far = self._from_far(lambda: self.far.find_many(name, keys), bool(near), "find_many")
        return self._merged(near, far, deletes)

    def _merged(
        self, near: dict[str, Payload], far: dict[str, Payload] | None, deletes: int
    ) -> dict[str, Payload]:
        """Per key, the fresher of the tiers' entries; ``far``'s fresher ones kept in ``near``."""
        found = dict(near)
        kept = []
        for key, payload in (far or {}).items():
            if _fresher(near.get(key), payload) is payload:
                found[key] = payload
                kept.append(payload)
        if kept:
            self._keep(kept, deletes)
        return found

    def find_all(self, name: str) -> list[Payload]:
        """Every entry of ``name`` in either tier, the fresher of each key, by key."""
        found = {p.key: p for p in self.near.find_all(name)}
        far = self._from_far(lambda: self.far.find_all(name), bool(found), "find_all")
        for payload in far or ():
            best = _fresher(found.get(payload.key), payload)
            if best is not None:
                found[payload.key] = best
        return [found[key] for key in sorted(found)]

    # -- maintenance ------------------------------------------------------------------------------

    def clean_by_expiry(self, now: datetime) -> int:
        """Remove expired entries from both tiers; return the far store's count (the store of
        record: the near one holds copies of the same entries).

        Raises:
            Exception: the far store's failure, once the near one was cleaned.
        """
        self.near.clean_by_expiry(now)
        return self.far.clean_by_expiry(now)

    def close(self) -> None:
        """Close both tiers (the far one's queue is flushed first).

        Raises:
            Exception: the first failure, once both were closed.
        """
        try:
            self.far.close()
        finally:
            self.near.close()


_FORKS = AfterFork(TieredStore.forked)
