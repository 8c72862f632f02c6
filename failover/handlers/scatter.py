"""Scatter / gather: a collection result stored and recovered per entity (slice).

Only failovers with a ``splitter=`` get this layer (the chain is chosen per failover), so the
others pay nothing for it; for a failover without one it passes every call through.

With a splitter: a live result is split (``split_on_store``) and its slices written in one
``store_many``; a failed call's slices (``split_on_recover``) are read in one ``find_many``,
expired ones dropped, and the rest merged (``merge``). A call that recovers every slice
(``recover_all=True``, or no arguments) reads them with one ``find_all``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from datetime import datetime
from typing import Any

from ..adaptive import AdaptiveTtl, FreshSince
from ..context import CallContext, Miss, RecoverContext
from ..definition import FailoverDefinition
from ..entries import EntryControl
from ..errors import SplitterError
from ..expiry import FixedTtl
from ..labels import slice_label
from ..payload import KIND_OF, PLAIN, Building, ReferentialPayload, enrich, envelope
from ..scatter import CallArguments, Narrowing, StoreContext, slice_context
from ..scatter.contexts import SLICE_ARGUMENT, slice_contexts
from ..scatter.splitters import EntitySplitter, ListSplitter
from ..stores.base import Payload, delete_many
from ..tags import tags_of
from .base import (
    Partial,
    Superseded,
    drop_all_expired,
    entity_keys,
    envelope_key,
    expire_on,
    slice_key,
    slice_keys,
)
from .default import DefaultHandler
from .lookup import Lookup, lookup_of
from .mistyped import KeyTypes

__all__ = ["ScatterGatherHandler"]

log = logging.getLogger("failover")
_new = object.__new__


def _failed(definition: FailoverDefinition, operation: str, exc: Exception) -> SplitterError:
    return SplitterError(
        f"failover {definition.name!r}: {operation} of splitter {definition.splitter!r} "
        f"raised {exc!r}"
    )


class Asked:
    """The slices a call asks for, in request order (a key asked twice, twice): each one's
    stored key, and its context (`RecoverContext`), made when first read: a `ListSplitter`'s
    recovery merges the values found by key and never reads them.

    Args:
        keys: each slice's stored key.
        contexts: each slice's context, or ``None``: made from ``entities`` on first read.
        whole: the call's context.
        entities: a built-in splitter's entity keys (`EntitySplitter.requested`), or ``None``.
    """

    __slots__ = ("_contexts", "_entities", "keys", "whole")

    def __init__(
        self,
        keys: list[str],
        contexts: list[RecoverContext[Any]] | None,
        whole: RecoverContext[Any],
        entities: list[Any] | None = None,
    ) -> None:
        self.keys = keys
        self._contexts = contexts
        self.whole = whole
        self._entities = entities

    @property
    def contexts(self) -> list[RecoverContext[Any]]:
        """Each slice's context, in request order.

        Raises:
            SplitterError: the splitter raised.
        """
        if self._contexts is None:
            d, splitter = self.whole.definition, self.whole.definition.splitter
            assert isinstance(splitter, EntitySplitter)  # made with entities by one
            assert self._entities is not None
            try:
                self._contexts = splitter.slices_of(self.whole, self._entities)
            except Exception as exc:
                raise _failed(d, "split_on_recover", exc) from exc
        return self._contexts


class ScatterGatherHandler:
    """Splits a live result into slices on store and merges the slices found on recover.

    Args:
        inner: the default handler: failovers without a splitter go there; slices use its
            store chain, clock and write coalescing.

    A partial recovery is marked on its envelope (``partial``); the event stream's observers
    count it (`failover.metrics_observer.MetricsObserver`).
    """

    def __init__(self, inner: DefaultHandler) -> None:
        self.inner = inner
        self.store_ = inner.store_
        self.clock = inner.clock
        self.key_types = KeyTypes()

    def __repr__(self) -> str:
        return f"ScatterGatherHandler({self.inner!r})"

    # -- store ------------------------------------------------------------------------------

    def store(self, ctx: CallContext, result: Any) -> Superseded | None:
        """Store each slice of the live result, in one batch; ``None``, or the slices a newer
        stored entry kept out.

        Raises:
            SplitterError: the splitter raised (the core logs and counts it as a failed store;
                the live result still returns).
        """
        d = ctx.definition
        splitter = d.splitter
        if splitter is None:
            return self.inner.store(ctx, result)
        now = ctx.now
        if now is None:
            ctx.now = now = self.clock()
        if self.inner.coalesced(ctx, now):
            return None
        name, expires = d.effective_name, expire_on(d, now)
        try:
            try:
                slices = splitter.split_on_store(
                    StoreContext(d, CallArguments(ctx.arguments, ctx.args, ctx.kwargs), result)
                )
                labelled = d.label is not None
                # Every slice carries the whole call's tags (a tag reaches each slice).
                tags = None if d.tags is None else tags_of(ctx)
                adaptive = d.expiry if type(d.expiry) is AdaptiveTtl else None
                payloads = []
                for s in slices:
                    key = slice_key(d, s.arguments)
                    ends = expires
                    if adaptive is not None:  # per slice: its own payload, its own key
                        own = tuple(s.arguments.values())
                        ends = adaptive.expiry_of(now, s.payload, own, {}, key)
                    label = slice_label(d, s.arguments) if labelled else None
                    payloads.append(
                        envelope(name, key, s.payload, now, ends, True, label=label, tags=tags)
                    )
            except Exception as exc:
                raise _failed(d, "split_on_store", exc) from exc
            kept = self.store_.store_many(payloads) if payloads else None
        except BaseException:  # nothing stored: the next success tries again
            self.inner.uncoalesce(ctx, now)
            raise
        return None if not kept else Superseded(kept, len(payloads))

    # -- recover ----------------------------------------------------------------------------

    def lookup(self, ctx: CallContext, cause: Exception | None, report: bool = True) -> Lookup:
        """The call's slices to read (one ``find_many``), or every slice of the name (one
        ``find_all``: ``recover_all=True``, or a call without arguments).

        Raises:
            SplitterError: the splitter raised (the core treats it as a recover error).
        """
        d, inner = ctx.definition, self.inner
        if d.splitter is None:
            return inner.lookup(ctx, cause, report)
        whole = _whole(ctx, cause)
        requested = None if _everything(ctx) else self._requested(d, whole)
        keys = None if requested is None else _distinct(requested)
        tenant = inner.current_tenant()
        lookup = lookup_of(self, ctx, cause, keys, self.store_, inner.reads, tenant, report)
        lookup.plan = whole, requested
        return lookup

    def recover(self, ctx: CallContext, cause: Exception) -> tuple[Lookup, Payload | Miss]:
        """`lookup` and its read, in place (a thread's recovery).

        Raises:
            SplitterError: the splitter raised (the core treats it as a recover error).
        """
        if ctx.definition.splitter is None:
            return self.inner.recover(ctx, cause)
        lookup = self.lookup(ctx, cause)
        return lookup, lookup.read()

    def recovered(self, lookup: Lookup, found: dict[str, Payload]) -> Payload | Miss:
        """The merged slices found, stale, or why there are none; expired slices are dropped.

        Raises:
            SplitterError: the splitter raised (the core treats it as a recover error).
        """
        ctx, d = lookup.ctx, lookup.ctx.definition
        whole, requested = lookup.plan
        if not found and requested and requested.keys and lookup.report:
            lookup.chore(self.key_types.check, self.store_, d, requested.contexts)
        expired = self._expired(d, found)
        if expired:
            lookup.chore(drop_all_expired, self.store_, d.effective_name, expired)
        return self._merged(
            ctx, lookup.cause, lookup.report, whole, requested, found, bool(expired)
        )

    def fresh(self, ctx: CallContext, since: datetime | FreshSince) -> Payload | Partial | None:
        """The merged slices when every slice the call asks for was stored after ``since``;
        when only some were, and the splitter can narrow the call (`EntitySplitter.narrowed`),
        the `Partial` call for the others; else ``None`` (the upstream is asked for them all).
        """
        d = ctx.definition
        if d.splitter is None:
            return self.inner.fresh(ctx, since)
        if _everything(ctx):
            return None  # "every slice there is": the store cannot say none is missing
        if _one_shot(ctx):
            return None  # reading its keys would consume what the upstream is to be given
        requested = self._requested(d, _whole(ctx, None))
        if not requested.keys:
            return None
        found = self.store_.find_many(d.effective_name, _distinct(requested))
        self._expired(d, found)  # a custom expiry may end an entry before fresh_for
        if isinstance(since, FreshSince):  # fresh_for is a callable: each slice's window
            asked = dict(zip(requested.keys, requested.contexts, strict=True))
            fresh = {
                k: p
                for k, p in found.items()
                if p.as_of is not None
                and not p.fresh_ended
                and p.as_of > since(p.payload, _slice_args(asked[k]), {})
            }
        else:
            fresh = {
                k: p
                for k, p in found.items()
                if p.as_of is not None and p.as_of > since and not p.fresh_ended
            }
        if not fresh:
            return None
        missing = {  # each key once
            key: asked
            for key, asked in zip(requested.keys, requested.contexts, strict=True)
            if key not in fresh
        }
        if not missing:
            whole = _whole(ctx, None)
            merged = self._merged(ctx, None, False, whole, requested, fresh, False, True)
            return None if isinstance(merged, Miss) else merged
        if not isinstance(d.splitter, Narrowing):  # an optional splitter method
            return None
        keys = [asked.arguments.get(SLICE_ARGUMENT) for asked in missing.values()]
        narrowed = d.splitter.narrowed(ctx.args, ctx.kwargs, keys)
        if narrowed is None:
            return None

        def merge(result: Any) -> Payload:
            return self._with_live(ctx, requested, fresh, result)

        return Partial(narrowed[0], narrowed[1], merge)

    def _with_live(
        self,
        ctx: CallContext,
        requested: Asked,
        fresh: dict[str, Payload],
        result: Any,
    ) -> Payload:
        """The caller's value of a `Partial` call: its fresh slices and the upstream's
        ``result`` for the others, merged in request order. A ``result`` the splitter cannot
        split comes back as it is, as the live result of any call (its store logged why)."""
        d, now = ctx.definition, ctx.now
        expires = None if now is None else expire_on(d, now)
        try:
            slices = d.splitter.split_on_store(
                StoreContext(d, CallArguments(ctx.arguments, ctx.args, ctx.kwargs), result)
            )
        except Exception:  # the store met the same error: logged and counted there
            return envelope(d.effective_name, envelope_key(ctx), result, now, expires, True)
        found = dict(fresh)
        for s in slices:  # what was just stored: a live item over a fresh one, the last of a key
            key = slice_key(d, s.arguments)
            found[key] = envelope(d.effective_name, key, s.payload, now, expires, True)
        merged = self._merged(ctx, None, False, _whole(ctx, None), requested, found, False, True)
        if isinstance(merged, Miss):  # the upstream answered with none of them either
            return envelope(d.effective_name, envelope_key(ctx), result, now, expires, True)
        return merged

    def invalidate(self, ctx: CallContext) -> None:
        """Delete the slices the call would recover (every slice of the effective name for a
        call that recovers them all); the call's next success is stored, whatever the
        store interval."""
        d = ctx.definition
        if d.splitter is None:
            self.inner.invalidate(ctx)
            return
        store, name = self.store_, d.effective_name
        if _everything(ctx):
            keys = [p.key for p in store.find_all(name)]
        else:
            keys = _distinct(self._requested(d, _whole(ctx, None)))
        delete_many(store, name, keys)  # one statement (round trip) for every slice
        # Coalescing goes by the whole call: any call covering these slices (not only this one)
        # must store at its next success, or they stay unrecoverable for the interval.
        self.inner.forget_all()

    def expire(self, ctx: CallContext, control: EntryControl) -> int:
        """End the fresh window of every slice the call would recover (every slice of the
        effective name for a call that recovers them all)."""
        d = ctx.definition
        if d.splitter is None:
            return self.inner.expire(ctx, control)
        name = d.effective_name
        if _everything(ctx):
            keys = [p.key for p in self.store_.find_all(name)]
        else:
            keys = _distinct(self._requested(d, _whole(ctx, None)))
        found = control.expire(name, keys)
        self.inner.forget_all()  # coalescing goes by the whole call (see `invalidate`)
        return found

    def invalidate_all(self, name: str, control: EntryControl) -> int:
        """Delete every entry (every slice) of ``name``."""
        return self.inner.invalidate_all(name, control)

    def _requested(self, d: FailoverDefinition, whole: RecoverContext[Any]) -> Asked:
        """The slices a call asks for: their keys now, their contexts when first read."""
        splitter = d.splitter
        try:
            if (
                isinstance(splitter, EntitySplitter)
                and type(splitter).split_on_recover is EntitySplitter.split_on_recover
            ):
                entities = splitter.requested(whole)  # the keys without a context per slice
                return Asked(entity_keys(d, entities), None, whole, entities)
            slices = splitter.split_on_recover(whole)
            return Asked(slice_keys(d, slices), slices, whole)
        except Exception as exc:
            raise _failed(d, "split_on_recover", exc) from exc

    def _expired(self, d: FailoverDefinition, found: dict[str, Payload]) -> list[Payload]:
        """The expired entries among ``found``, taken out of it."""
        now, expiry = self.clock(), d.expiry
        if type(expiry) is FixedTtl:  # the default policy's rule, without a frame per slice
            expired = [p for p in found.values() if p.expire_on is not None and now >= p.expire_on]
        else:
            is_expired = expiry.is_expired
            expired = [p for p in found.values() if is_expired(p, now)]
        for payload in expired:
            del found[payload.key]
        return expired

    def _merged(  # noqa: PLR0915 - one loop over thousands of slices, inlined
        self,
        ctx: CallContext,
        cause: Exception | None,
        report: bool,
        whole: RecoverContext[Any],
        requested: Asked | None,
        found: dict[str, Payload],
        expired: bool,
        up_to_date: bool = False,
    ) -> Payload | Miss:
        """The call's merged slices, from the unexpired entries ``found``: stale, or
        ``up_to_date`` (fresh or live slices)."""
        d, name = ctx.definition, ctx.definition.effective_name
        if not found:
            return Miss.EXPIRED if expired else Miss.MISS
        # A `ListSplitter`'s slices asked for by key need only their values, in order: no
        # envelope and no context per slice (`ListSplitter.merge_values`).
        splitter = d.splitter
        bulk = requested is not None and type(splitter) is ListSplitter and not splitter.strict
        if requested is None:  # no request: every live slice, without arguments
            blank: RecoverContext[Any] = slice_context(d, {}, cause, None, None)
            keys = sorted(found)
            requested = Asked(keys, [blank] * len(keys), whole)
        keys = requested.keys
        # Each slice's envelope as the caller sees it: stale, and so is its value (unless fresh
        # or live). One loop, the envelopes built in place (`envelope`, inlined: thousands).
        recovered: list[Any] = []
        append = recovered.append
        get = found.get
        for key in keys:
            p = get(key)
            if p is None:
                if not bulk:
                    append(None)
                continue
            value, as_of = p.payload, p.as_of
            if KIND_OF(type(value)) != PLAIN:  # most values carry no freshness: no enrich
                value = enrich(value, up_to_date, as_of)
            if bulk:
                append(value)
                continue
            obj: Any = _new(Building)
            obj.name = p.name
            obj.key = p.key
            obj.payload = value
            obj.as_of = as_of
            obj.expire_on = p.expire_on
            obj.up_to_date = up_to_date
            obj.cause = cause
            obj.label = p.label
            obj.partial = False
            obj.tags = p.tags
            obj.fresh_ended = p.fresh_ended
            obj.__class__ = ReferentialPayload
            append(obj)
        try:
            if bulk:
                merged = splitter.merge_values(recovered)
            else:
                slices = slice_contexts(d, requested.contexts, recovered, cause)
                merged = splitter.merge(whole, slices)
        except Exception as exc:
            raise _failed(d, "merge", exc) from exc
        if merged is None:
            return Miss.MISS
        missing = len({key for key in keys if key not in found})
        if missing and report:
            log.warning(
                "failover %r: partial recovery, %d of %d slices missing",
                d.name,
                missing,
                len(set(keys)),
            )
        as_of, expires = _oldest(found.values())
        partial = bool(missing) and not up_to_date  # a live answer is whatever it is
        key = envelope_key(ctx)
        return envelope(name, key, merged, as_of, expires, up_to_date, cause, None, partial)


def _slice_args(asked: RecoverContext[Any]) -> tuple[Any, ...]:
    """A slice's arguments as a duration callable gets them (its entity key)."""
    return tuple(asked.arguments.values())


def _distinct(requested: Asked) -> list[str]:
    """The keys of the slices asked for, each once (a request may ask for a key twice)."""
    return list(dict.fromkeys(requested.keys))


def _everything(ctx: CallContext) -> bool:
    """Whether the call recovers every slice: ``recover_all=True``, or a call without
    arguments."""
    return ctx.definition.recover_all or not (ctx.args or ctx.kwargs)


def _one_shot(ctx: CallContext) -> bool:
    """Whether an argument of the call is an iterator (a generator): it can be read once, and
    that is the upstream's read."""
    return any(isinstance(v, Iterator) for v in (*ctx.args, *ctx.kwargs.values()))


def _whole(ctx: CallContext, cause: Exception | None) -> RecoverContext[Any]:
    """The whole call's context, for the splitter."""
    d = ctx.definition
    arguments = CallArguments(ctx.arguments, ctx.args, ctx.kwargs)
    return RecoverContext(d, arguments, cause, None, d.return_annotation)


def _oldest(found: Iterable[Payload]) -> tuple[datetime | None, datetime | None]:
    """The oldest ``as_of`` and the earliest ``expire_on`` of the slices found."""
    times = [p.as_of for p in found if p.as_of is not None]
    ends = [p.expire_on for p in found if p.expire_on is not None]
    return min(times, default=None), min(ends, default=None)
