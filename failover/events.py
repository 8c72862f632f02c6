"""The facts of one failover's calls, emitted once by the core to the observers subscribed.

The core (`failover.call.Call`) says what happened: a guard refused a call (which guard:
`refused`, before the call's recovery); a call ended live, fresh (served from the store within
``fresh_for``), recovered, not recovered or raised; a live result was stored (or
the store failed), or some of its entries were superseded by newer ones; the store was read
for a recovery; the ``on_recovered`` hook failed; a value
that is not live was served; trouble the caller does not see (`trouble`: a write or a read
that failed, a result the store cannot encode), which the logs tell. The failover's circuit
breaker changed state (`breaker_state`, from
its pybreaker listener, on whichever thread changed it). A store went out or answers again
(`store_state`: on the engine's own stream, `failover.engine.Failover.events`, from its deadline
layers). The engine's fleet's Redis went out or answers again (`fleet_state`), its flights,
messages, resyncs and cleanup turns (`fleet_flight`, `fleet_messages`, `fleet_resync`,
`cleanup_turn`): on the engine's stream too, from `failover.fleet`. Entries were invalidated
or expired on a caller's request (`invalidated`: on the engine's stream too, from
`failover.entries.EntryControl`). Observers
subscribe by overriding the `Observer` methods they want: the health statistics
(`failover.recorder.FailoverStats`), the Prometheus metrics (`failover.metrics_observer`), the
logs (`failover.log_observer`), OpenTelemetry (`failover.otel`), the stale report of a unit of
work (`failover.served.ServedObserver`). Adding one is a new
module with an `Observer` subclass, given to the engine's wiring; the core does not change.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, ClassVar, cast

if TYPE_CHECKING:
    from .payload import ReferentialPayload

__all__ = ["FACTS", "Events", "Observer"]

log = logging.getLogger(__name__)


class Observer:
    """Subscribes to the facts of one failover's calls; every method does nothing by default.

    Attributes:
        timed: whether it wants the store's timings (`stored`, `read`): the core measures them
            only when an observer does.
        safe: whether its methods never raise (the observers of this package): a raise of any
            other observer is logged and dropped, never the call's outcome.
    """

    __slots__ = ()

    timed: ClassVar[bool] = False
    safe: ClassVar[bool] = False

    def live(self, now: datetime | None, seconds: float) -> None:
        """A call answered live; ``seconds``: the upstream's time."""

    def fresh(self, now: datetime | None) -> None:
        """A call was answered at ``now`` from the store within ``fresh_for`` (the upstream not
        called)."""

    def refused(self, guard: str, cause: Exception) -> None:
        """Guard ``guard`` (``bulkhead``, ``breaker``, ``timeout``…: the refusal's
        `failover.errors.refused_by`) refused the call with ``cause``; the call's recovery
        (`recovered` or `not_recovered`, with the same ``cause``) follows (none for a refresh
        ahead: the entry is still served). Never an upstream failure: the upstream was not
        called, or not waited for."""

    def recovered(self, seconds: float | None, cause: Exception, as_of: datetime | None) -> None:
        """A call failed with ``cause`` and was served the value stored at ``as_of``;
        ``seconds`` is ``None`` when a guard refused it (the upstream was not called)."""

    def not_recovered(self, seconds: float | None, cause: Exception) -> None:
        """A call failed with ``cause`` and nothing was recovered."""

    def raised(self, seconds: float, cause: Exception) -> None:
        """A call raised ``cause``, which the failover does not recover."""

    def hook_failed(self, error: Exception) -> None:
        """The ``on_recovered`` hook raised ``error`` (the caller got the value it was given)."""

    def trouble(self, kind: str, error: BaseException, subject: str) -> None:
        """Something failed that the caller does not see: ``kind`` is ``store`` (storing a
        live result failed: the caller got it all the same), ``recover`` (a recovery's read
        failed: treated as a miss), ``chore`` (dropping an expired entry after a recovery
        failed: the answer stands) or ``encode`` (the store cannot encode results of the type
        ``subject``, the type's dotted name: they are no longer offered to it); ``error``: the
        exception. Called where it happened (a store failure: in its ``except`` block)."""

    def stored(self, ok: bool, seconds: float) -> None:
        """A live result was written to the store (``ok``) or the write failed."""

    def superseded(self, count: int) -> None:
        """A live result's write on the caller's thread left ``count`` entries unwritten: a
        newer entry of their key (a later ``as_of``) was stored. A write all of whose entries
        were superseded is not `stored` too."""

    def read(self, outcome: str, seconds: float, found: ReferentialPayload[Any] | None) -> None:
        """The store was read for a recovery: ``outcome`` is ``recovered`` (``found``),
        ``not_recovered`` or ``error``."""

    def served(self, out: ReferentialPayload[Any]) -> None:
        """A call was answered with a value that is not live (stored, or made by a policy)."""

    def breaker_state(self, state: int) -> None:
        """The failover's circuit breaker is now closed (0), half-open (1) or open (2); also
        its state when the breaker is attached to the failover."""

    def store_state(self, store: str, up: bool, source: object) -> None:
        """A store the engine bounds with a deadline (its ``store`` label: ``sqlstore``,
        ``redisstore``) went out (``up=False``: its breaker opened, its latest operations timed
        out or were refused at the connection) or answers again (``True``). A fact of the
        engine's stream, told by each of its deadline layers (``source``: a tiered store has
        two, a router one per tenant; one found out already tells so when first watched),
        under that layer's lock: an observer records or wakes, it never waits nor uses the
        store."""

    def fleet_state(
        self, up: bool, operation: str, cause: BaseException | None, failures: int
    ) -> None:
        """The engine's fleet (`failover.fleet`) stopped answering (``up=False``: its
        ``operation``, ``sync``/``flight``/``bus``/``cleanup``, failed with ``cause``; its
        parts keep to this process from now on) or answers again (``failures``: its
        operations that failed meanwhile). A fact of the engine's stream, told once per change,
        from the thread that saw it (the fleet's, a bus's, a caller's asking for a lease)."""

    def fleet_flight(self, name: str, result: str) -> None:
        """The leader of a ``single_flight="fleet"`` flight of failover ``name``: ``led`` (it
        took the key's lease), ``waited`` (it waits for another process's flight), ``local``
        (the fleet does not answer, or closed: it flies per process), ``alone`` (its wait ran
        past its budget: it calls the upstream itself). A flight may wait, then lead."""

    def fleet_messages(self, direction: str, count: int) -> None:
        """``count`` messages of the fleet's bus were ``sent`` (published, on the fleet's
        thread) or ``received`` (another process's, acted on, on the bus's thread)."""

    def fleet_resync(self) -> None:
        """The fleet's bus subscribed again after an outage: every near copy of the engine's
        tiered stores was dropped (what was published meanwhile was missed)."""

    def cleanup_turn(self, ran: bool) -> None:
        """A scheduled cleanup period under a fleet: this instance ``ran`` it (it took the
        period's turn, or the fleet did not answer), or skipped it (another instance has it)."""

    def invalidated(self, kind: str, name: str | None, tag: str | None, count: int | None) -> None:
        """Entries were removed or expired on a caller's request (a fact of the engine's
        stream): ``kind`` ``invalidate`` (one entry: ``.invalidate()``), ``invalidate_all``,
        ``expire`` (of the failover whose effective name is ``name``) or ``tag``
        (``engine.invalidate_tag(tag)``, ``name`` ``None``: of every failover); ``count``: the
        entries the store removed or expired (``None`` where the store does not say)."""

    def method(self, fact: str) -> Callable[..., None]:
        """What `Events` calls for ``fact``: the method itself, or (to spare the call path a
        frame) an equivalent callable."""
        method: Callable[..., None] = getattr(self, fact)
        return method

    def wants(self, fact: str) -> bool:
        """Whether it is to be called for ``fact`` now (of the facts it overrides): an observer
        that needs a fact only at times (the logs need ``live`` only while a failover is not up)
        says no otherwise, and tells its stream when that changes (`Events.resubscribe`), so
        that the call path does not pay for it."""
        return True

    def attach(self, events: Events) -> None:
        """``events``, the stream it observes (made with it), for `Events.resubscribe`."""


FACTS = (
    "refused",
    "live",
    "fresh",
    "recovered",
    "not_recovered",
    "raised",
    "hook_failed",
    "trouble",
    "stored",
    "superseded",
    "read",
    "served",
    "breaker_state",
    "store_state",
    "fleet_state",
    "fleet_flight",
    "fleet_messages",
    "fleet_resync",
    "cleanup_turn",
    "invalidated",
)


class Events:
    """The stream of one failover: each fact's method calls every observer that overrides it.

    A fact with one safe observer calls it directly (no frame added on the call path); a fact
    with none does nothing.
    """

    __slots__ = (*FACTS, "observers", "timed")

    refused: Callable[[str, Exception], None]
    live: Callable[[datetime | None, float], None]
    fresh: Callable[[datetime | None], None]
    recovered: Callable[[float | None, Exception, datetime | None], None]
    not_recovered: Callable[[float | None, Exception], None]
    raised: Callable[[float, Exception], None]
    hook_failed: Callable[[Exception], None]
    trouble: Callable[[str, BaseException, str], None]
    stored: Callable[[bool, float], None]
    superseded: Callable[[int], None]
    read: Callable[[str, float, ReferentialPayload[Any] | None], None]
    served: Callable[[ReferentialPayload[Any]], None]
    breaker_state: Callable[[int], None]
    store_state: Callable[[str, bool, object], None]
    fleet_state: Callable[[bool, str, BaseException | None, int], None]
    fleet_flight: Callable[[str, str], None]
    fleet_messages: Callable[[str, int], None]
    fleet_resync: Callable[[], None]
    cleanup_turn: Callable[[bool], None]
    invalidated: Callable[[str, str | None, str | None, int | None], None]

    def __init__(self, observers: Sequence[Observer]) -> None:
        self.observers = tuple(observers)
        self.timed = any(o.timed for o in self.observers)
        for fact in FACTS:
            self.resubscribe(fact)
        for observer in self.observers:
            observer.attach(self)

    def resubscribe(self, fact: str) -> None:
        """Call for ``fact`` the observers that override it and want it now (`Observer.wants`).
        One attribute is rebound: a call in flight finishes with the observers it began with."""
        default = getattr(Observer, fact)
        subscribed = [
            o for o in self.observers if getattr(type(o), fact) is not default and o.wants(fact)
        ]
        setattr(self, fact, _fan(fact, subscribed))

    def __repr__(self) -> str:
        return f"Events({list(self.observers)!r})"


# A fact no observer wants calls this: a C callable that takes any arguments and does nothing
# with them (the empty string's ``format``), so that it costs the call path no frame.
_nothing = cast("Callable[..., None]", "".format)


def _fan(fact: str, observers: list[Observer]) -> Callable[..., None]:
    if not observers:
        return _nothing
    if len(observers) == 1 and observers[0].safe:
        return observers[0].method(fact)
    if len(observers) == 2 and observers[0].safe and observers[1].safe:
        first, second = observers[0].method(fact), observers[1].method(fact)

        def both(*args: Any) -> None:  # the success path's usual pair: no loop, no checks
            first(*args)
            second(*args)

        return both
    methods = tuple((o, o.method(fact)) for o in observers)

    def fan(*args: Any) -> None:
        for observer, method in methods:
            if observer.safe:
                method(*args)
                continue
            try:
                method(*args)
            except Exception:  # an observer's bug is never the call's outcome
                log.warning("observer %r failed on %s", observer, fact, exc_info=True)

    return fan
