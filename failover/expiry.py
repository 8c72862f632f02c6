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

__all__ = ["ExpiryPolicy", "FixedTtl", "parse_ttl"]

_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w)\s*$")


def _seconds(seconds: float, value: object, owner: str) -> timedelta:
    # inf and nan are floats, and a huge number overflows timedelta: neither is a duration.
    try:
        if not math.isfinite(seconds):
            raise OverflowError
        return timedelta(seconds=seconds)
    except OverflowError:
        raise ConfigurationError(f"{owner}: ttl {value!r} is not a finite duration") from None


def parse_ttl(value: timedelta | float | str, owner: str = "ttl") -> timedelta:
    """Turn ``timedelta``, seconds, or ``"30s"``/``"15m"``/``"24h"``/``"7d"`` into a timedelta.

    Raises:
        ConfigurationError: zero, negative or unparsable; the message names ``owner``.
    """
    if isinstance(value, timedelta):
        ttl = value
    elif isinstance(value, bool):
        raise ConfigurationError(f"{owner}: ttl must be a duration, got {value!r}")
    elif isinstance(value, int | float):
        ttl = _seconds(value, value, owner)
    elif isinstance(value, str):
        match = _DURATION.match(value)
        if match is None:
            raise ConfigurationError(
                f"{owner}: ttl {value!r} is not a duration; use seconds or e.g. '30s', '15m', "
                "'24h', '7d'"
            )
        ttl = _seconds(float(match[1]) * _UNITS[match[2]], value, owner)
    else:
        raise ConfigurationError(f"{owner}: ttl must be a duration, got {type(value).__name__}")
    if ttl <= timedelta(0):
        raise ConfigurationError(f"{owner}: ttl must be positive, got {value!r}")
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
