"""Rate limit: a token bucket per failover; a call over the rate is refused and served stale.

``rate="100/s"`` lets a failover's upstream be called at most 100 times a second on average,
in bursts of up to 100: the bucket holds ``count`` tokens, refills at ``count`` per ``per``
seconds, and each admitted call takes one. A call that finds the bucket empty is refused at once
with `RateLimited` (it never waits), and recovers like any refusal. The bucket reads the
engine's monotonic time (`time.monotonic`, or the engine's ``clock=`` when one is given), so
tests move it without sleeping.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from time import monotonic
from typing import Any, ClassVar

from ..errors import RateLimited
from .base import Guard, Kind

__all__ = ["RATE", "RateLimit", "shown_rate"]


def shown_rate(count: int, per: float) -> str:
    """``"100/s"``, or ``"5/2s"`` for a period other than a second."""
    return f"{count}/s" if per == 1 else f"{count}/{per:g}s"


class RateLimit(Guard):
    """Admits at most ``count`` calls per ``per`` seconds (a token bucket of ``count`` tokens).

    Args:
        name: the failover's name (for messages).
        count: tokens in a full bucket, and tokens added per ``per`` seconds.
        per: the period, in seconds.
        time: the monotonic time in seconds; default `time.monotonic`.
    """

    refusals: ClassVar[tuple[type[Exception], ...]] = (RateLimited,)

    def __init__(
        self, name: str, count: int, per: float, time: Callable[[], float] = monotonic
    ) -> None:
        self.name = name
        self.count = count
        self.per = per
        self.time = time
        self.refill = count / per  # tokens per second
        self.tokens = float(count)  # starts full: the first burst is allowed
        self.last: float | None = None
        self._lock = threading.Lock()  # a read then a write of the bucket, threads at once

    def __repr__(self) -> str:
        return f"RateLimit({self.name!r}, {shown_rate(self.count, self.per)})"

    def admit(self) -> Any:
        """Take a token, or refuse with `RateLimited` when the bucket is empty (never waits)."""
        with self._lock:
            now = self.time()
            if self.last is not None and now > self.last:
                self.tokens = min(float(self.count), self.tokens + (now - self.last) * self.refill)
            if self.last is None or now > self.last:
                self.last = now
            if self.tokens >= 1:
                self.tokens -= 1
                return None
        raise RateLimited(
            f"failover {self.name!r}: over its rate={shown_rate(self.count, self.per)!r}"
        )


RATE = Kind(
    "rate",
    wanted=lambda d: d.rate is not None,
    shown=lambda d: f"rate({shown_rate(*d.rate)})",
    make=lambda d, wiring: RateLimit(d.name, d.rate[0], d.rate[1], time=wiring.monotonic),
)
"""The rate limit in the guards' order: ``rate=``."""
