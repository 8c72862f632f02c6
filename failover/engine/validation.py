"""The engine's settings checked at construction, and those read from the environment."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Any

from ..errors import ConfigurationError
from ..expiry import LONGEST, parse_ttl
from ..policy import resolve_policy
from ..publish import publish_interval

__all__ = [
    "breaker_defaults",
    "check_engine",
    "env_settings",
    "fleet_breakers",
    "store_breaker_after",
    "store_breaker_reset",
    "store_interval",
    "store_timeout",
]

BREAKER_SETTINGS = (
    "fail_max",
    "reset_timeout",
    "success_threshold",
    "exclude",
    "state_storage",
    "error_rate",
    "min_calls",
    "period",
)


def check_engine(
    clock: Callable[[], datetime],
    async_writes: bool | None,
    timeout_workers: int,
    flags: Mapping[str, bool],
) -> None:
    """Refuse a clock, ``async_writes``, ``timeout_workers`` or a flag (``enabled``,
    ``ignore_tenant``: by name) that cannot work."""
    if not callable(clock):
        raise ConfigurationError(f"Failover: clock must be callable, got {clock!r}")
    # Not `in (None, True, False)`: 0 == False, and a routed engine reads `is not False`.
    if async_writes is not None and not isinstance(async_writes, bool):
        raise ConfigurationError(
            f"Failover: async_writes must be True, False or None, got {async_writes!r}"
        )
    for name, flag in flags.items():
        if not isinstance(flag, bool):  # read for its truth, "false" would be on
            raise ConfigurationError(f"Failover: {name} must be True or False, got {flag!r}")
    if isinstance(timeout_workers, bool) or not isinstance(timeout_workers, int):
        raise ConfigurationError(
            f"Failover: timeout_workers must be an int, got {timeout_workers!r}"
        )
    if timeout_workers < 1:
        raise ConfigurationError("Failover: timeout_workers must be at least 1")


def store_interval(value: timedelta | float | str | None) -> timedelta | None:
    """The engine's ``store_interval``: ``None`` or zero (``0``, ``"0s"``) store every success."""
    if value is None:
        return None
    return parse_ttl(value, "Failover", "store_interval", zero_ok=True) or None


def store_timeout(value: timedelta | float | str | None) -> float | None:
    """The engine's ``store_timeout`` in seconds; ``None`` sets no deadline."""
    if value is None:
        return None
    return parse_ttl(value, "Failover", "store_timeout").total_seconds()


def store_breaker_reset(value: timedelta | float | str) -> float:
    """The engine's ``store_breaker_reset`` in seconds: how long the store breaker skips a
    store that timed out before it lets one trial through."""
    return parse_ttl(value, "Failover", "store_breaker_reset").total_seconds()


def store_breaker_after(value: object) -> int:
    """The engine's ``store_breaker_after``: how many store operations in a row must time out
    or be refused at the connection for the store breaker to open (an int >= 1; a numeric
    string from the environment is read as one)."""
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value.strip())
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigurationError(
            f"Failover: store_breaker_after must be an int >= 1, got {value!r}"
        )
    return value


def breaker_defaults(value: Mapping[str, Any] | None) -> dict[str, Any]:
    """The checked ``breaker_defaults``: ``exclude`` made a tuple."""
    if value is not None and not isinstance(value, Mapping):
        raise ConfigurationError(
            f"Failover: breaker_defaults must be a dict of {', '.join(BREAKER_SETTINGS)}, "
            f"got {value!r}"
        )
    settings = dict(value or {})
    for key, item in settings.items():
        if key not in BREAKER_SETTINGS:
            raise ConfigurationError(
                f"Failover: breaker_defaults has unknown setting {key!r}; "
                f"use {', '.join(BREAKER_SETTINGS)}"
            )
        number = isinstance(item, int | float) and not isinstance(item, bool)
        if key in ("fail_max", "success_threshold") and not (
            number and isinstance(item, int) and item >= 1
        ):
            raise ConfigurationError(
                f"Failover: breaker_defaults[{key!r}] must be an int >= 1, got {item!r}"
            )
        if key == "reset_timeout" and isinstance(item, str | timedelta):
            # A duration like every other ("30s", a timedelta); pybreaker takes seconds.
            reset = parse_ttl(item, "Failover", "breaker_defaults['reset_timeout']", zero_ok=True)
            settings[key] = reset.total_seconds()
        elif key == "reset_timeout" and not (
            number and math.isfinite(item) and 0 <= item <= LONGEST.total_seconds()
        ):  # past a century, an open breaker's reset time overflows a datetime on a call
            raise ConfigurationError(
                f"Failover: breaker_defaults['reset_timeout'] must be a finite number of "
                f"seconds >= 0, at most a century, or a duration ('30s', a timedelta), "
                f"got {item!r}"
            )
    _error_rate(settings)
    exclude = settings.get("exclude")
    if exclude is not None:
        items = tuple(exclude) if isinstance(exclude, list | tuple) else (exclude,)
        for item in items:
            if not (isinstance(item, type) and issubclass(item, BaseException)) and (
                isinstance(item, type) or not callable(item)
            ):
                raise ConfigurationError(
                    "Failover: breaker_defaults['exclude'] must be exception types or "
                    f"predicates exc -> bool, got {item!r}"
                )
        settings["exclude"] = items
    storage = settings.get("state_storage")
    if storage is not None and not callable(storage):
        raise ConfigurationError(
            "Failover: breaker_defaults['state_storage'] must be a callable "
            "name -> pybreaker.CircuitBreakerStorage"
        )
    return settings


def _error_rate(settings: dict[str, Any]) -> None:
    """The error-rate breaker's settings (`failover.execution.error_rate`): ``error_rate`` a
    share in (0, 1], ``min_calls`` an int >= 1 (default 10), ``period`` a duration (default
    60 s); the last two only with the first."""
    if "error_rate" not in settings:
        for key in ("min_calls", "period"):
            if key in settings:
                raise ConfigurationError(
                    f"Failover: breaker_defaults[{key!r}] needs breaker_defaults['error_rate'] "
                    "(the failed share over the period that opens the breaker)"
                )
        return
    rate = settings["error_rate"]
    if not (
        isinstance(rate, int | float) and not isinstance(rate, bool) and 0 < rate <= 1
    ):  # NaN fails both bounds
        raise ConfigurationError(
            "Failover: breaker_defaults['error_rate'] must be a share of the calls between 0 "
            f"and 1 (0.05: one call in twenty failed), got {rate!r}"
        )
    settings["error_rate"] = float(rate)
    least = settings.setdefault("min_calls", 10)
    if isinstance(least, bool) or not isinstance(least, int) or least < 1:
        raise ConfigurationError(
            f"Failover: breaker_defaults['min_calls'] must be an int >= 1, got {least!r}"
        )
    period = settings.setdefault("period", 60)
    settings["period"] = parse_ttl(period, "Failover", "breaker_defaults['period']").total_seconds()


def fleet_breakers(fleet: object, breakers: Mapping[str, Any]) -> None:
    """Refuse two ways of sharing the engine's breakers: ``fleet`` and a ``state_storage``."""
    if fleet is not None and breakers.get("state_storage") is not None:
        raise ConfigurationError(
            "Failover: fleet and breaker_defaults['state_storage'] both share the breakers' "
            "state; give one (fleet keeps the state in memory, synced in the background)"
        )


def env_settings(prefix: str, environ: Mapping[str, str]) -> dict[str, Any]:
    """`Failover.from_env`'s arguments read from ``environ``: each but the store and the fleet
    checked here as the engine checks it, so that a bad value is refused naming its variable
    (the store and the fleet are made, and their URLs checked, by the engine). Blank means
    unset; blanks around are dropped.

    Raises:
        ConfigurationError: a bad value, naming its variable.
    """
    kwargs: dict[str, Any] = {}
    for name in ("STORE", "FLEET", "ASYNC_WRITES", "ENABLED", "METRICS", "POLICY", *_CHECKED):
        raw = environ.get(f"{prefix}{name}", "").strip()
        if not raw:
            continue
        variable = f"{prefix}{name}"
        if name in ("ASYNC_WRITES", "ENABLED", "METRICS") or (
            name == "PUBLISH_HEALTH" and raw.lower() in _BOOLS
        ):
            kwargs[name.lower()] = _env_bool(variable, raw)
            continue
        if name not in (
            "STORE",
            "FLEET",
        ):  # durations as text ("500ms"): checked, passed on as text
            _named(variable, raw, _CHECKS[name])
        kwargs[name.lower()] = raw
    return kwargs


_CHECKED = ("STORE_TIMEOUT", "STORE_BREAKER_RESET", "STORE_BREAKER_AFTER", "PUBLISH_HEALTH")
_CHECKS: dict[str, Callable[[str], object]] = {
    "POLICY": lambda raw: resolve_policy(raw, "Failover"),
    "STORE_TIMEOUT": store_timeout,
    "STORE_BREAKER_RESET": store_breaker_reset,
    "STORE_BREAKER_AFTER": store_breaker_after,
    "PUBLISH_HEALTH": lambda raw: publish_interval(raw, "Failover"),
}


def _named(variable: str, raw: str, check: Callable[[str], object]) -> None:
    try:
        check(raw)
    except ConfigurationError as exc:
        raise ConfigurationError(f"{variable}={raw!r}: {exc}") from None


_BOOLS = ("1", "true", "yes", "on", "0", "false", "no", "off")


def _env_bool(name: str, raw: str) -> bool:
    value = raw.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise ConfigurationError(f"{name}: expected true/false, got {raw!r}")
