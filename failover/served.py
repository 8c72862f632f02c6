"""Which failover calls of one unit of work (a web request, a job) answered with a value that
is not live.

`collect` opens a `StaleReport` in a context variable for the code it wraps; every failover call
made in that context (in asyncio tasks it starts, and in worker threads that copy the context,
such as Starlette's threadpool) and served stale, or given a value made by an exception policy,
adds its name to the report. `failover.asgi.StaleHeaders` turns the report into response headers.

Until the process first enters `collect`, the `ServedObserver`s are not subscribed to their
streams (`Observer.wants`): a call pays nothing; after it, one context-variable read per call not
answered live outside a report, and nothing on a call whose upstream answered.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from contextlib import AbstractContextManager
from contextvars import ContextVar
from datetime import datetime
from typing import TYPE_CHECKING, Any, ClassVar

from .events import Events, Observer

if TYPE_CHECKING:
    from .payload import ReferentialPayload

__all__ = ["ServedObserver", "StaleReport", "collect", "record"]


class StaleReport:
    """The failover calls that were not answered live within one `collect` block.

    Thread-safe: calls made on worker threads add to the same report.

    Attributes:
        age: the age in seconds, when it was served, of the oldest stored value served stale;
            ``None`` when only policy-made values (which have no time) were served, or none.
        partial: whether a scatter/gather call was served only some of the slices it asked
            for (`ReferentialPayload.partial`).
    """

    __slots__ = ("_lock", "_names", "_parent", "age", "partial")

    def __init__(self, parent: StaleReport | None = None) -> None:
        self._lock = threading.Lock()
        self._names: dict[str, None] = {}  # an ordered set: first served first
        self._parent = parent
        self.age: float | None = None
        self.partial = False

    def __repr__(self) -> str:
        partial = ", partial=True" if self.partial else ""
        return f"StaleReport(names={self.names!r}, age={self.age!r}{partial})"

    def __bool__(self) -> bool:
        """Whether any call was not answered live."""
        return bool(self._names)

    @property
    def names(self) -> tuple[str, ...]:
        """The effective names of the failovers not answered live, in the order first seen."""
        with self._lock:
            return tuple(self._names)

    def add(self, name: str, age: float | None, partial: bool = False) -> None:
        """Count one call of failover ``name`` that was not answered live; ``age`` is the
        served value's age in seconds (``None`` for a policy-made value); ``partial``: it was
        served only some of the slices it asked for."""
        with self._lock:
            self._names[name] = None
            if age is not None and (self.age is None or age > self.age):
                self.age = age
            if partial:
                self.partial = True
        if self._parent is not None:  # an enclosing block (an outer app's middleware) sees it too
            self._parent.add(name, age, partial)


_current: ContextVar[StaleReport | None] = ContextVar("failover_stale_report", default=None)


_lock = threading.Lock()
_collected: list[bool] = []  # not empty once a report was collected in this process
_observers: weakref.WeakSet[ServedObserver] = weakref.WeakSet()  # to subscribe at that moment


def _first_collect() -> None:
    """The first `collect` of the process: every `ServedObserver` subscribes to its stream,
    before the block runs."""
    with _lock:
        if _collected:
            return
        _collected.append(True)
        observers = list(_observers)
    for observer in observers:
        if observer.events is not None:
            observer.events.resubscribe("served")


class _Collecting:
    """`collect`'s context manager (a class: cheaper than a generator, once per request)."""

    __slots__ = ("report", "token")

    def __enter__(self) -> StaleReport:
        if not _collected:
            _first_collect()
        self.report = StaleReport(_current.get())
        self.token = _current.set(self.report)
        return self.report

    def __exit__(self, *exc: object) -> None:
        _current.reset(self.token)


def collect() -> AbstractContextManager[StaleReport]:
    """Collect, for the block, the failover calls not answered live.

    Blocks nest: a call counts in every enclosing report.

    Example::

        with failover.served.collect() as report:
            find_country("FR")
        if report:
            print("stale:", report.names, report.age)
    """
    return _Collecting()


def record(
    served: ReferentialPayload[Any], clock: Callable[[], datetime], name: str | None = None
) -> None:
    """Add a call's not-live envelope to the report being collected, if any (the core calls
    this; it never raises). The age is measured on ``clock``, the engine's; ``name`` is the
    failover's own name (the envelope carries the domain when one is set)."""
    report = _current.get()
    if report is None:
        return
    age = None
    if served.as_of is not None:
        try:
            age = max(0.0, (clock() - served.as_of).total_seconds())
        except Exception:  # a failing clock costs the Age header, never the call
            age = None
    report.add(served.name if name is None else name, age, served.partial)


class ServedObserver(Observer):
    """Adds each call of a failover served a value that is not live to the report being
    collected (one context-variable read per such call)."""

    __slots__ = ("__weakref__", "clock", "events", "name")

    safe: ClassVar[bool] = True

    def __init__(self, clock: Callable[[], datetime], name: str | None = None) -> None:
        self.clock = clock
        self.name = name  # the failover's own name, as written (not its domain)
        self.events: Events | None = None

    def wants(self, fact: str) -> bool:
        """``served`` once a report was ever collected in this process (`collect`): before
        that, no call could add to one."""
        return bool(_collected)

    def attach(self, events: Events) -> None:
        """``events``, for `collect`'s first use to subscribe it."""
        self.events = events
        with _lock:
            _observers.add(self)
            collecting = bool(_collected)
        if collecting:  # a first collect may have come since ``events`` asked `wants`
            events.resubscribe("served")

    def __repr__(self) -> str:
        return "ServedObserver()"

    def served(self, out: ReferentialPayload[Any]) -> None:
        """Record ``out`` in the report being collected, if any."""
        if _current.get() is not None:  # `record`'s own check first: no frame outside collect
            record(out, self.clock, self.name)
