"""Default keys: unambiguous, spelling-insensitive, identical in every process."""

from __future__ import annotations

import dataclasses
import enum
import subprocess
import sys
import uuid
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Any, NamedTuple

import pydantic
import pytest
from hypothesis import given
from hypothesis import strategies as st

import failover
from failover import Failover
from failover.keys import canonical, make_key

from .conftest import Upstream


class Shade(enum.Enum):
    LIGHT = 1
    DARK = "1"


class Level(enum.IntEnum):
    ONE = 1  # equal to 1, and to True: only its type tells it apart


@dataclass(frozen=True)
class Box:
    a: Any
    b: Any = None


@dataclass(frozen=True)
class Crate:  # the same shape as Box, another type
    a: Any
    b: Any = None


class Inner(pydantic.BaseModel):
    x: Any = None


class Outer(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="allow")

    a: Any = None
    b: Any = None


scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False)
    | st.text(max_size=8)
    | st.binary(max_size=4)
    | st.sampled_from([*Shade, *Level])
)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.tuples(inner, inner)
        | st.dictionaries(st.text(max_size=4), inner, max_size=3)
        | st.frozensets(st.integers() | st.text(max_size=3), max_size=3)
        | st.builds(Box, inner, inner)
        | st.builds(Crate, inner, inner)
        | st.builds(Inner, x=inner)
        | st.builds(Outer, a=inner, b=inner)
        | st.builds(
            lambda a, extra: Outer(a=a, **extra), inner, st.dictionaries(st.just("c"), inner)
        )
    ),
    max_leaves=8,
)
arg_tuples = st.lists(values, max_size=3).map(tuple)


def fields(value: Any) -> dict[str, Any] | None:
    """The field values of a dataclass or a pydantic model (extras included), else ``None``."""
    if dataclasses.is_dataclass(value):
        return {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    if isinstance(value, pydantic.BaseModel):
        return {**value.__dict__, **(value.__pydantic_extra__ or {})}
    return None


def same(a: Any, b: Any) -> bool:
    """Python equality that also tells apart types Python equates (1 == 1.0 == True), at every
    depth (a model's fields included)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, enum.Enum):
        return a is b
    if (fa := fields(a)) is not None:
        return same(fa, fields(b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and a == 0.0:
        return str(a) == str(b)  # 0.0 and -0.0 are different values
    return bool(a == b)


@given(arg_tuples, arg_tuples)
def test_distinct_arguments_never_collide_equal_ones_match(a: tuple[Any], b: tuple[Any]) -> None:
    assert (make_key("n", a) == make_key("n", b)) == same(a, b)


def lookalike(data: st.DataObject, value: Any) -> Any:
    """``value`` with some parts swapped for their look-alikes: a model or dataclass for the
    dict of its fields (what ``model_dump`` gives) or for another type of the same shape, an enum
    for its value, a tuple for a list, an int for a float."""
    change = data.draw(st.booleans())
    if (found := fields(value)) is not None:
        inner = {k: lookalike(data, v) for k, v in found.items()}
        if change:
            return data.draw(st.sampled_from([inner, Box(**inner) if len(inner) == 2 else inner]))
        return type(value)(**inner)
    if isinstance(value, enum.Enum):
        return value.value if change else value
    if isinstance(value, tuple):
        items = [lookalike(data, v) for v in value]
        return items if change else tuple(items)
    if isinstance(value, list):
        return [lookalike(data, v) for v in value]
    if isinstance(value, dict):
        return {k: lookalike(data, v) for k, v in value.items()}
    if type(value) is int and change and abs(value) < 2**53:
        return float(value)
    return value


@given(arg_tuples, st.data())
def test_look_alike_arguments_never_collide(a: tuple[Any, ...], data: st.DataObject) -> None:
    b = tuple(lookalike(data, v) for v in a)
    assert (make_key("n", a) == make_key("n", b)) == same(a, b)


@given(arg_tuples)
def test_equal_arguments_always_match(a: tuple[Any, ...]) -> None:
    assert make_key("n", a) == make_key("n", tuple(a))
    assert len(make_key("n", a)) == 32


def test_classic_ambiguities_are_told_apart() -> None:
    pairs: list[tuple[Any, Any]] = [
        ((1,), ("1",)),
        (("a,b",), (["a", "b"],)),
        (("a", "b"), ("ab",)),
        (("a", "b"), ("a,b",)),
        ((1,), (True,)),
        ((1,), (1.0,)),
        ((None,), ("None",)),
        (([1, 2],), ((1, 2),)),
        ((b"a",), ("a",)),
        (({"a": 1},), ([("a", 1)],)),
    ]
    for a, b in pairs:
        assert make_key("n", a) != make_key("n", b), (a, b)


class Amount(pydantic.BaseModel):
    value: int


class Order(pydantic.BaseModel):
    amount: Amount | dict[str, int]


@dataclass(frozen=True)
class Line:
    amount: Any


def test_nested_models_keep_their_type_in_the_key() -> None:
    pairs: list[tuple[Any, Any]] = [
        (Order(amount=Amount(value=1)), Order(amount={"value": 1})),
        (Outer(a=Inner(x=1)), Outer(a={"x": 1})),
        (Outer(a=Inner(x=1)), Outer(a=Box(1))),
        (Outer(a=[Inner(x=1)]), Outer(a=[{"x": 1}])),
        (Line(Amount(value=1)), Line({"value": 1})),
        (Outer(a=1), Outer(a=1, c=None)),  # an extra field is part of the value
        (Outer(a=Level.ONE), Outer(a=1)),
    ]
    for a, b in pairs:
        assert make_key("n", (a,)) != make_key("n", (b,)), (a, b)
    assert make_key("n", (Order(amount=Amount(value=1)),)) == make_key(
        "n", (Order(amount=Amount(value=1)),)
    )


def test_names_separate_keys() -> None:
    assert make_key("a", ("x",)) != make_key("b", ("x",))
    assert make_key("a:b", ("x",)) != make_key("a", ("b:x",))


def test_unordered_containers_do_not_depend_on_order() -> None:
    assert canonical({"a": 1, "b": 2}) == canonical({"b": 2, "a": 1})
    assert canonical({3, 1, 2}) == canonical({2, 3, 1})
    assert canonical(frozenset({"x", "y"})) == canonical({"y", "x"})


class Color(enum.Enum):
    RED = "red"


@dataclass(frozen=True)
class Point:
    x: int
    y: int


class Pair(NamedTuple):
    a: int
    b: int


def test_value_types_have_value_keys() -> None:
    assert canonical(Color.RED) == canonical(Color("red"))
    assert canonical(Point(1, 2)) == canonical(Point(1, 2))
    assert canonical(Point(1, 2)) != canonical(Point(2, 1))
    assert canonical(Pair(1, 2)) != canonical((1, 2))
    assert canonical(date(2026, 1, 1)) != canonical(datetime(2026, 1, 1, tzinfo=UTC))
    u = uuid.UUID(int=5)
    assert canonical(u) == canonical(uuid.UUID(int=5))


def test_spelling_of_the_call_does_not_matter(engine: Failover, upstream: Upstream) -> None:
    @failover.failover("spell", engine=engine)
    def f(a: str, b: int = 2, *rest: int, flag: bool = False, **extra: str) -> object:
        return upstream((a, b, rest, flag, extra))

    f("x")
    upstream.fail()
    assert f(a="x") == ("x", 2, (), False, {})
    assert f("x", 2) == ("x", 2, (), False, {})
    assert f("x", b=2, flag=False) == ("x", 2, (), False, {})
    upstream.recover()
    f("x", 3, 4, 5, z="1", y="2")
    upstream.fail()
    assert f("x", 3, 4, 5, y="2", z="1")[2] == (4, 5)
    with pytest.raises(ConnectionError):
        f("x", 3, 5, 4, y="2", z="1")  # *args order matters


def test_identity_only_arguments_warn_once_per_type(engine: Failover) -> None:
    class Opaque:
        pass

    @failover.failover("opaque", engine=engine)
    def f(o: Opaque) -> int:
        return 1

    with pytest.warns(UserWarning, match="no value representation"):
        f(Opaque())
    f(Opaque())  # filterwarnings=error: a second warning would fail the test


def test_key_callable_gets_the_arguments_without_self(engine: Failover, upstream: Upstream) -> None:
    seen: list[tuple[Any, ...]] = []

    def key(code: str, lang: str = "en") -> str:
        seen.append((code, lang))
        return code.upper()

    class Repo:
        @failover.failover("keyed", key=key, engine=engine)
        def get(self, code: str, lang: str = "en") -> object:
            return upstream((code, lang))

    Repo().get("fr", lang="fr")
    upstream.fail()
    assert Repo().get("FR", "de") == ("fr", "fr")  # same raw key "FR"
    assert seen == [("fr", "fr"), ("FR", "de")]


SCRIPT = (
    "from failover.keys import make_key; "
    "print(make_key('n', ('FR', 1, 2.5, None, {'b': [1, (2, 3)], 'a': {'x', 'y', 'z'}}, b'x')))"
)


def test_keys_are_identical_across_hash_seeds() -> None:
    outputs = {
        subprocess.run(
            [sys.executable, "-c", SCRIPT],
            env={"PYTHONHASHSEED": seed, "PATH": ""},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for seed in ("1", "4242")
    }
    assert len(outputs) == 1
    assert outputs.pop().strip() == make_key("n", ("FR", 1, 2.5, None, _sample(), b"x"))


def _sample() -> dict[str, Any]:
    return {"b": [1, (2, 3)], "a": {"x", "y", "z"}}


@given(st.lists(st.text(max_size=6) | st.integers(), max_size=4).map(tuple))
def test_inline_fast_path_matches_the_generic_encoding(values: tuple[Any, ...]) -> None:
    from failover.keys import _memos, _seq, digest

    _memos.clear()
    assert make_key("n", values) == digest("n", _seq("t", values))
    assert make_key("n", values) == digest("n", _seq("t", values))  # memoised
