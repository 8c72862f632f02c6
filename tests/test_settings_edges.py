"""Configuration at its edges: every setting of ``@failover(...)``, of ``Failover(...)`` and of
``Failover.from_env`` refuses what cannot work when the failover is decorated or the engine
built (never at the first call), with a `ConfigurationError` that names the failover and the
setting (or the environment variable); every duration setting reads the same spellings.

The tables below are checked against the settings the code declares (`Options`, the
signature of `Failover`, the variables `from_env` reads): a setting added later without bad
values here fails `test_*_cover_every_*`."""

from __future__ import annotations

import inspect
import math
import os
import re
import typing
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pybreaker
import pytest

import failover
from failover import ConfigurationError, Failover, InMemoryStore
from failover.expiry import FixedTtl
from failover.metrics.base import NULL_METRICS
from failover.scatter import ListSplitter
from failover.settings import Options

# -- helpers ------------------------------------------------------------------------------

NAN, INF = math.nan, math.inf
PAST_A_CENTURY = 1e10  # seconds: past the century durations are bounded by (~317 years)


class Nothing:
    """A value of no kind any setting takes."""

    def __repr__(self) -> str:
        return "Nothing()"


class Splitter(ListSplitter[dict[str, Any]]):
    def __init__(self) -> None:
        super().__init__("id")


class Sliding:
    """An expiry policy of one's own: no ttl to compare a setting with."""

    def compute_expiry(self, definition: Any, now: datetime) -> datetime:
        return now + timedelta(minutes=1)

    def is_expired(self, payload: Any, now: datetime) -> bool:
        return payload.expire_on is not None and now >= payload.expire_on


def refused(text: str, owner: str, setting: str) -> None:
    """``text`` names ``owner`` and ``setting`` (as a word: ``ttl`` is not ``ttl_seconds``)."""
    assert owner in text, text
    assert re.search(rf"(?<![A-Za-z_]){re.escape(setting)}(?![A-Za-z_])", text), (setting, text)


# Settings a setting needs to be looked at at all (a weight needs a bulkhead).
NEEDS: dict[str, dict[str, Any]] = {
    "weight": {"max_concurrency": 5},
    "acquire_timeout": {"max_concurrency": 5},
    "refresh_ahead": {"fresh_for": "10m"},
}


def _decorate(name: str, on: Failover | None, **settings: Any) -> Any:
    if on is not None and "engine" not in settings:
        settings["engine"] = on

    def upstream() -> list[dict[str, Any]]:
        return []

    return failover.failover(name, **settings)(upstream)


def _takes_durations(hint: Any) -> bool:
    return timedelta in typing.get_args(typing.get_args(hint)[0])


DURATIONS = [name for name, hint in Options.__annotations__.items() if _takes_durations(hint)]
NINETY = ["90s", "1m30s", "1.5m", "90000ms", " 90s ", timedelta(seconds=90), 90, 90.0]
ZEROS = [0, 0.0, "0s", "0ms", "0m0s", timedelta(0)]


def _seconds(value: Any) -> float | None:
    return value.total_seconds() if isinstance(value, timedelta) else value


ENGINE_DURATIONS = ["store_interval", "store_timeout", "store_breaker_reset"]


def _engine(setting: str, value: Any) -> Failover:
    if setting == "reset_timeout":
        return Failover(metrics=False, breaker_defaults={"reset_timeout": value})
    return Failover(**{"metrics": False, setting: value})


def _engine_seconds(engine: Failover, setting: str) -> float | None:
    if setting == "reset_timeout":
        return typing.cast(float, engine.breaker_defaults["reset_timeout"])
    got = getattr(engine, setting)
    return got.total_seconds() if isinstance(got, timedelta) else got


class Recording(dict[str, str]):
    """An environment that records which variables were read."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.read: set[str] = set()

    def get(self, key: str, default: Any = None) -> Any:
        self.read.add(key)
        return super().get(key, default)

    def __getitem__(self, key: str) -> str:
        self.read.add(key)
        return super().__getitem__(key)


BAD_ENV: dict[str, list[str]] = {
    "STORE": ["nonsense", "memroy://", "memory://?max_entries=lots"],
    "ASYNC_WRITES": ["maybe", "2"],
    "ENABLED": ["maybe", "2", "enabled"],
    "METRICS": ["maybe", "-1"],
    "POLICY": ["nope", "RETHROW", "never-throw"],
    "STORE_TIMEOUT": ["soon", "0s", "-1s", "nan", "36501d"],
    "STORE_BREAKER_RESET": ["soon", "0s", "-1s"],
    "STORE_BREAKER_AFTER": ["many", "0", "-1", "1.5"],
    "PUBLISH_HEALTH": ["soon", "0s", "maybe"],
    "FLEET": ["nonsense", "http://redis.internal", "redis://h/x", "redis://h/0?prefix=a b"],
}
GOOD_ENV: dict[str, str] = {
    "STORE": "memory://",
    "ASYNC_WRITES": "false",
    "ENABLED": "true",
    "METRICS": "false",
    "POLICY": "never_throw",
    "STORE_TIMEOUT": "250ms",
    "STORE_BREAKER_RESET": "30s",
    "STORE_BREAKER_AFTER": "5",
    "PUBLISH_HEALTH": "false",
    "FLEET": "redis://127.0.0.1:1/0?prefix=edges:",
}


@pytest.fixture
def environment(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """``os.environ`` without the machine's own ``FAILOVER_*`` variables."""
    for variable in list(os.environ):
        if variable.startswith("FAILOVER_"):
            monkeypatch.delenv(variable)
    return monkeypatch


# -- flags --------------------------------------------------------------------------------


def test_flags_take_booleans_only(engine: Failover) -> None:
    # "no" is truthy: read as a flag it turned recover_all on.
    with pytest.raises(ConfigurationError) as caught:
        _decorate("flags", engine, splitter=Splitter(), recover_all="no")
    refused(str(caught.value), "'flags'", "recover_all")
    for flag in (True, False):
        d = _decorate(f"flags-{flag}", engine, splitter=Splitter(), recover_all=flag).definition
        assert d.recover_all is flag


# -- durations past a century -------------------------------------------------------------


def test_a_duration_past_a_century_is_refused_as_a_number_too(engine: Failover) -> None:
    """Text and timedeltas past a century were refused, numbers taken: a 1e10 s timeout then
    failed its first slow call (OverflowError out of the lock's wait) and such an
    acquire_timeout refused every contended call."""
    for setting in DURATIONS:
        if setting == "refresh_ahead":
            continue
        with pytest.raises(ConfigurationError) as caught:
            _decorate("long", engine, **NEEDS.get(setting, {}), **{setting: PAST_A_CENTURY})
        refused(str(caught.value), "'long'", setting)


def test_a_breaker_reset_past_a_century_fails_at_construction_not_when_it_opens() -> None:
    with pytest.raises(ConfigurationError, match=r"breaker_defaults\['reset_timeout'\]"):
        Failover(metrics=False, breaker_defaults={"fail_max": 1, "reset_timeout": PAST_A_CENTURY})
    # The longest it takes still opens and recovers.
    with Failover(metrics=False, breaker_defaults={"fail_max": 1, "reset_timeout": 3e9}) as eng:

        @failover.failover("open", engine=eng, breaker=True, policy="never_throw")
        def down() -> int:
            raise ValueError("down")

        assert down() is None
        assert down() is None  # the breaker is open now
        assert isinstance(down.referential().cause, pybreaker.CircuitBreakerError)


# -- zero -----------------------------------------------------------------------------------


@pytest.mark.parametrize("setting", DURATIONS)
def test_zero_is_read_alike_in_every_spelling(engine: Failover, setting: str) -> None:
    """Zero means something (fail fast, do not coalesce) or is refused: whatever its spelling."""
    outcomes: dict[str, object] = {}
    for zero in ZEROS:
        try:
            d = _decorate("zero", engine, **NEEDS.get(setting, {}), **{setting: zero}).definition
        except ConfigurationError as exc:
            refused(str(exc), "'zero'", setting)
            outcomes[repr(zero)] = "refused"
        else:
            outcomes[repr(zero)] = _seconds(getattr(d, setting))
    assert len(set(outcomes.values())) == 1, outcomes
    if setting in ("acquire_timeout", "store_interval"):  # 0 = fail fast / coalesce nothing
        assert set(outcomes.values()) == {0.0}, outcomes


@pytest.mark.parametrize("setting", [*ENGINE_DURATIONS, "reset_timeout"])
def test_zero_is_read_alike_in_every_spelling_by_the_engine(setting: str) -> None:
    outcomes: dict[str, object] = {}
    for zero in ZEROS:
        try:
            engine = _engine(setting, zero)
        except ConfigurationError as exc:
            refused(str(exc), "Failover", setting)
            outcomes[repr(zero)] = "refused"
        else:
            outcomes[repr(zero)] = _engine_seconds(engine, setting)
            engine.close()
    assert len(set(outcomes.values())) == 1, outcomes


# -- engine flags ---------------------------------------------------------------------------


@pytest.mark.parametrize("setting", ["enabled", "ignore_tenant"])
@pytest.mark.parametrize("value", ["false", "no", 0, 1, None])
def test_engine_flags_refuse_what_is_not_a_bool(setting: str, value: Any) -> None:
    """Read for its truth, ``enabled="false"`` (from a config file) turned the engine on."""
    with pytest.raises(ConfigurationError) as caught:
        Failover(**{"metrics": False, setting: value})
    refused(str(caught.value), "Failover", setting)


@pytest.mark.parametrize("value", ["yes", "false", 0, 1])
def test_async_writes_refuses_what_is_not_a_bool_or_none(value: Any) -> None:
    """``0 in (None, True, False)`` held: ``async_writes=0`` passed, then read as off by a
    plain engine and as on (``is not False``) by a routed one."""
    with pytest.raises(ConfigurationError) as caught:
        Failover(metrics=False, async_writes=value)
    refused(str(caught.value), "Failover", "async_writes")


@pytest.mark.parametrize("setting", ["enabled", "ignore_tenant"])
def test_engine_flags_take_booleans(setting: str) -> None:
    for flag in (True, False):
        with Failover(**{"metrics": False, setting: flag}) as engine:
            assert getattr(engine, setting) is flag


def test_async_writes_takes_true_false_or_none() -> None:
    for flag in (True, False, None):
        with Failover(metrics=False, async_writes=flag) as engine:
            assert engine.async_writes is flag


# -- Failover.from_env ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("variable", "raw"), [(name, raw) for name, values in BAD_ENV.items() for raw in values]
)
def test_a_bad_environment_variable_is_refused_naming_it(
    environment: pytest.MonkeyPatch, variable: str, raw: str
) -> None:
    environment.setenv(f"FAILOVER_{variable}", raw)
    with pytest.raises(ConfigurationError) as caught:
        Failover.from_env(metrics=False)
    refused(str(caught.value), "", f"FAILOVER_{variable}")


def test_a_bad_variable_under_another_prefix_is_named_with_it(
    environment: pytest.MonkeyPatch,
) -> None:
    for variable, raw in (("POLICY", "nope"), ("STORE_TIMEOUT", "soon"), ("STORE", "x")):
        environment.setenv(f"APP_{variable}", raw)
        with pytest.raises(ConfigurationError) as caught:
            Failover.from_env("APP_", metrics=False)
        refused(str(caught.value), "", f"APP_{variable}")
        environment.delenv(f"APP_{variable}")


@pytest.mark.parametrize("variable", list(BAD_ENV))
@pytest.mark.parametrize("blank", ["", "   "])
def test_a_blank_variable_is_unset(
    environment: pytest.MonkeyPatch, variable: str, blank: str
) -> None:
    environment.setenv(f"FAILOVER_{variable}", blank)
    with Failover.from_env(metrics=False) as engine:
        assert engine.policy is failover.ExceptionPolicy.RETHROW
        assert (engine.enabled, engine.store_timeout) == (True, 0.5)


@pytest.mark.parametrize("variable", list(GOOD_ENV))
def test_a_good_value_is_read_with_the_blanks_around_it(
    environment: pytest.MonkeyPatch, variable: str
) -> None:
    environment.setenv(f"FAILOVER_{variable}", f"  {GOOD_ENV[variable]}\t")
    with Failover.from_env() as engine:
        read = {
            "STORE": isinstance(engine.raw_store, InMemoryStore),
            "ASYNC_WRITES": engine.async_writes is False,
            "ENABLED": engine.enabled is True,
            "METRICS": engine.metrics is NULL_METRICS,
            "POLICY": engine.policy is failover.ExceptionPolicy.NEVER_THROW,
            "STORE_TIMEOUT": engine.store_timeout == 0.25,
            "STORE_BREAKER_RESET": engine.store_breaker_reset == 30.0,
            "STORE_BREAKER_AFTER": engine.store_breaker_after == 5,
            "PUBLISH_HEALTH": engine.publisher is None,
            "FLEET": engine.fleet is not None and "edges:" in engine.fleet.breakers.prefix,
        }
        assert read[variable]


# -- settings that cannot work together --------------------------------------------------


@pytest.mark.parametrize(
    ("settings", "named"),
    [
        ({"ttl": "1m", "store_interval": "10m"}, ("store_interval", "ttl")),
        ({"ttl": 60, "store_interval": 61}, ("store_interval", "ttl")),
    ],
)
def test_settings_that_cannot_work_together_fail_at_decoration(
    engine: Failover, settings: dict[str, Any], named: tuple[str, ...]
) -> None:
    with pytest.raises(ConfigurationError) as caught:
        _decorate("together", engine, **settings)
    for setting in named:
        refused(str(caught.value), "'together'", setting)


def test_a_store_interval_up_to_the_ttl_is_taken(engine: Failover) -> None:
    d = _decorate("interval-ttl", engine, ttl="1m", store_interval="1m").definition
    assert d.store_interval == d.ttl == timedelta(minutes=1)
    minute = FixedTtl(timedelta(minutes=1))
    with pytest.raises(ConfigurationError, match="'interval-fixed': store_interval=0:10:00"):
        _decorate("interval-fixed", engine, expiry=minute, store_interval="10m")
    # A policy of one's own decides expiry: the interval cannot be compared with it.
    d = _decorate("interval-expiry", engine, expiry=Sliding(), store_interval="10m").definition
    assert d.store_interval == timedelta(minutes=10)


def test_fresh_for_is_compared_with_a_fixed_ttl_given_as_expiry(engine: Failover) -> None:
    """`fresh_for=` longer than the ttl is refused; a `FixedTtl` given as `expiry=` has the ttl
    that counts, not the default ``ttl="1h"`` it was compared with."""
    minute = FixedTtl(timedelta(minutes=1))
    with pytest.raises(ConfigurationError) as caught:
        _decorate("fresh-fixed", engine, expiry=minute, fresh_for="10m")
    refused(str(caught.value), "'fresh-fixed'", "fresh_for")
    assert "ttl=0:01:00" in str(caught.value)
    d = _decorate("fresh-own", engine, expiry=Sliding(), fresh_for="10m").definition
    assert d.fresh_for == timedelta(minutes=10)


# -- unknown settings -----------------------------------------------------------------------


def test_an_unknown_setting_suggests_the_nearest_known_one() -> None:
    with pytest.raises(ConfigurationError, match=r"'named': unknown setting tll=; did you mean"):
        failover.failover("named", tll="1h")
    with pytest.raises(ConfigurationError, match=r"unknown setting timout=; did you mean timeout="):
        failover.failover("named", timout=2)
    with pytest.raises(ConfigurationError) as caught:
        failover.failover("named", color="red")
    assert "did you mean" not in str(caught.value)


def test_an_unknown_setting_of_an_unnamed_failover_names_the_function() -> None:
    def rates() -> float:
        return 1.0

    with pytest.raises(ConfigurationError) as caught:
        failover.failover(tll="1h")(rates)
    refused(str(caught.value), f"'{__name__}.", "tll")
    assert "rates" in str(caught.value)
    assert "did you mean ttl=" in str(caught.value)


# -- a refused engine -----------------------------------------------------------------------


def test_a_refused_engine_leaves_no_store_behind(tmp_path: Path) -> None:
    """Every setting is checked before the store is made: a refused engine has not created
    (and left open) a database file or a connection."""
    db = tmp_path / "refused.db"
    for bad in ({"store_interval": "soon"}, {"opentelemetry": "yes"}):
        with pytest.raises(ConfigurationError):
            Failover(f"sqlite:///{db}", metrics=False, **bad)
        assert not db.exists(), bad


# -- every setting, every duration, every variable -------------------------------------------

DURATION_BAD: list[Any] = [
    None,
    True,
    False,
    -1,
    NAN,
    INF,
    -INF,
    PAST_A_CENTURY,
    "",
    "   ",
    "soon",
    "90",
    "90 seconds",
    "1h1h",
    "30m1h",
    "-90s",
    "36501d",
    timedelta(seconds=-1),
    timedelta(days=36_501),
    [],
]

BAD_OPTIONS: dict[str, list[Any]] = {
    "ttl": [*DURATION_BAD, 0, "0s", timedelta(0)],
    "domain": ["", 0, True, b"shared"],
    "key": ["id", 1, True],
    "expiry": ["1h", 3600, timedelta(hours=1), True],
    "exceptions": [
        None,
        "ValueError",
        1,
        True,
        [ValueError],
        (ValueError, "KeyError"),
        ValueError("an instance"),
        KeyboardInterrupt,
        (Exception, SystemExit),
    ],
    "exclude": [None, "ValueError", [ValueError], ValueError("an instance"), 1],
    "store_if": [1, "truthy", True],
    "policy": ["", "rethrowing", "RETHROW", 1, True],
    "on_recovered": [1, "log", True],
    "splitter": [1, "id", True, lambda ctx: []],
    "recover_all": ["no", "false", 1, 0, None],
    "breaker": [1, 0, "true", timedelta(seconds=30)],
    "max_concurrency": [0, -1, True, False, 1.5, "2", NAN, INF],
    "bulkhead": ["", 1, True],
    "weight": [0, -1, True, 1.5, "1", NAN, INF],
    "acquire_timeout": [v for v in DURATION_BAD if v is not None],  # None: wait without limit
    "timeout": [v for v in DURATION_BAD if v is not None] + [0, "0s", timedelta(0)],
    "store_interval": [v for v in DURATION_BAD if v is not None],  # None: the engine's
    "single_flight": [1, 0, "yes", None],
    "fresh_for": [v for v in DURATION_BAD if v is not None] + [0, "0s", timedelta(0)],
    "refresh_ahead": [
        *(v for v in DURATION_BAD if v is not None),
        0,
        1,
        1.5,
        -0.5,
        "0s",
        "10m",
        "20m",
    ],
    "throttle": [v for v in DURATION_BAD if v is not None] + [0, "0s", timedelta(0)],
    "ttl_jitter": [-0.1, 1.5, "0.1", True, None, NAN, INF],
    "label": ["yes", 1, int],
    "tags": ["customer:1", ["customer:1"], 1],
    "rate": ["0/s", "abc", "-1/s", "10/0s", "1.5/s", "10/", "/s", "10/lots", 100, True, b"1/s"],
    "engine": ["memory://", True, 1],
}


def test_the_bad_values_cover_every_decorator_setting() -> None:
    assert set(BAD_OPTIONS) == set(Options.__annotations__)


@pytest.mark.parametrize(
    ("setting", "value"),
    [(setting, value) for setting, values in BAD_OPTIONS.items() for value in values],
)
def test_a_bad_decorator_setting_fails_at_decoration_naming_it(
    engine: Failover, setting: str, value: Any
) -> None:
    with pytest.raises(ConfigurationError) as caught:
        _decorate("edgy", engine, **NEEDS.get(setting, {}), **{setting: value})
    refused(str(caught.value), "'edgy'", setting)
    assert engine.definitions() == []


@pytest.mark.parametrize("setting", list(Options.__annotations__))
def test_every_decorator_setting_refuses_a_value_of_no_kind_it_takes(
    engine: Failover, setting: str
) -> None:
    with pytest.raises(ConfigurationError) as caught:
        _decorate("edgy", engine, **NEEDS.get(setting, {}), **{setting: Nothing()})
    refused(str(caught.value), "'edgy'", setting)


def test_the_duration_settings_are_found() -> None:
    assert {"ttl", "timeout", "acquire_timeout", "store_interval", "fresh_for"} <= set(DURATIONS)


@pytest.mark.parametrize(
    ("setting", "spelling"),
    [
        (setting, spelling)
        for spelling in NINETY
        for setting in DURATIONS
        # a number is refresh_ahead's fraction of fresh_for, not seconds
        if not (setting == "refresh_ahead" and isinstance(spelling, int | float))
    ],
)
def test_every_duration_setting_reads_every_spelling_alike(
    engine: Failover, setting: str, spelling: Any
) -> None:
    d = _decorate("ninety", engine, **NEEDS.get(setting, {}), **{setting: spelling}).definition
    assert _seconds(getattr(d, setting)) == 90.0


ENGINE_DURATION_BAD = [v for v in DURATION_BAD if v is not None]

BAD_ENGINE: dict[str, list[Any]] = {
    "store": [None, 1, "", "nonsense", "memroy://", "memory://?max_entries=lots", Nothing()],
    "async_writes": ["yes", "false", 1, 0],
    "tenant_resolver": ["acme", 1, True],
    "metrics": ["yes", 1],
    "policy": [None, "", "rethrowing", 1],
    "breaker_defaults": [
        "fail_max=3",
        {"fail_maxx": 3},
        {"fail_max": 0},
        {"fail_max": True},
        {"fail_max": 2.5},
        {"success_threshold": 0},
        {"reset_timeout": -1},
        {"reset_timeout": NAN},
        {"reset_timeout": INF},
        {"reset_timeout": True},
        {"reset_timeout": PAST_A_CENTURY},
        {"reset_timeout": "soon"},
        {"exclude": "ValueError"},
        {"state_storage": 1},
    ],
    "clock": [None, "now", 1],
    "enabled": ["false", "no", 0, 1, None],
    "timeout_workers": [0, -1, True, 1.5, "4"],
    "store_interval": ENGINE_DURATION_BAD,
    "opentelemetry": ["yes", 1],
    "store_timeout": [*ENGINE_DURATION_BAD, 0, "0s", timedelta(0)],
    "ignore_tenant": ["false", 1, 0, None],
    "publish_health": [*(v for v in ENGINE_DURATION_BAD if v is not False), 0, "0s"],
    "store_breaker_reset": [None, *ENGINE_DURATION_BAD, 0, "0s", timedelta(0)],
    "fleet": [1, "", "nonsense", "http://redis.internal", "redis://h/x", Nothing()],
    "store_breaker_after": [None, 0, -1, 1.5, True, "many", "0"],
}
ENGINE_SETTINGS = [p for p in inspect.signature(Failover).parameters if p != "self"]


def test_the_bad_values_cover_every_engine_setting() -> None:
    assert set(BAD_ENGINE) == set(ENGINE_SETTINGS)


@pytest.mark.parametrize(
    ("setting", "value"),
    [(setting, value) for setting, values in BAD_ENGINE.items() for value in values],
)
def test_a_bad_engine_setting_fails_at_construction_naming_it(setting: str, value: Any) -> None:
    with pytest.raises(ConfigurationError) as caught:
        Failover(**{"metrics": False, setting: value})
    refused(str(caught.value), "", setting)


@pytest.mark.parametrize("setting", [*ENGINE_DURATIONS, "reset_timeout"])
@pytest.mark.parametrize("spelling", NINETY)
def test_every_engine_duration_reads_every_spelling_alike(setting: str, spelling: Any) -> None:
    with _engine(setting, spelling) as engine:
        assert _engine_seconds(engine, setting) == 90.0


@pytest.mark.parametrize(
    ("setting", "spelling"),
    [
        (setting, spelling)
        for spelling in ENGINE_DURATION_BAD
        for setting in [*ENGINE_DURATIONS, "reset_timeout", "publish_health"]
        if not (setting == "publish_health" and spelling is False)  # False: publishing off
    ],
)
def test_every_engine_duration_refuses_the_same_spellings(setting: str, spelling: Any) -> None:
    with pytest.raises(ConfigurationError) as caught:
        _engine(setting, spelling)
    refused(str(caught.value), "Failover", setting)


def test_the_bad_values_cover_every_variable_from_env_reads() -> None:
    environ = Recording()
    Failover.from_env(environ=environ).close()
    assert environ.read == {f"FAILOVER_{name}" for name in BAD_ENV}
    assert set(GOOD_ENV) == set(BAD_ENV)
