"""The decorator's settings, declared once in `failover.settings.Options`."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

import pytest

import failover
from failover import ConfigurationError, FailoverDefinition
from failover.settings import DEFAULTS, SETTINGS, Options


def test_each_setting_is_declared_once_with_its_default_and_a_definition_field() -> None:
    fields = {f.name for f in dataclasses.fields(FailoverDefinition)}
    assert set(SETTINGS) == set(Options.__annotations__) == set(DEFAULTS)
    assert set(SETTINGS) - {"engine"} <= fields  # the engine is the decorator's


@pytest.mark.parametrize(
    ("setting", "value", "seconds"),
    [
        ("timeout", "2s", 2.0),
        ("timeout", "250ms", 0.25),
        ("timeout", timedelta(minutes=1), 60.0),
        ("timeout", 1.5, 1.5),
        ("acquire_timeout", "250ms", 0.25),
        ("acquire_timeout", timedelta(seconds=3), 3.0),
        ("acquire_timeout", 0, 0.0),
    ],
)
def test_every_duration_setting_reads_durations_as_ttl_does(
    engine: failover.Failover, setting: str, value: Any, seconds: float
) -> None:
    extra: dict[str, Any] = {"max_concurrency": 2} if setting == "acquire_timeout" else {}

    @failover.failover(f"d-{setting}-{value!r}", engine=engine, **{setting: value}, **extra)
    def f() -> int:
        return 1

    assert getattr(f.definition, setting) == seconds
    assert f() == 1


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"timeout": "soon"}, "'bad': timeout 'soon' is not a duration"),
        ({"timeout": "0s"}, "'bad': timeout must be positive"),
        ({"timeout": 0}, "'bad': timeout= must be a finite number of seconds > 0"),
        ({"acquire_timeout": "later", "max_concurrency": 1}, "acquire_timeout 'later' is not"),
    ],
)
def test_a_bad_duration_names_the_failover_and_the_setting(
    kwargs: dict[str, Any], match: str
) -> None:
    with pytest.raises(ConfigurationError, match=match):

        @failover.failover("bad", **kwargs)
        def f() -> None: ...
