"""The decorator's settings, declared once: `Options` names and types them (the decorator's
``**options``), `DEFAULTS` gives their defaults, and `resolve` validates them into the
`FailoverDefinition` of one function."""

from __future__ import annotations

import difflib
import inspect
import math
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypedDict

import pybreaker

from .context import PolicyLike, RecoverContext
from .definition import ExpiryPolicy, FailoverDefinition
from .errors import ConfigurationError
from .expiry import FixedTtl, parse_ttl
from .policy import resolve_policy
from .scatter import check_splitter

if TYPE_CHECKING:
    from .engine import Failover

__all__ = ["DEFAULTS", "Options", "resolve"]


class Options(TypedDict, total=False):
    """The keyword settings of `failover.failover`.

    Attributes:
        ttl: how long a stored result may be served: a timedelta, seconds, or ``"15m"``,
            ``"1h30m"``.
        domain: a namespace shared with other failovers (entries are stored under it).
        key: receives the call's arguments (without ``self``/``cls``) and returns the raw key.
        expiry: an `ExpiryPolicy` that overrides ``ttl``.
        exceptions: exception types, or a predicate on the exception, that trigger recovery.
        exclude: exception types never recovered, re-raised as they are.
        store_if: a live result failing this predicate is returned but not stored.
        policy: what happens when nothing is recovered; ``None``: the engine's policy.
        on_recovered: ``(ctx, value) -> value`` run on a recovered value.
        splitter: a `PayloadSplitter`: store and recover a collection per entity.
        recover_all: recover every live slice of the name (needs ``splitter``).
        breaker: a `pybreaker.CircuitBreaker`, or ``True`` for one per name from the engine's
            ``breaker_defaults``.
        max_concurrency: bulkhead: upstream calls of this failover allowed in flight at once
            (a private pool of that many permits).
        bulkhead: the name of a pool declared with ``engine.bulkhead_pool(...)``, shared with
            the other failovers that name it (instead of ``max_concurrency``).
        weight: permits one call takes from its pool.
        acquire_timeout: how long a call waits for bulkhead permits: ``0`` fails fast to
            recovery, ``None`` waits without limit, else seconds, a timedelta or ``"250ms"``.
        timeout: soft timeout in seconds: a slower upstream is served stale, and its late
            result is stored.
        store_interval: write coalescing: the least time between two stores of one key;
            ``None``: the engine's.
        single_flight: concurrent calls with the same key share one upstream call and one
            store write; each waits at most its own ``timeout``.
        engine: the engine to use; default: the process-wide default engine, resolved per call.
    """

    ttl: timedelta | float | str
    domain: str | None
    key: Callable[..., object] | None
    expiry: ExpiryPolicy | None
    exceptions: type[Exception] | tuple[type[Exception], ...] | Callable[[Exception], bool]
    exclude: type[Exception] | tuple[type[Exception], ...]
    store_if: Callable[[Any], bool] | None
    policy: PolicyLike | None
    on_recovered: Callable[[RecoverContext[Any], Any], object] | None
    splitter: Any
    recover_all: bool
    breaker: pybreaker.CircuitBreaker | bool | None
    max_concurrency: int | None
    bulkhead: str | None
    weight: int
    acquire_timeout: timedelta | float | str | None
    timeout: float | None
    store_interval: timedelta | float | str | None
    single_flight: bool
    engine: Failover | None


DEFAULTS: dict[str, Any] = {
    "ttl": "1h",
    "domain": None,
    "key": None,
    "expiry": None,
    "exceptions": (Exception,),
    "exclude": (),
    "store_if": None,
    "policy": None,
    "on_recovered": None,
    "splitter": None,
    "recover_all": False,
    "breaker": None,
    "max_concurrency": None,
    "bulkhead": None,
    "weight": 1,
    "acquire_timeout": 0.0,
    "timeout": None,
    "store_interval": None,
    "single_flight": False,
    "engine": None,
}
assert set(DEFAULTS) == set(Options.__annotations__), "Options and DEFAULTS must name the same"


def check_names(options: dict[str, Any], owner: str) -> None:
    """Refuse unknown settings, suggesting the nearest known one."""
    for name in options:
        if name not in DEFAULTS:
            near = difflib.get_close_matches(name, DEFAULTS, n=1)
            hint = f"; did you mean {near[0]}=?" if near else ""
            raise ConfigurationError(f"failover {owner}: unknown setting {name}={hint}")


def resolve(
    fn: Any,
    name: str,
    function: str,
    options: dict[str, Any],
    is_async: bool,
    is_method: bool,
) -> FailoverDefinition:
    """Validate ``options`` for ``fn`` (already taken out of its static/class method) into its
    definition.

    Raises:
        ConfigurationError: a setting that cannot work, naming the failover and the setting.
    """
    o = {**DEFAULTS, **options}
    owner = f"failover {name!r}"
    domain = o["domain"]
    if domain is not None and (not isinstance(domain, str) or not domain):
        raise ConfigurationError(f"{owner}: domain must be a non-empty string")
    ttl = parse_ttl(o["ttl"], owner)
    expiry = o["expiry"]
    if expiry is None:
        expiry = FixedTtl(ttl)
    elif not isinstance(expiry, ExpiryPolicy):
        raise ConfigurationError(
            f"{owner}: expiry= must have compute_expiry() and is_expired(), got {expiry!r}"
        )
    exceptions = o["exceptions"]
    if not isinstance(exceptions, type | tuple) and callable(exceptions):
        accept: Any = exceptions
    else:
        accept = _types(exceptions, owner, "exceptions")
    policy = o["policy"]
    splitter = check_splitter(o["splitter"], o["recover_all"], owner)
    breaker = o["breaker"]
    if breaker is not None and not isinstance(breaker, bool | pybreaker.CircuitBreaker):
        raise ConfigurationError(
            f"{owner}: breaker= must be a pybreaker.CircuitBreaker, True or None, got {breaker!r}"
        )
    max_concurrency = o["max_concurrency"]
    if max_concurrency is not None and (
        isinstance(max_concurrency, bool)
        or not isinstance(max_concurrency, int)
        or max_concurrency < 1
    ):
        raise ConfigurationError(
            f"{owner}: max_concurrency= must be a positive int or None, got {max_concurrency!r}"
        )
    pool, weight, acquire_timeout = _bulkhead(o, max_concurrency, owner)
    timeout = o["timeout"]
    if timeout is not None:
        timeout = _seconds(timeout, owner, "timeout", zero_ok=False)
    single_flight = o["single_flight"]
    if not isinstance(single_flight, bool):
        raise ConfigurationError(
            f"{owner}: single_flight= must be True or False, got {single_flight!r}"
        )
    interval = o["store_interval"]
    if isinstance(interval, int | float) and not isinstance(interval, bool) and interval == 0:
        interval = timedelta(0)  # off for this failover, whatever the engine's
    elif interval is not None:
        interval = parse_ttl(interval, owner, "store_interval")
    return FailoverDefinition(
        name=name,
        domain=domain,
        effective_name=domain or name,
        ttl=ttl,
        expiry=expiry,
        key=_callable_or_none(o["key"], owner, "key"),
        exceptions=accept,
        exclude=_types(o["exclude"], owner, "exclude"),
        store_if=_callable_or_none(o["store_if"], owner, "store_if"),
        policy=None if policy is None else resolve_policy(policy, owner),
        on_recovered=_callable_or_none(o["on_recovered"], owner, "on_recovered"),
        splitter=splitter,
        recover_all=bool(o["recover_all"]),
        breaker=None if breaker is False else breaker,
        max_concurrency=max_concurrency,
        acquire_timeout=acquire_timeout,
        timeout=timeout,
        store_interval=interval,
        function=function,
        is_async=is_async,
        is_method=is_method,
        return_annotation=inspect.signature(fn).return_annotation,
        weight=weight,
        bulkhead=pool,
        single_flight=single_flight,
    )


def _bulkhead(
    o: dict[str, Any], max_concurrency: int | None, owner: str
) -> tuple[str | None, int, float | None]:
    """The pool's name, the weight and the wait of a failover's bulkhead settings."""
    pool = o["bulkhead"]
    if pool is not None and (not isinstance(pool, str) or not pool):
        raise ConfigurationError(f"{owner}: bulkhead= must be a pool's name, got {pool!r}")
    if pool is not None and max_concurrency is not None:
        raise ConfigurationError(
            f"{owner}: bulkhead= and max_concurrency= both say which pool to use; "
            "max_concurrency= makes a private one, bulkhead= names a shared one: set one"
        )
    weight = o["weight"]
    if isinstance(weight, bool) or not isinstance(weight, int) or weight < 1:
        raise ConfigurationError(f"{owner}: weight= must be a positive int, got {weight!r}")
    if max_concurrency is not None and weight > max_concurrency:
        raise ConfigurationError(
            f"{owner}: weight={weight} is more than max_concurrency={max_concurrency}: "
            "no call could ever run"
        )
    wait = o["acquire_timeout"]
    acquire_timeout: float | None = None
    if isinstance(wait, timedelta | str):
        acquire_timeout = parse_ttl(wait, owner, "acquire_timeout").total_seconds()
    elif wait is not None:
        acquire_timeout = _seconds(wait, owner, "acquire_timeout", zero_ok=True)
    if pool is None and max_concurrency is None:
        # Waits and weights for permits no bulkhead hands out would do nothing, silently.
        for setting, value, default in (
            ("acquire_timeout", acquire_timeout, 0.0),
            ("weight", weight, 1),
        ):
            if value != default:
                raise ConfigurationError(
                    f"{owner}: {setting}= needs max_concurrency= or bulkhead= "
                    "(the bulkhead it applies to)"
                )
    return pool, weight, acquire_timeout


def _seconds(value: Any, owner: str, setting: str, zero_ok: bool) -> float:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or value < 0 or (value == 0 and not zero_ok):
        bound = ">= 0" if zero_ok else "> 0"
        raise ConfigurationError(
            f"{owner}: {setting}= must be a finite number of seconds {bound}, got {value!r}"
        )
    return float(value)


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


def _callable_or_none(value: Any, owner: str, setting: str) -> Any:
    if value is not None and not callable(value):
        raise ConfigurationError(f"{owner}: {setting}= must be callable, got {value!r}")
    return value
