"""The decorator's settings, declared once: each field of `Options` names a setting, types it
(the decorator's ``**options``) and carries its `Setting`: the default and the check that turns
a value into the `FailoverDefinition` field of the same name. `DEFAULTS` is read from there, and
`resolve` runs the checks, then the rules across settings."""

# No `from __future__ import annotations`: the `Setting`s are read from the annotations at import.

import difflib
import inspect
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Annotated, Any, TypedDict, get_type_hints

import pybreaker

from .context import PolicyLike, RecoverContext
from .definition import ExpiryPolicy, FailoverDefinition
from .engine import Failover
from .engine import default as default_engine
from .errors import ConfigurationError
from .expiry import LONGEST, FixedTtl, parse_ttl, too_long
from .labels import check_label
from .policy import resolve_policy
from .scatter import check_splitter

__all__ = ["DEFAULTS", "Options", "Setting", "described", "parameters", "resolve"]


def _as_is(value: Any, owner: str, setting: str) -> Any:
    return value


@dataclass(frozen=True, slots=True)
class Setting:
    """One decorator setting: its default, and its check.

    Attributes:
        default: the value of a setting left out.
        check: ``(value, owner, setting) -> value``: the value the definition holds, or a
            `ConfigurationError` naming ``owner`` (``"failover 'rates'"``) and the setting.
    """

    default: Any
    check: Callable[[Any, str, str], Any] = _as_is


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


def _ttl(value: Any, owner: str, setting: str) -> timedelta:
    return parse_ttl(value, owner)


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


def _fresh_for(value: Any, owner: str, setting: str) -> timedelta | None:
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
        timeout: soft timeout: a slower upstream is served stale, and its late result is
            stored; seconds, a timedelta or ``"2s"``.
        store_interval: write coalescing: the least time between two stores of one key;
            ``None``: the engine's.
        single_flight: concurrent calls with the same key share one upstream call and one
            store write; each waits at most its own ``timeout``.
        fresh_for: cache-first window: a stored entry younger than this is served (up to date)
            without calling the upstream; older ones fail over as usual up to ``ttl``.
        refresh_ahead: with ``fresh_for``: a call that finds an entry this old (a fraction of
            ``fresh_for``, ``0.8``, or a duration) is answered from the store and refreshes it
            in the background, once per key.
        label: keep a readable label with each stored entry, for the dashboard and ``failover
            inspect``: ``True`` renders the call's arguments (``country(code='FR')``), a
            callable receives them as the function does and returns the label. Off by default:
            arguments may be sensitive, and a label is stored in clear.
        tags: a callable receiving the call's arguments as the function does (as ``key=``)
            and returning the entry's tags, an iterable of strings (e.g.
            ``lambda customer_id: [f"customer:{customer_id}"]``): ``engine.invalidate_tag(tag)``
            deletes every entry carrying the tag, across failovers. Off by default.
        rate: a rate limit on the upstream, a token bucket per failover: ``"100/s"``,
            ``"10/m"``, ``"5/2s"``; a call over it is refused (`failover.RateLimited`) and
            recovers from the store.
        engine: the engine to use; default: the process-wide default engine, resolved per call.
    """

    ttl: Annotated[timedelta | float | str, Setting("1h", _ttl)]
    domain: Annotated[str | None, Setting(None, _domain)]
    key: Annotated[Callable[..., object] | None, Setting(None, _callable_or_none)]
    expiry: Annotated[ExpiryPolicy | None, Setting(None, _expiry)]
    exceptions: Annotated[
        type[Exception] | tuple[type[Exception], ...] | Callable[[Exception], bool],
        Setting((Exception,), _exceptions),
    ]
    exclude: Annotated[type[Exception] | tuple[type[Exception], ...], Setting((), _types)]
    store_if: Annotated[Callable[[Any], bool] | None, Setting(None, _callable_or_none)]
    policy: Annotated[PolicyLike | None, Setting(None, _policy)]
    on_recovered: Annotated[
        Callable[[RecoverContext[Any], Any], object] | None, Setting(None, _callable_or_none)
    ]
    splitter: Annotated[Any, Setting(None)]
    recover_all: Annotated[bool, Setting(False, _flag)]
    breaker: Annotated[pybreaker.CircuitBreaker | bool | None, Setting(None, _breaker)]
    max_concurrency: Annotated[int | None, Setting(None, _permits)]
    bulkhead: Annotated[str | None, Setting(None, _pool)]
    weight: Annotated[int, Setting(1, _weight)]
    acquire_timeout: Annotated[timedelta | float | str | None, Setting(0.0, _wait)]
    timeout: Annotated[timedelta | float | str | None, Setting(None, _timeout)]
    store_interval: Annotated[timedelta | float | str | None, Setting(None, _interval)]
    single_flight: Annotated[bool, Setting(False, _flag)]
    fresh_for: Annotated[timedelta | float | str | None, Setting(None, _fresh_for)]
    refresh_ahead: Annotated[float | timedelta | str | None, Setting(None, _refresh_ahead)]
    label: Annotated[bool | Callable[..., object] | None, Setting(False, check_label)]
    tags: Annotated[Callable[..., Iterable[str]] | None, Setting(None, _callable_or_none)]
    rate: Annotated[str | None, Setting(None, _rate)]
    engine: Annotated[Failover | None, Setting(None)]


SETTINGS: dict[str, Setting] = {
    name: hint.__metadata__[0] for name, hint in Options.__annotations__.items()
}
"""Each setting's `Setting`, read from `Options`."""

DEFAULTS: dict[str, Any] = {name: setting.default for name, setting in SETTINGS.items()}
"""Each setting's default, read from `Options`."""


def parameters() -> list[inspect.Parameter]:
    """Each setting as the keyword parameter `help()` and IDEs show: its name, type and
    default, read from `Options` (``Annotated``'s `Setting` left out of the type)."""
    hints = get_type_hints(Options)
    return [
        inspect.Parameter(
            name, inspect.Parameter.KEYWORD_ONLY, default=s.default, annotation=hints[name]
        )
        for name, s in SETTINGS.items()
    ]


def described() -> dict[str, str]:
    """Each setting's first sentence in the ``Attributes:`` of `Options`'s docstring, on one
    line; a setting the docstring does not describe is left out (a test checks there is none)."""
    lines = inspect.cleandoc(Options.__doc__ or "").partition("Attributes:")[2].splitlines()
    found: dict[str, list[str]] = {}
    words: list[str] = []
    for line in lines:
        head, colon, rest = line.strip().partition(": ")
        if line.startswith("    ") and not line.startswith("     ") and colon and head in SETTINGS:
            words = found[head] = [rest]
        elif line.startswith("     "):
            words.append(line.strip())
    out = {}
    for name, parts in found.items():
        text = " ".join(parts)
        end = text.find(". ")
        out[name] = text if end < 0 else text[: end + 1]
    return out


def check_names(options: dict[str, Any], owner: str) -> None:
    """Refuse unknown settings, suggesting the nearest known one."""
    for name in options:
        if name not in SETTINGS:
            near = difflib.get_close_matches(name, SETTINGS, n=1)
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
    definition: each setting's own check, then the rules across settings.

    Raises:
        ConfigurationError: a setting that cannot work, naming the failover and the setting.
    """
    owner = f"failover {name!r}"
    given = {**DEFAULTS, **options}
    values = {
        setting: declared.check(given[setting], owner, setting)
        for setting, declared in SETTINGS.items()
        if setting != "engine"  # the engine is the decorator's, not the definition's
    }
    if values["expiry"] is None:
        values["expiry"] = FixedTtl(values["ttl"])
    values["splitter"] = check_splitter(values["splitter"], values["recover_all"], owner)
    _bulkhead(values, owner)
    _freshness(values, owner)
    _coalescing(values, owner)
    return FailoverDefinition(
        breaker_defaults=_breaker_defaults(given["engine"]),
        name=name,
        effective_name=values["domain"] or name,
        function=function,
        is_async=is_async,
        is_method=is_method,
        return_annotation=inspect.signature(fn).return_annotation,
        **values,
    )


def _breaker_defaults(engine: Failover | None) -> Callable[[], Mapping[str, Any]]:
    """Reads the ``breaker_defaults`` of the engine a failover runs on, when asked: the
    default engine may be configured after the failover is decorated."""
    if engine is not None:
        return lambda: engine.breaker_defaults
    return lambda: (
        {} if default_engine.installed is None else default_engine.installed.breaker_defaults
    )


def _bulkhead(values: dict[str, Any], owner: str) -> None:
    """The rules across a failover's bulkhead settings (each already checked on its own)."""
    pool, weight, max_concurrency = values["bulkhead"], values["weight"], values["max_concurrency"]
    if pool is not None and max_concurrency is not None:
        raise ConfigurationError(
            f"{owner}: bulkhead= and max_concurrency= both say which pool to use; "
            "max_concurrency= makes a private one, bulkhead= names a shared one: set one"
        )
    if max_concurrency is not None and weight > max_concurrency:
        raise ConfigurationError(
            f"{owner}: weight={weight} is more than max_concurrency={max_concurrency}: "
            "no call could ever run"
        )
    if pool is None and max_concurrency is None:
        # Waits and weights for permits no bulkhead hands out would do nothing, silently.
        for setting, default in (("acquire_timeout", 0.0), ("weight", 1)):
            if values[setting] != default:
                raise ConfigurationError(
                    f"{owner}: {setting}= needs max_concurrency= or bulkhead= "
                    "(the bulkhead it applies to)"
                )


def _freshness(values: dict[str, Any], owner: str) -> None:
    """The rules across ``fresh_for``, ``refresh_ahead`` and ``ttl``; ``refresh_ahead`` becomes
    the age at which a fresh entry is refreshed."""
    fresh_for, ahead = values["fresh_for"], values["refresh_ahead"]
    if fresh_for is None:
        if ahead is not None:
            raise ConfigurationError(
                f"{owner}: refresh_ahead= needs fresh_for= (it refreshes entries served "
                "from the store within their freshness)"
            )
        return
    interval = values["store_interval"]
    if interval:
        raise ConfigurationError(
            f"{owner}: store_interval= with fresh_for=: within fresh_for no call reaches the "
            "upstream, so each key is stored at most once per fresh_for already; a longer "
            "interval would drop the successes that renew an entry. Leave store_interval out"
        )
    # Off whatever the engine's: an engine-wide interval must not drop the renewing stores.
    values["store_interval"] = timedelta(0)
    expiry = values["expiry"]  # `ttl=`'s FixedTtl, or one given as expiry=
    if isinstance(expiry, FixedTtl) and fresh_for > expiry.ttl:
        raise ConfigurationError(
            f"{owner}: fresh_for={fresh_for} is longer than ttl={expiry.ttl}: an entry "
            "is expired before it stops being fresh; make fresh_for at most the ttl"
        )
    if isinstance(ahead, float):
        values["refresh_ahead"] = fresh_for * ahead
    elif ahead is not None and ahead >= fresh_for:
        raise ConfigurationError(
            f"{owner}: refresh_ahead={ahead} is not shorter than fresh_for={fresh_for}: "
            "no entry would be refreshed ahead of its end of freshness"
        )


def _coalescing(values: dict[str, Any], owner: str) -> None:
    """A ``store_interval`` longer than a fixed ttl: the entry expires before its key may be
    stored again, and until the interval ends the successes are not stored, so an outage then
    finds nothing to recover (an engine-wide interval is the engine's to know)."""
    interval, expiry = values["store_interval"], values["expiry"]
    if interval and isinstance(expiry, FixedTtl) and interval > expiry.ttl:
        raise ConfigurationError(
            f"{owner}: store_interval={interval} is longer than ttl={expiry.ttl}: an entry "
            "expires before its key may be stored again, and an outage until then finds "
            "nothing to recover; make store_interval well below the ttl"
        )
