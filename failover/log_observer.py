"""The logs of one failover, as an observer of its event stream (`failover.events`): what its
callers get (live, served stale, nothing usable) when it changes, and its guards' refusals.

- A state change after a quiet spell (no change for an interval) is logged when it happens,
  naming the upstream's own exception type; so is the recovery that follows it when nothing
  else changed in between (a clean outage is two lines: its start and its end).
- Changes within an interval of the last state line (a flapping upstream changes state on almost
  every call) are counted, then told in one summary line with the counts, the exception types
  and the state now, at the first call once the interval is over.
- A guard's refusal (`Observer.refused`) is a line of that guard's, at most once per interval
  with a count (`failover.logs.LogLimiter`): never "the upstream fails (BulkheadFull)", and it
  changes no state: the upstream was not called, or not waited for.
- Trouble the caller does not see (`Observer.trouble`: a failed write or read, a result the
  store cannot encode) and a failing ``on_recovered`` hook are logged as they are told, the
  repeating ones (a write, a read, a chore) once with the traceback, then once a minute.
- Each failed call's traceback goes to debug, logged by the call itself (`Call.settle`): this
  observer is called for a fact only while it may change the state (`Observer.wants`), so a
  steady outage costs its calls no frame here.

The lines never carry a call's arguments or values. Time is the engine's clock, so that tests
are deterministic.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import ClassVar

from .errors import refused_by
from .events import Events, Observer
from .logs import INTERVAL, LogLimiter

__all__ = ["EntryLog", "LogObserver", "StoreLog"]

log = logging.getLogger("failover.health")
# The calls' own trouble keeps the logger it had when the runtime logged it: filters name it.
_calls = logging.getLogger("failover.core")
_TROUBLE = {
    "store": "failover %r: storing the live result failed",
    "recover": "failover %r: recovering failed; treated as a miss",
    "chore": "failover %r: dropping an expired entry failed after recovering; the answer stands",
}

_UP, _STALE, _DOWN = "live", "stale", "down"
# The outcome that keeps each state as it is: not asked of the observer while nothing is owed.
_STATE_OF = {"live": _UP, "recovered": _STALE, "not_recovered": _DOWN}
_NOW = {_UP: "calls are live", _STALE: "serving stored values",
        _DOWN: "callers get the exception policy's answer"}  # fmt: skip


class LogObserver(Observer):
    """Logs one failover's state changes and its guards' refusals.

    Args:
        name: the failover's name.
        clock: the engine's clock (aware datetimes).
        interval: the least time between two state lines (and two refusal lines of a guard).
    """

    __slots__ = (
        "_bound",
        "_changes",
        "_events",
        "_first",
        "_kinds",
        "_last_change",
        "_line",
        "_refusals",
        "_state",
        "_told",
        "_trouble",
        "_watch",
        "clock",
        "interval",
        "lock",
        "name",
    )

    safe: ClassVar[bool] = True

    def __init__(
        self, name: str, clock: Callable[[], datetime], interval: timedelta = INTERVAL
    ) -> None:
        self.name = name
        self.clock = clock
        self.interval = interval
        self.lock = threading.Lock()
        self._state = _UP
        # Whether a live call has anything to do: the state is not live, or a summary is owed.
        # The success path reads this one attribute, nothing else.
        self._watch = False
        self._bound = (_UP, False)  # the state and whether a summary is owed, as subscribed
        self._line: datetime | None = None  # when the latest state line was logged
        self._last_change: datetime | None = None  # when callers' state last changed
        self._told = 0  # changes logged as they happened since the latest quiet spell
        self._changes: dict[str, int] = {}  # changes left out since then, per state reached
        self._kinds: dict[str, int] = {}  # ... and the upstream's exception types among them
        self._first: datetime | None = None  # ... the first of them
        self._refusals = LogLimiter(log, clock, interval)
        self._trouble = LogLimiter(_calls, clock)  # a store's trouble repeats on every call
        self._events: Events | None = None  # the stream it observes (`attach`)

    def __repr__(self) -> str:
        return f"LogObserver({self.name!r})"

    def attach(self, events: Events) -> None:
        """The stream it observes: a call's outcome is asked of it only while it has something
        to do."""
        self._events = events
        for fact in _STATE_OF:
            events.resubscribe(fact)

    def wants(self, fact: str) -> bool:
        """An outcome (``live``, ``recovered``, ``not_recovered``) only while it would change
        the state or a summary is owed: the calls of a steady state (live, or a steady outage)
        do not call it."""
        state = _STATE_OF.get(fact)
        return state is None or state != self._state or bool(self._changes)

    def _rebind(self) -> None:
        """After a change of the state or of the summary owed (``lock`` held): subscribe to the
        outcomes that would change them now, and only those."""
        self._watch = self._state != _UP or bool(self._changes)
        bound = (self._state, bool(self._changes))
        if bound != self._bound:
            self._bound = bound
            events = self._events
            if events is not None:
                for fact in _STATE_OF:
                    events.resubscribe(fact)

    # -- the facts ----------------------------------------------------------------------------

    def live(self, now: datetime | None, seconds: float) -> None:
        """The upstream answered: logged if calls were not live (or a summary is owed)."""
        if self._watch:
            self._changed(_UP, None, None)

    def recovered(self, seconds: float | None, cause: Exception, as_of: datetime | None) -> None:
        """The upstream failed and a stored value was served; a guard's refusal is its own."""
        if refused_by(cause) is None:
            self._failed(_STALE, cause, as_of)

    def not_recovered(self, seconds: float | None, cause: Exception) -> None:
        """The upstream failed and nothing usable was stored; a guard's refusal is its own."""
        if refused_by(cause) is None:
            self._failed(_DOWN, cause, None)

    def refused(self, guard: str, cause: Exception) -> None:
        """A guard refused a call: its line, at most once per interval, with a count."""
        self._refusals.report(  # never raises
            guard,
            "failover %r: refused by its %s, not an upstream failure (%s: %s); "
            "calls are recovered from the store",
            self.name,
            guard,
            type(cause).__name__,
            cause,
            what="refusals",
        )

    def trouble(self, kind: str, error: BaseException, subject: str) -> None:
        """A failed write, read or chore: once with its traceback, then once a minute; a type
        the store cannot encode: once (its results are not offered to the store again)."""
        try:
            if kind == "encode":
                _calls.warning(
                    "failover %r: the store cannot encode %s (%s); results of this type are "
                    "returned live and no longer stored. Return plain data (a dict, a "
                    "dataclass, a pydantic model: e.g. response.json()) to have them stored",
                    self.name,
                    subject,
                    error,
                )
            else:
                self._trouble.report(kind, _TROUBLE[kind], self.name, exc_info=error)
        except Exception:  # a log line never breaks a call
            pass

    def hook_failed(self, error: Exception) -> None:
        """``on_recovered`` raised: a warning with its traceback, each time (it is a bug)."""
        with contextlib.suppress(Exception):  # a log line never breaks a call
            _calls.warning(
                "failover %r: on_recovered raised; the caller gets the value it was given",
                self.name,
                exc_info=error,
            )

    # -- the state ----------------------------------------------------------------------------

    def _failed(self, state: str, cause: Exception, as_of: datetime | None) -> None:
        self._changed(state, type(cause).__name__, as_of)

    def _changed(self, state: str, kind: str | None, as_of: datetime | None) -> None:
        """Callers now get ``state``: logged now after a quiet spell (no change for an
        interval), or as the end of the outage just logged; else counted for the summary,
        logged at the first call once an interval has passed since the last line."""
        if state == self._state and not self._changes:  # the same state: nothing to say
            return
        try:
            now: datetime | None = self.clock()
        except Exception:  # a failing clock: the line is logged as is
            now = None
        with self.lock:
            changed = state != self._state
            self._state = state
            last = self._last_change
            if changed:
                self._last_change = now
            interval = self.interval
            quiet = changed and (now is None or last is None or now - last >= interval)
            # An outage's end, right after its start was logged (nothing counted since): told
            # now too. One failure and its recovery are not flapping.
            back = changed and state == _UP and self._told == 1 and not self._changes
            self._told = 1 if quiet else 2 if back else self._told
            quiet = quiet or back
            line = self._line
            owed = bool(self._changes) and (now is None or line is None or now - line >= interval)
            if not quiet:
                if changed:
                    self._count(state, kind, now)
                if not owed:
                    self._rebind()  # a summary is owed, later
                    return
            summary = (self._changes, self._kinds, self._first) if self._changes else None
            self._changes, self._kinds, self._first = {}, {}, None
            self._line = now
            self._rebind()
        try:
            if quiet:
                self._log(state, kind, as_of, now, summary)
            elif summary is not None:
                self._summarize(state, *summary)
        except Exception:  # a log line never breaks a call
            pass

    def _count(self, state: str, kind: str | None, now: datetime | None) -> None:
        self._changes[state] = self._changes.get(state, 0) + 1
        if kind is not None:
            self._kinds[kind] = self._kinds.get(kind, 0) + 1
        if self._first is None:
            self._first = now

    def _log(
        self,
        state: str,
        kind: str | None,
        as_of: datetime | None,
        now: datetime | None,
        before: tuple[dict[str, int], dict[str, int], datetime | None] | None,
    ) -> None:
        args: list[object]
        if state == _UP:
            msg, args = "failover %r: the upstream answers again; calls are live", [self.name]
        elif state == _STALE:
            age = "unknown"
            if as_of is not None and now is not None:
                age = f"{(now - as_of).total_seconds():.0f}s"
            msg = "failover %r: the upstream fails (%s); serving stored values, stale age %s"
            args = [self.name, kind, age]
        else:
            msg = (
                "failover %r: the upstream fails (%s) and nothing usable is stored; "
                "callers get the exception policy's answer"
            )
            args = [self.name, kind]
        if before is not None:  # changes still untold, from before the quiet spell
            more, more_args = _counts(*before)
            msg, args = f"{msg} ({more})", [*args, *more_args]
        log.warning(msg, *args)

    def _summarize(
        self, state: str, changes: dict[str, int], kinds: dict[str, int], first: datetime | None
    ) -> None:
        more, args = _counts(changes, kinds, first)
        log.warning("failover %r: the upstream flaps: " + more + "; %s now",
                    self.name, *args, _NOW[state])  # fmt: skip


def _counts(
    changes: dict[str, int], kinds: dict[str, int], first: datetime | None
) -> tuple[str, list[object]]:
    """The summary of ``changes`` left out: its text and arguments."""
    failing = changes.get(_STALE, 0) + changes.get(_DOWN, 0)
    types = ", ".join(f"{k} x{n}" for k, n in sorted(kinds.items(), key=lambda i: -i[1]))
    return (
        "%d state changes since the last such line, the first at %s (failing %d times: %s; "
        "answering again %d times)",
        [
            sum(changes.values()),
            "unknown" if first is None else first.isoformat(),
            failing,
            types or "-",
            changes.get(_UP, 0),
        ],
    )


# What callers do while a store is out, unless its source says (`RedisPermits.meanwhile`).
_SKIPPED = "calls skip it until a trial operation answers"


class StoreLog(Observer):
    """Logs an engine's stores going out and answering again (`Observer.store_state`, the
    engine's stream): one line each way, per deadline layer (or shared source: a
    `failover.RedisPermits`'s Redis) that changed, saying what callers do meanwhile.

    Args:
        owner: the engine, as the lines name it.
    """

    __slots__ = ("owner",)

    safe: ClassVar[bool] = True

    def __init__(self, owner: str) -> None:
        self.owner = owner

    def __repr__(self) -> str:
        return f"StoreLog({self.owner!r})"

    def store_state(self, store: str, up: bool, source: object) -> None:
        """The store ``store`` went out (a warning), or answers again (info)."""
        try:
            if up:
                log.info("%s: store %r answers again", self.owner, store)
            else:
                log.warning(
                    "%s: store %r is out (its latest operations timed out or were refused at "
                    "the connection): %s",
                    self.owner,
                    store,
                    getattr(source, "meanwhile", _SKIPPED),
                )
        except Exception:  # a log line never breaks an operation
            pass


entries_log = logging.getLogger("failover")


class EntryLog(Observer):
    """Logs the control over entries (`Observer.invalidated`, the engine's stream): a clear
    of a failover and an invalidation by tag at info, with what they removed; an entry
    invalidated or expired at debug (a service may do that on every request)."""

    __slots__ = ()

    safe: ClassVar[bool] = True

    def invalidated(self, kind: str, name: str | None, tag: str | None, count: int | None) -> None:
        """One line for the operation."""
        try:
            if kind == "invalidate_all":
                entries_log.info("failover %r: invalidate_all removed %d entries", name, count)
            elif kind == "tag":
                entries_log.info("failover: invalidate_tag(%r) removed %d entries", tag, count)
            elif kind == "expire":
                entries_log.debug("failover %r: expire found %d entries", name, count)
            else:
                entries_log.debug("failover %r: an entry invalidated", name)
        except Exception:  # a log line never breaks an operation
            pass
