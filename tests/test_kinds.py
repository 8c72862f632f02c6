"""`failover.kinds`: the one recogniser of object kinds (codec, keys, enrichment)."""

from __future__ import annotations

import dataclasses
import enum
from typing import NamedTuple

import attrs
import pydantic

from failover import kinds


class Colour(enum.Enum):
    RED = 1


@dataclasses.dataclass(frozen=True)
class Point:
    x: int
    y: int = 0


class Model(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(frozen=True)
    a: int


class Pair(NamedTuple):
    left: int
    right: int


@attrs.frozen
class Box:
    width: int
    height: int


def test_each_kind_is_recognised_with_its_fields() -> None:
    assert kinds.kind_of(Colour) == kinds.ENUM
    assert kinds.kind_of(Point) == kinds.DATACLASS
    assert kinds.kind_of(Model) == kinds.PYDANTIC
    assert kinds.kind_of(Pair) == kinds.NAMEDTUPLE
    assert kinds.kind_of(Box) == kinds.ATTRS
    assert kinds.kind_of(dict) is None
    assert kinds.field_names(Point, kinds.DATACLASS) == ["x", "y"]
    assert kinds.field_names(Model, kinds.PYDANTIC) == ["a"]
    assert kinds.field_names(Pair, kinds.NAMEDTUPLE) == ["left", "right"]
    assert kinds.field_names(Box, kinds.ATTRS) == ["width", "height"]
    assert kinds.field_names(Colour, kinds.ENUM) == []


def test_frozen_kinds() -> None:
    assert kinds.frozen(Point, kinds.DATACLASS)
    assert kinds.frozen(Model, kinds.PYDANTIC)
    assert kinds.frozen(Pair, kinds.NAMEDTUPLE)
    assert not kinds.frozen(dict, None)


def test_attrs_values_are_not_restorable_by_the_json_codec() -> None:
    from failover.serialization.allowlist import restorable

    assert restorable(Box) is None
    assert restorable(Point) == kinds.DATACLASS
