"""Logs an operator can read: each kind of trouble is logged once with its traceback, then at
most once per interval with a count of what was left out; every occurrence still goes to debug,
with its traceback.

A store that is down, or an upstream that flaps, fails on every call: a line (and a traceback)
per call buries everything else in the log. `LogLimiter` keeps, per kind of trouble (a store's
operation, a failover's recoveries, a failover's state), when it last logged and how many it
left out since. Its time is the engine's clock, so that tests are deterministic.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Hashable
from datetime import UTC, datetime, timedelta
from typing import Any

__all__ = ["INTERVAL", "LogLimiter"]

INTERVAL = timedelta(seconds=60)
"""The least time between two lines of one kind of trouble."""


def _utcnow() -> datetime:
    return datetime.now(UTC)


class LogLimiter:
    """Rate-limits the warnings of one owner (a failover, a store queue) per kind of trouble.

    Args:
        logger: where the lines go.
        clock: the engine's clock (aware datetimes); default: the wall clock.
        interval: the least time between two lines of one kind.
    """

    __slots__ = ("_kinds", "_lock", "clock", "interval", "logger")

    def __init__(
        self,
        logger: logging.Logger,
        clock: Callable[[], datetime] | None = None,
        interval: timedelta = INTERVAL,
    ) -> None:
        self.logger = logger
        self.clock = _utcnow if clock is None else clock
        self.interval = interval
        self._kinds: dict[Hashable, list[Any]] = {}  # kind -> [last line's time, left out since]
        self._lock = threading.Lock()

    def due(self, kind: Hashable, count: bool = True) -> int | None:
        """Whether a line of ``kind`` may be logged now: ``None`` when not (counted as left out
        unless ``count`` is false: a line still owed, asked for again), else how many were left
        out since the last line (0 for the first)."""
        now = self.clock()
        with self._lock:
            entry = self._kinds.get(kind)
            if entry is None:
                self._kinds[kind] = [now, 0]
                return 0
            if now - entry[0] < self.interval:
                if count:
                    entry[1] += 1
                return None
            left_out, entry[0], entry[1] = entry[1], now, 0
            return int(left_out)

    def report(
        self,
        kind: Hashable,
        msg: str,
        *args: Any,
        exc_info: bool | BaseException = False,
        count: bool = True,
        what: str = "more like it",
    ) -> bool:
        """Log ``msg % args`` as a warning if ``kind`` is due, else at debug only; return
        whether it was logged as a warning.

        A due line after a quiet interval (the first of its kind, or none left out since the
        last) carries the traceback; one after left-out occurrences says how many (``what``)
        instead, their tracebacks having gone to debug. ``count=False``: a line still owed,
        asked for again; when not due it is neither counted nor logged. Never raises: a
        failing clock logs the line as is.
        """
        try:
            left_out = self.due(kind, count)
        except Exception:  # a failing clock must not hide the trouble, nor raise into a call
            left_out = 0
        if left_out is None:
            if count:
                self.logger.debug(msg, *args, exc_info=exc_info)
            return False
        if left_out == 0:
            self.logger.warning(msg, *args, exc_info=exc_info)
            return True
        self.logger.warning(
            msg + " (%d %s since the last such line, at debug level)", *args, left_out, what
        )
        if exc_info:
            self.logger.debug(msg, *args, exc_info=exc_info)
        return True
