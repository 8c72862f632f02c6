"""`TieredStore`: a process-local store in front of a shared one."""

from __future__ import annotations

import logging
import threading
from collections.abc import Awaitable, Callable, Iterable, Sequence
from datetime import datetime
from typing import Any, TypeVar

from ..errors import ConfigurationError
from ..metrics import Metrics
from .async_write import AsyncWriteStore
from .base import (
    Capabilities,
    FailoverStore,
    Payload,
    delete_many,
    does_io,
    native_async,
    writes_async,
)
from .browsing import BrowsingLayer
from .health_rows import HealthRowsLayer

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


class TieredStore(HealthRowsLayer, BrowsingLayer, Capabilities):
    """A process-local store (``near``) in front of a shared one (``far``, e.g. Redis or
    PostgreSQL).

    Writes go to both: to ``near`` at once, to ``far`` through async writes (an
    `AsyncWriteStore` is put in front of it, unless it writes asynchronously already or does no
    I/O), so a write never waits for the network. Reads ask both and answer with the entry
    stored last (the other instances may have written a fresher one to ``far``), keeping what
    ``far`` had in ``near`` for the next outage. While ``far`` is down, reads answer from
    ``near`` alone (a miss there, with ``far`` down, is a recover error); writes to ``far`` fail
    and are counted by the async-writes layer.

    Args:
        near: an in-process store (`InMemoryStore`, `CachetoolsStore`), which does no I/O.
        far: the shared store.
        metrics: where the async-writes layer put in front of ``far`` reports its queue, its
            drops and its failures; default: the metrics of the engine the store is given to.

    Raises:
        ConfigurationError: a ``near`` store that does I/O, or arguments that are not stores.
    """

    writes_async = True  # near keeps objects in memory; far's writes are queued

    def __init__(
        self, near: FailoverStore, far: FailoverStore, *, metrics: Metrics | None = None
    ) -> None:
        for setting, store in (("near", near), ("far", far)):
            if not isinstance(store, FailoverStore):
                raise ConfigurationError(f"TieredStore: {setting} must be a store, got {store!r}")
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

    def __repr__(self) -> str:
        return f"TieredStore(near={self.near!r}, far={self.far!r})"

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

    def store(self, payload: Payload) -> None:
        """Store in both tiers (in the far one through its queue)."""
        with self._lock:
            self.near.store(payload)
        self.far.store(payload)

    def store_many(self, payloads: Sequence[Payload]) -> None:
        """Store in both tiers (in the far one through its queue)."""
        with self._lock:
            self.near.store_many(payloads)
        self.far.store_many(payloads)

    def delete(self, name: str, key: str) -> None:
        """Delete from both tiers."""
        with self._lock:
            self._deletes += 1
            self.near.delete(name, key)
        self.far.delete(name, key)

    def delete_many(self, name: str, keys: Iterable[str]) -> None:
        """Delete from both tiers, in one go each."""
        keys = list(keys)
        with self._lock:
            self._deletes += 1
            delete_many(self.near, name, keys)
        delete_many(self.far, name, keys)

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
            for payload in found:
                if _fresher(self.near.find(payload.name, payload.key), payload) is payload:
                    self.near.store(payload)

    def find(self, name: str, key: str) -> Payload | None:
        """The fresher of the two tiers' entries (``near``'s alone while ``far`` fails)."""
        deletes = self._deletes
        near = self.near.find(name, key)
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

    # -- async: the far store's own reads, awaited (the near one is process memory) -----------

    @property
    def native_async(self) -> bool:
        """Whether the far store has async methods (and the near one does no I/O)."""
        return native_async(self.far) and not does_io(self.near)

    async def _afrom_far(self, read: Awaitable[T], answered: bool, operation: str) -> T | None:
        """`_from_far`, awaited."""
        try:
            return await read
        except Exception:
            if not answered:
                raise
            log.debug(
                "failover: %s: the far store failed; answering from the near one",
                operation,
                exc_info=True,
            )
            return None

    async def afind(self, name: str, key: str) -> Payload | None:
        """`find`, the far store's read awaited."""
        found = await self.afind_many(name, [key])
        return found.get(key)

    async def afind_many(self, name: str, keys: Iterable[str]) -> dict[str, Payload]:
        """`find_many`, the far store's read awaited."""
        keys = list(keys)
        deletes = self._deletes
        near = self.near.find_many(name, keys)
        far_store: Any = self.far
        far = await self._afrom_far(far_store.afind_many(name, keys), bool(near), "find_many")
        return self._merged(near, far, deletes)

    async def astore_many(self, payloads: Sequence[Payload]) -> None:
        """`store_many`: the near store at once, the far one queued: no waiting on I/O."""
        self.store_many(payloads)

    async def aclose(self) -> None:
        """Close the far store's async clients of this loop."""
        if native_async(self.far):
            await self.far.aclose()

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
