"""The decorator's settings, declared once: each field of `Options` names a setting, types it
(the decorator's ``**options``) and carries its `Setting`: the default and the check that turns
a value into the `FailoverDefinition` field of the same name. `DEFAULTS` is read from there, and
`resolve` runs the checks, then the rules across settings."""

# No `from __future__ import annotations`: the `Setting`s are read from the annotations at import.

import difflib
import inspect
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Annotated, Any, Literal, TypedDict, get_type_hints

import pybreaker

from .adaptive import AdaptiveTtl
from .context import PolicyLike, RecoverContext
from .definition import ExpiryPolicy, FailoverDefinition
from .engine import Failover
from .engine import default as default_engine
from .errors import ConfigurationError
from .expiry import FixedTtl, parse_ttl
from .labels import check_label
from .scatter import check_splitter
from .validators import (
    _breaker,
    _callable_or_none,
    _domain,
    _exceptions,
    _expiry,
    _flag,
    _fresh_for,
    _interval,
    _permits,
    _policy,
    _pool,
    _rate,
    _refresh_ahead,
    _single_flight,
    _throttle,
    _timeout,
    _ttl,
    _ttl_jitter,
    _types,
    _wait,
    _weight,
    as_is,
)

__all__ = ["DEFAULTS", "Options", "Setting", "described", "parameters", "resolve"]


@dataclass(frozen=True, slots=True)
class Setting:
    """One decorator setting: its default, and its check.

    Attributes:
        default: the value of a setting left out.
        check: ``(value, owner, setting) -> value``: the value the definition holds, or a
            `ConfigurationError` naming ``owner`` (``"failover 'rates'"``) and the setting.
    """

    default: Any
    check: Callable[[Any, str, str], Any] = as_is


class Options(TypedDict, total=False):
    """The keyword settings of `failover.failover`.

    Attributes:
        ttl: how long a stored result may be served: a timedelta, seconds, or ``"15m"``,
            ``"1h30m"``; or a callable ``(result, *args, **kwargs) -> duration | None`` that
            decides per result (``None``: 1 hour).
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
            store write; each waits at most its own ``timeout``. ``"fleet"``: one upstream
            call per key across the processes of the engine's ``fleet=`` (a lease per key in
            its Redis; see `failover.fleet.flown`).
        fresh_for: cache-first window: a stored entry younger than this is served (up to date)
            without calling the upstream; older ones fail over as usual up to ``ttl``. Or a
            callable ``(result, *args, **kwargs) -> duration | None`` asked of the stored entry
            (``None``: not fresh).
        refresh_ahead: with ``fresh_for``: a call that finds an entry this old (a fraction of
            ``fresh_for``, ``0.8``, or a duration) is answered from the store and refreshes it
            in the background, once per key.
        throttle: fail-safe throttle: after a failed call of a key was served stale, calls of
            that key are served the same stale entry without calling the upstream for this
            long (per key and tenant; counted as refused by the ``throttle`` guard).
        ttl_jitter: a fraction of the ttl (0 to 1) taken off each entry's, spread by its key, so
            that entries stored together do not expire together.
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

    ttl: Annotated[timedelta | float | str | Callable[..., object], Setting("1h", _ttl)]
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
    single_flight: Annotated[bool | Literal["fleet"], Setting(False, _single_flight)]
    fresh_for: Annotated[
        timedelta | float | str | Callable[..., object] | None, Setting(None, _fresh_for)
    ]
    refresh_ahead: Annotated[float | timedelta | str | None, Setting(None, _refresh_ahead)]
    throttle: Annotated[timedelta | float | str | None, Setting(None, _throttle)]
    ttl_jitter: Annotated[float, Setting(0.0, _ttl_jitter)]
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
    _expiry_policy(values, owner)
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


def _expiry_policy(values: dict[str, Any], owner: str) -> None:
    """The expiry policy: ``expiry=``, else `FixedTtl` (the inlined default), else for a
    callable ``ttl`` or a ``ttl_jitter`` an `AdaptiveTtl`; ``ttl`` becomes the default ttl."""
    ttl, jitter = values["ttl"], values["ttl_jitter"]
    adaptive = callable(ttl) and not isinstance(ttl, timedelta)
    if values["expiry"] is not None:
        if adaptive or jitter:
            setting = "ttl= as a callable" if adaptive else "ttl_jitter="
            raise ConfigurationError(
                f"{owner}: {setting} with expiry=: the expiry policy decides every entry's "
                "expiry alone; leave one out"
            )
        return
    if adaptive:
        values["ttl"] = parse_ttl(DEFAULTS["ttl"], owner)
    if adaptive or jitter:
        values["expiry"] = AdaptiveTtl(values["ttl"], ttl if adaptive else None, jitter, owner)
    else:
        values["expiry"] = FixedTtl(values["ttl"])


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
    if not isinstance(fresh_for, timedelta):  # a callable: its window is each entry's
        if isinstance(ahead, float):
            raise ConfigurationError(
                f"{owner}: refresh_ahead={ahead} is a fraction of fresh_for, which is a callable "
                "here (a window per entry): give refresh_ahead as a duration such as '4m'"
            )
        return
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
