"""The copying layer's isolation: a caller's object and the stored one never share anything
mutable, and an object immutable all the way down is not copied at all."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

import failover
from failover import Failover
from failover.stores.layers.copying import deep_copy

from .conftest import Upstream


@dataclass(frozen=True)
class Point:
    x: int
    tags: tuple[str, ...] = ()


@dataclass(frozen=True)
class Holder:
    items: list[int] = field(default_factory=list)


@pytest.mark.parametrize(
    "value",
    [
        "text",
        3,
        (1, "a", None),
        ((1, 2), ("a",)),
        Point(1, ("a", "b")),
        (Point(2), 3),
    ],
)
def test_immutable_values_are_not_copied(value: Any) -> None:
    assert deep_copy(value) is value


@pytest.mark.parametrize(
    "value",
    [
        {"code": "FR", "currencies": ["EUR"]},
        {"code": "FR", "nested": {"list": [1, [2, 3]]}},
        {"pairs": ([1], [2])},
        [{"a": 1}, [2]],
        ([1], 2),
        Holder([1, 2]),
        {"point": Point(1), "holder": Holder([3])},
    ],
)
def test_mutable_values_share_nothing_mutable(value: Any) -> None:
    copy = deep_copy(value)
    assert copy == value

    def mutables(v: Any) -> list[int]:
        """The ids of every mutable object inside ``v``."""
        if isinstance(v, dict):
            return [id(v), *(i for x in v.values() for i in mutables(x))]
        if isinstance(v, list):
            return [id(v), *(i for x in v for i in mutables(x))]
        if isinstance(v, tuple):
            return [i for x in v for i in mutables(x)]
        if isinstance(v, Holder):
            return mutables(v.items)
        return []

    assert not set(mutables(copy)) & set(mutables(value))


def test_a_flat_list_inside_a_dict_is_isolated_both_ways(
    engine: Failover, upstream: Upstream
) -> None:
    @failover.failover("flat-list", engine=engine)
    def f(x: str) -> Any:
        return upstream({"code": x, "currencies": ["EUR"], "pair": (["a"], 1)})

    live = f("FR")
    live["currencies"].append("CHF")  # the caller mutates its live result
    live["pair"][0].append("b")
    upstream.fail()
    recovered = f("FR")
    assert recovered == {"code": "FR", "currencies": ["EUR"], "pair": (["a"], 1)}
    recovered["currencies"].clear()  # ... or a recovered one
    assert f("FR")["currencies"] == ["EUR"]


def test_a_frozen_dataclass_holding_a_list_is_isolated(
    engine: Failover, upstream: Upstream
) -> None:
    @failover.failover("holder", engine=engine)
    def f(x: str) -> Any:
        return upstream(Holder([1]))

    live = f("a")
    live.items.append(2)
    upstream.fail()
    recovered = f("a")
    assert recovered.items == [1]
    recovered.items.append(3)
    assert f("a").items == [1]
