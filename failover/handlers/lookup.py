"""`Lookup`: what recovering (or peeking at) one call reads, as data.

The handler chain does no I/O of its own on recovery. A layer says which entries a call needs
(`Handler.lookup`) and makes the caller's answer of what was found (`Handler.recovered`); the
lookup performs the read between the two: in place for a thread (`read`), or without blocking
the event loop for a task (`aread`: the reads of one loop turn share one ``find_many``, made
with the store's own async methods when it has them, else on a worker thread). A thread's
recovery asks the chain for the lookup and its read in one (`Handler.recover`), which the
default layer makes without a frame here. This is the one place where recovering differs
between sync and async callers.

Writes an answer calls for (an expired entry dropped, a key-type check) are chores
(`Lookup.chore`): done at once in place, or on a worker thread after an async read. A chore
that fails costs the answer nothing (it is kept in `Lookup.chore_error`, for the core to log).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Protocol

from ..context import CallContext, Miss
from ..payload import envelope
from ..stores.base import FailoverStore, Payload
from ..stores.layers.batching import ReadBatcher, pinned_call

__all__ = ["Finisher", "Lookup", "failed_lookup", "lookup_of", "stale"]

_new = object.__new__


class Finisher(Protocol):
    """The layer that makes a call's answer of what its lookup found."""

    def recovered(self, lookup: Lookup, found: Any) -> Payload | Miss:
        """The answer: an envelope (stale, unless the layer says otherwise) or why none."""
        ...


class Lookup:
    """The entries one call's recovery reads: ``keys`` of ``name`` in ``tenant``'s store (a
    point read when ``keys`` is a key, ``find_many`` for a list, every entry of the name for
    ``None``), and the layer that finishes the answer.

    Attributes:
        ctx: the call.
        cause: what the upstream raised (``None`` for a peek).
        report: whether trouble is reported (a peek reports none: no partial-recovery warning).
        error: what the read raised, if it failed (`read`/`aread` then answer `Miss.ERROR`).
        chore_error: what a chore raised, if one failed (the answer stands).
    """

    __slots__ = (
        "cause",
        "chore_error",
        "chores",
        "ctx",
        "error",
        "finisher",
        "keys",
        "name",
        "plan",
        "reads",
        "report",
        "start",
        "store",
        "tenant",
    )

    ctx: CallContext
    cause: Exception | None
    finisher: Finisher
    name: str
    keys: str | list[str] | None
    store: FailoverStore | None  # None: a failed lookup
    reads: ReadBatcher | None
    tenant: str | None
    report: bool
    chores: list[tuple[Callable[..., Any], tuple[Any, ...]]] | None
    error: Exception | None
    chore_error: Exception | None
    plan: Any  # what the finishing layer keeps between its two steps
    start: float

    def found(self) -> Any:
        """What the store holds of the keys, read in place: an entry or ``None`` (a point
        read), else a dict by key."""
        if self.error is not None:  # the lookup itself failed (a key= callable, a splitter)
            raise self.error
        keys, name, store = self.keys, self.name, self.store
        assert store is not None  # only a failed lookup has none, and it raised above
        if isinstance(keys, str):
            reads = self.reads
            if reads is None:
                return store.find(name, keys)
            return reads.find(name, keys, self.tenant)
        if keys is None:
            return {p.key: p for p in store.find_all(name)}
        return store.find_many(name, keys) if keys else {}

    def answer(self) -> Payload | Miss:
        """The call's answer, read in place; raises what the read or the layer raised."""
        found = self.found()
        return self.finisher.recovered(self, found)

    def peek(self) -> Payload | None:
        """The stored, unexpired envelope (marked stale), or ``None``: `answer` for a peek."""
        found = self.answer()
        return None if isinstance(found, Miss) else stale(found)

    def read(self) -> Payload | Miss:
        """`answer`, with a failing read a `Miss.ERROR` (kept in `error`)."""
        try:
            found = self.found()  # first: a failed lookup raises here
            return self.finisher.recovered(self, found)
        except Exception as exc:
            self.error = exc
            return Miss.ERROR

    async def aread(self) -> Payload | Miss:
        """`read` for a task: never blocks the event loop."""
        reads = self.reads
        if reads is None:  # no I/O (or nothing to read: a failed lookup): read in place
            return self.read()
        keys = self.keys
        self.chores = []  # done after the answer, on a worker thread
        try:
            if isinstance(keys, str):
                found: Any = await reads.afind(self.name, keys, self.tenant)
            elif keys is None:  # every entry of the name: one find_all, on a worker
                found = await asyncio.to_thread(pinned_call, self.tenant, self.found)
            else:
                found = await reads.afind_many(self.name, keys, self.tenant) if keys else {}
            answer = self.finisher.recovered(self, found)
            if self.chores:
                await asyncio.to_thread(pinned_call, self.tenant, self._chores)
        except Exception as exc:
            self.error = exc
            return Miss.ERROR
        return answer

    def chore(self, fn: Callable[..., Any], *args: Any) -> None:
        """A write the answer calls for: done now, or (after an async read) on a worker."""
        if self.chores is None:
            self._done(fn, args)
        else:
            self.chores.append((fn, args))

    def _chores(self) -> None:
        for fn, args in self.chores or ():
            self._done(fn, args)

    def _done(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
        """``fn(*args)``; a failure is kept, not raised: housekeeping never costs the answer
        (a read-only store that cannot drop an expired slice still serves the others)."""
        try:
            fn(*args)
        except Exception as exc:
            self.chore_error = exc


def lookup_of(
    finisher: Finisher,
    ctx: CallContext,
    cause: Exception | None,
    keys: str | list[str] | None,
    store: FailoverStore | None,
    reads: ReadBatcher | None,
    tenant: str | None,
    report: bool,
) -> Lookup:
    """A `Lookup` (field by field: it is made on every recovery)."""
    lookup: Lookup = _new(Lookup)
    lookup.finisher = finisher
    lookup.ctx = ctx
    lookup.cause = cause
    lookup.name = ctx.definition.effective_name
    lookup.keys = keys
    lookup.store = store
    lookup.reads = reads
    lookup.tenant = tenant
    lookup.report = report
    lookup.chores = None
    lookup.error = None
    lookup.chore_error = None
    lookup.plan = None
    return lookup


def failed_lookup(ctx: CallContext, cause: Exception, error: Exception) -> Lookup:
    """The lookup of a call whose keys could not be had: it reads nothing and answers
    `Miss.ERROR` (its `error` is ``error``)."""
    lookup = lookup_of(_Nothing(), ctx, cause, None, None, None, None, True)
    lookup.error = error
    return lookup


class _Nothing:
    """The finisher of a failed lookup, which never reads."""

    def recovered(self, lookup: Lookup, found: Any) -> Payload | Miss:
        return Miss.ERROR


def stale(found: Payload, cause: BaseException | None = None) -> Payload:
    """``found`` as recovered from ``cause``: marked not up to date (an entry read as it was
    stored is wrapped again; one a layer made stale already, with its cause, is left as it is)."""
    f = found
    if not f.up_to_date:
        return f
    return envelope(
        f.name, f.key, f.payload, f.as_of, f.expire_on, False, cause, f.label, f.partial
    )
