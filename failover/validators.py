"""The checks of the decorator's settings (`failover.settings.Options`): each turns a given
value into the `FailoverDefinition` field of the same name, or raises a `ConfigurationError`
naming the failover and the setting."""

# No `from __future__ import annotations`: kept as settings.py, which reads annotations.

import math
from datetime import timedelta
from typing import Any, cast

import pybreaker

from .definition import ExpiryPolicy
from .errors import ConfigurationError
from .expiry import LONGEST, parse_ttl, too_long
from .policy import resolve_policy

__all__ = ["as_is", "seconds"]


def as_is(value: Any, owner: str, setting: str) -> Any:
    """A setting taken as it is given."""
    return value


def seconds(value: Any, owner: str, setting: str, zero_ok: bool) -> float:
    """A duration setting in seconds: a number of seconds, a timedelta, or text (``"250ms"``,
    ``"2s"``, ``"1m30s"``) read by the one duration parser, `parse_ttl`, as ``ttl=`` is.

    Raises:
        ConfigurationError: not a duration, negative, or zero where ``zero_ok`` is false.
    """
    if isinstance(value, timedelta | str):
        return parse_ttl(value, owner, setting, zero_ok=zero_ok).total_seconds()
    return _finite_seconds(value, owner, setting, zero_ok)


def _finite_seconds(value: Any, owner: str, setting: str, zero_ok: bool) -> float:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or value < 0 or (value == 0 and not zero_ok):
        bound = ">= 0" if zero_ok else "> 0"
        raise ConfigurationError(
            f"{owner}: {setting}= must be a finite number of seconds {bound}, got {value!r}"
        )
    if value > LONGEST.total_seconds():  # as in text: a longer wait overflows a lock's
        raise too_long(f"{owner}: {setting}=", value)
    return float(value)


def _ttl(value: Any, owner: str, setting: str) -> Any:
    # A callable of the result and the arguments (`failover.adaptive`): called per entry.
    if callable(value) and not isinstance(value, str | timedelta):
        return value
    return parse_ttl(value, owner)


def _ttl_jitter(value: Any, owner: str, setting: str) -> float:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value <= 1
    if not ok:
        raise ConfigurationError(
            f"{owner}: ttl_jitter= must be a fraction of the ttl between 0 and 1 (0.1: each "
            f"entry lives up to a tenth less, spread by its key), got {value!r}"
        )
    return float(value)


def _throttle(value: Any, owner: str, setting: str) -> timedelta | None:
    return None if value is None else parse_ttl(value, owner, setting)


def _domain(value: Any, owner: str, setting: str) -> str | None:
    if value is not None and (not isinstance(value, str) or not value):
        raise ConfigurationError(f"{owner}: domain must be a non-empty string")
    return value


def _callable_or_none(value: Any, owner: str, setting: str) -> Any:
    if value is not None and not callable(value):
        raise ConfigurationError(f"{owner}: {setting}= must be callable, got {value!r}")
    return value


def _expiry(value: Any, owner: str, setting: str) -> ExpiryPolicy | None:
    if value is not None and not isinstance(value, ExpiryPolicy):
        raise ConfigurationError(
            f"{owner}: expiry= must have compute_expiry() and is_expired(), got {value!r}"
        )
    return value


def _types(value: Any, owner: str, setting: str) -> tuple[type[BaseException], ...]:
    items = value if isinstance(value, tuple) else (value,)
    for item in items:
        if not (isinstance(item, type) and issubclass(item, BaseException)):
            raise ConfigurationError(f"{owner}: {setting}= must be exception types, got {item!r}")
        if setting == "exceptions" and not issubclass(item, Exception):
            raise ConfigurationError(
                f"{owner}: exceptions= may only name Exception subclasses; "
                f"{item.__name__} is a BaseException that always propagates"
            )
    return items


def _exceptions(value: Any, owner: str, setting: str) -> Any:
    if not isinstance(value, type | tuple) and callable(value):
        return value  # a predicate
    if isinstance(value, str):
        raise ConfigurationError(
            f"{owner}: exceptions= takes exception types or a predicate exc -> bool (e.g. "
            f"failover.http.transient), not the string {value!r}"
        )
    return _types(value, owner, setting)


def _policy(value: Any, owner: str, setting: str) -> Any:
    return None if value is None else resolve_policy(value, owner)


def _flag(value: Any, owner: str, setting: str) -> bool:
    # Only a bool: read for its truth, "no" or "false" would turn a flag on.
    if not isinstance(value, bool):
        raise ConfigurationError(f"{owner}: {setting}= must be True or False, got {value!r}")
    return value


def _single_flight(value: Any, owner: str, setting: str) -> bool | str:
    if value == "fleet" or isinstance(value, bool):
        return cast(bool | str, value)
    raise ConfigurationError(
        f"{owner}: single_flight= must be True or False, or 'fleet' (one flight per key "
        f"across the engine's fleet), got {value!r}"
    )


def _breaker(value: Any, owner: str, setting: str) -> Any:
    if value is not None and not isinstance(value, bool | pybreaker.CircuitBreaker):
        raise ConfigurationError(
            f"{owner}: breaker= must be a pybreaker.CircuitBreaker, True or None, got {value!r}"
        )
    return None if value is False else value


def _permits(value: Any, owner: str, setting: str) -> int | None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise ConfigurationError(
            f"{owner}: max_concurrency= must be a positive int or None, got {value!r}"
        )
    return value


def _pool(value: Any, owner: str, setting: str) -> str | None:
    if value is not None and (not isinstance(value, str) or not value):
        raise ConfigurationError(f"{owner}: bulkhead= must be a pool's name, got {value!r}")
    return value


def _weight(value: Any, owner: str, setting: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigurationError(f"{owner}: weight= must be a positive int, got {value!r}")
    return value


def _wait(value: Any, owner: str, setting: str) -> float | None:
    return None if value is None else seconds(value, owner, setting, zero_ok=True)


def _timeout(value: Any, owner: str, setting: str) -> float | None:
    return None if value is None else seconds(value, owner, setting, zero_ok=False)


def _interval(value: Any, owner: str, setting: str) -> timedelta | None:
    # Zero, however spelled, is off for this failover, whatever the engine's.
    return None if value is None else parse_ttl(value, owner, setting, zero_ok=True)


def _fresh_for(value: Any, owner: str, setting: str) -> Any:
    if callable(value) and not isinstance(value, str | timedelta):
        return value  # a callable of the result and the arguments, asked per entry read
    return None if value is None else parse_ttl(value, owner, setting)


def _rate(value: Any, owner: str, setting: str) -> tuple[int, float] | None:
    """``"100/s"``: a count per period (``s``, ``m``, ``h``, or a duration such as ``"2s"``)
    into ``(count, seconds)``."""
    if value is None:
        return None
    count, _, per = value.partition("/") if isinstance(value, str) else ("", "", "")
    count, per = count.strip(), per.strip()
    period = None
    if count.isascii() and count.isdigit() and int(count) > 0 and per:
        try:  # a bare unit is one of it: "s" is "1s"
            period = parse_ttl(per if per[0].isdigit() else f"1{per}", owner, setting)
        except ConfigurationError:
            period = None
    if period is None:
        raise ConfigurationError(
            f"{owner}: rate= must be a positive count per period such as '100/s', '10/m' or "
            f"'5/2s', got {value!r}"
        )
    return int(count), period.total_seconds()


def _refresh_ahead(value: Any, owner: str, setting: str) -> float | timedelta | None:
    """A fraction of ``fresh_for`` (a number between 0 and 1) or a duration (text or a
    timedelta); made an age by `_freshness`, which knows ``fresh_for``."""
    if value is None or isinstance(value, timedelta | str):
        return None if value is None else parse_ttl(value, owner, setting)
    ok = isinstance(value, int | float) and not isinstance(value, bool) and 0 < value < 1
    if not ok:
        raise ConfigurationError(
            f"{owner}: refresh_ahead= must be a fraction of fresh_for between 0 and 1 "
            f"(0.8: refresh in the last fifth) or a duration such as '4m', got {value!r}"
        )
    return float(value)
