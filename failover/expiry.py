"""When stored entries stop being served: the default `FixedTtl` and ``ttl`` parsing.

The `ExpiryPolicy` protocol lives with `FailoverDefinition`, which holds one; re-exported here.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from .definition import ExpiryPolicy
from .errors import ConfigurationError

if TYPE_CHECKING:
    from .definition import FailoverDefinition
    from .payload import ReferentialPayload

__all__ = ["LONGEST", "ExpiryPolicy", "FixedTtl", "parse_ttl", "too_long"]

# Largest first: a compound duration names its units in this order, each at most once.
_UNITS = {"w": 604800, "d": 86400, "h": 3600, "m": 60, "s": 1, "ms": 0.001}
_PART = r"(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w)"  # "ms" before "m": "5ms" is not 5 minutes
_DURATION = re.compile(rf"\s*(?:{_PART}\s*)+")
_PARTS = re.compile(_PART)


def _duration(text: str) -> float | None:
    """Seconds in ``"1h30m"``-style text, or ``None`` when it is not one."""
    if _DURATION.fullmatch(text) is None:
        return None
    seconds, rank = 0.0, -1
    order = list(_UNITS)
    for number, unit in _PARTS.findall(text):
        if order.index(unit) <= rank:  # "30m1h", "1h1h": most likely a typo
            return None
        rank = order.index(unit)
        seconds += float(number) * _UNITS[unit]
    return seconds


LONGEST = timedelta(days=36_500)
"""The longest duration any setting takes: a century; any later expiry overflows somewhere
(datetime), and a longer wait overflows a lock's (``threading.TIMEOUT_MAX``, ~292 years)."""


def too_long(what: str, value: object) -> ConfigurationError:
    """The error of a duration past `LONGEST`, saying how to write "forever" instead."""
    return ConfigurationError(
        f"{what} must be at most a century (36500d), got {value!r}; durations are capped at a "
        "century (a later expiry overflows a datetime): for 'forever' (timedelta.max elsewhere), "
        "write '36500d'"
    )


def _seconds(seconds: float, value: object, what: str) -> timedelta:
    # inf and nan are floats, and a huge number overflows timedelta: neither is a duration.
    try:
        if not math.isfinite(seconds):
            raise OverflowError
        return timedelta(seconds=seconds)
    except OverflowError:
        raise ConfigurationError(f"{what} {value!r} is not a finite duration") from None


def parse_ttl(
    value: timedelta | float | str,
    owner: str = "failover",
    setting: str = "ttl",
    *,
    zero_ok: bool = False,
) -> timedelta:
    """Turn ``timedelta``, seconds, or a text duration into a timedelta.

    Text durations are a number and a unit (``ms``, ``s``, ``m``, ``h``, ``d``, ``w``):
    ``"30s"``, ``"15m"``, ``"1.5h"``, ``"7d"``; or several, largest unit first, each once:
    ``"1h30m"``, ``"1d 12h"``, ``"2m30.5s"``.

    Args:
        value: the duration.
        owner: who is being configured, for the message (``"failover 'rates'"``).
        setting: the setting's name, for the message.
        zero_ok: zero is a value of the setting (``store_interval``: coalesce nothing), in
            every spelling: ``0``, ``"0s"``, ``timedelta(0)``.

    Raises:
        ConfigurationError: zero (unless ``zero_ok``), negative, longer than a century, or
            unparsable; the message names ``owner`` and ``setting``.
    """
    what = f"{owner}: {setting}"
    if isinstance(value, timedelta):
        ttl = value
    elif isinstance(value, bool):
        raise ConfigurationError(f"{what} must be a duration, got {value!r}")
    elif isinstance(value, int | float):
        ttl = _seconds(value, value, what)
    elif isinstance(value, str):
        seconds = _duration(value)
        if seconds is None:
            raise ConfigurationError(
                f"{what} {value!r} is not a duration; use seconds or e.g. '30s', '15m', "
                "'24h', '7d', or units largest first, each once: '1h30m'"
            )
        ttl = _seconds(seconds, value, what)
    else:
        raise ConfigurationError(f"{what} must be a duration, got {type(value).__name__}")
    if ttl < timedelta(0) or (ttl == timedelta(0) and not zero_ok):
        bound = "must not be negative" if zero_ok else "must be positive"
        raise ConfigurationError(f"{what} {bound}, got {value!r}")
    if ttl > LONGEST:
        raise too_long(what, value)
    return ttl


@dataclass(frozen=True, slots=True)
class FixedTtl:
    """Every entry lives ``ttl`` after it was stored (the default policy)."""

    ttl: timedelta

    def compute_expiry(self, definition: FailoverDefinition, now: datetime) -> datetime:
        """``now + ttl``."""
        return now + self.ttl

    def is_expired(self, payload: ReferentialPayload[Any], now: datetime) -> bool:
        """Expired once ``now`` reaches ``expire_on``."""
        return payload.expire_on is not None and now >= payload.expire_on
