"""Codecs: exact round trips, the allowlist, and rows that must never decode (or run code)."""

from __future__ import annotations

import base64
import collections
import collections.abc
import dataclasses
import enum
import hashlib
import hmac
import json
import math
import os
import pickle
import threading
from collections import OrderedDict
from dataclasses import dataclass, field, make_dataclass
from datetime import UTC, date, datetime, time, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Any, NamedTuple, Optional
from uuid import UUID
from zoneinfo import ZoneInfo

import pydantic
import pytest
from hypothesis import given
from hypothesis import strategies as st

from failover.errors import ConfigurationError, SerializationError
from failover.serialization.allowlist import allow_annotation, allow_types
from failover.serialization.base import Codec, type_name
from failover.serialization.json_codec import JsonCodec, unencodable
from failover.serialization.pickle_codec import PickleCodec

# -- types used by the tests (module level, as real result types are) -----------------------------


class Continent(enum.Enum):
    EUROPE = "EU"
    ASIA = "AS"


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 2


@dataclass(frozen=True, slots=True)
class City:
    name: str
    founded: date | None = None


@dataclass
class Country:
    code: str
    continent: Continent
    capital: City
    cities: list[City] = field(default_factory=list)
    tags: tuple[str, ...] = ()
    checked: int = field(init=False, default=0)


class Rate(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(frozen=True)

    currency: str = pydantic.Field(alias="ccy")
    value: Decimal
    at: datetime


class Quote(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="allow")

    rates: dict[str, Rate]
    level: Level


class Point(NamedTuple):
    x: int
    y: int = 0
    label: Optional[str] = None  # noqa: UP045 - Optional is one of the forms walked


class Secret:
    """Not a dataclass, model, NamedTuple or Enum: JSON never holds it."""

    def __init__(self, value: str) -> None:
        self.value = value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other.value == self.value

    __hash__ = None  # type: ignore[assignment]


@dataclass
class NeverAllowed:
    """Named by no annotation and no test's allowed_types."""

    x: int


@dataclass
class Later:
    """Named only by a forward reference resolved after decoration."""

    n: int


def fresh_codec(*types: Any) -> JsonCodec:
    return JsonCodec(allowed_types=types)


def round_trip(value: Any, codec: Codec | None = None) -> Any:
    codec = codec or JsonCodec()
    text, payload_type = codec.encode(value)
    assert payload_type == type_name(type(value))
    return codec.decode(text, payload_type)


def same(value: Any, codec: Codec | None = None) -> Any:
    back = round_trip(value, codec)
    assert back == value
    assert type(back) is type(value)
    return back


# -- JSON and the standard types ------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        "text",
        "",
        "ünïcødé ✓",
        0,
        -(10**40),
        1.5,
        -0.0,
        True,
        False,
        None,
        [],
        {},
        [1, "a", None, [2.5, {"k": [True]}]],
        {"a": {"b": [None]}, "": 1},
    ],
)
def test_json_values_round_trip_exactly(value: Any) -> None:
    same(value)


def test_float_specials_round_trip() -> None:
    assert math.isnan(round_trip(math.nan))
    assert round_trip([math.inf, -math.inf]) == [math.inf, -math.inf]


def test_plain_json_is_written_untagged() -> None:
    text, payload_type = JsonCodec().encode({"a": [1, "x"], "b": None})
    assert json.loads(text) == {"a": [1, "x"], "b": None}
    assert payload_type == "builtins.dict"


@pytest.mark.parametrize(
    "value",
    [
        (1, "a", (2, None)),
        (),
        {1, 2, 3},
        frozenset({"a", "b"}),
        b"\x00\xffbytes",
        {1: "int key", (1, 2): "tuple key", None: "none key"},
        {"__t": "tuple", "v": [1, 2]},  # a user dict that looks like a tag
        {"__t": "builtins.eval"},
        [{"__t": 1}, {"nested": {"__t": {"__t": "dict"}}}],
        date(2026, 2, 28),
        time(13, 45, 1, 999),
        time(8, 0, tzinfo=timezone(timedelta(hours=5, minutes=30))),
        timedelta(days=-3, seconds=5, microseconds=7),
        Decimal("1.10"),
        Decimal("-0.000"),
        Decimal("1E+30"),
        Decimal("Infinity"),
        UUID("12345678-1234-5678-1234-567812345678"),
    ],
    ids=repr,
)
def test_standard_types_round_trip_exactly(value: Any) -> None:
    same(value)


def test_datetimes_round_trip_with_their_zone() -> None:
    utc = same(datetime(2026, 3, 1, 12, 30, 15, 123456, tzinfo=UTC))
    assert utc.tzinfo is UTC
    offset = same(datetime(2026, 3, 1, 12, 30, tzinfo=timezone(timedelta(hours=-3))))
    assert offset.utcoffset() == timedelta(hours=-3)
    naive = same(datetime(2026, 3, 1, 12, 30))
    assert naive.tzinfo is None
    paris = ZoneInfo("Europe/Paris")
    # 02:30 happens twice on 2026-10-25 in Paris: fold tells which.
    second = datetime(2026, 10, 25, 2, 30, tzinfo=paris, fold=1)
    back = same(second)
    assert back.tzinfo is paris
    assert back.fold == 1
    assert back.utcoffset() == timedelta(hours=1)


def test_times_round_trip_with_their_zone() -> None:
    paris = ZoneInfo("Europe/Paris")
    back = same(time(8, 30, tzinfo=paris, fold=1))
    assert back.tzinfo is paris  # a time's zone has no offset of its own: isoformat drops it
    assert back.fold == 1


def test_text_utf8_cannot_hold_is_escaped() -> None:
    lone = "file-\udcff.txt"  # a lone surrogate, as os.fsdecode makes of undecodable bytes
    text, _ = JsonCodec().encode({lone: [lone, "é"]})
    text.encode("utf-8")  # what every database driver does with it
    same({lone: [lone, "é"]})


# -- allowed types --------------------------------------------------------------------------------


def test_allowed_types_round_trip_nested() -> None:
    codec = fresh_codec(Country, Quote, Point)
    country = Country(
        "FR",
        Continent.EUROPE,
        City("Paris", date(1, 1, 1)),
        [City("Lyon"), City("Nice", None)],
        ("a", "b"),
    )
    country.checked = 7  # a field outside __init__ comes back too
    back = same(country, codec)
    assert back.capital == City("Paris", date(1, 1, 1))
    assert type(back.cities[0]) is City
    assert back.checked == 7
    at = datetime(2026, 1, 1, tzinfo=UTC)
    quote = Quote(rates={"EUR": Rate(ccy="EUR", value=Decimal("1.0850"), at=at)}, level=Level.HIGH)
    quote_back = same(quote, codec)
    assert quote_back.rates["EUR"].value == Decimal("1.0850")
    assert type(quote_back.level) is Level
    same(Point(1, 2, "p"), codec)
    same(Point(3), codec)
    same(Level.LOW, codec)
    same(Continent.ASIA, codec)


def test_pydantic_extras_are_kept() -> None:
    quote = Quote(rates={}, level=Level.LOW, source="ecb")  # type: ignore[call-arg]
    back = same(quote, fresh_codec(Quote))
    assert back.model_extra == {"source": "ecb"}


def test_a_type_off_the_allowlist_cannot_be_encoded() -> None:
    with pytest.raises(SerializationError, match=r"NeverAllowed is not on the serialization allow"):
        JsonCodec().encode([NeverAllowed(1)])


@pytest.mark.parametrize("value", [Secret("x"), OrderedDict(a=1), object(), [1, Secret("y")]])
def test_other_types_cannot_be_encoded(value: Any) -> None:
    with pytest.raises(SerializationError, match="cannot encode"):
        JsonCodec().encode(value)


def test_a_row_naming_a_type_off_the_allowlist_is_refused() -> None:
    text, _ = fresh_codec(NeverAllowed).encode(NeverAllowed(1))
    with pytest.raises(SerializationError, match=r"NeverAllowed' is not on the serialization"):
        JsonCodec().decode(text, "x")


@pytest.mark.parametrize(
    "tag",
    [
        "os.system",
        "posix.system",
        "builtins.eval",
        "subprocess.Popen",
        "pickle.loads",
        "x",
        1,
        None,
    ],
)
def test_a_row_naming_any_callable_is_refused(tag: Any, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    text = json.dumps({"__t": tag, "v": f"touch {marker}"})
    with pytest.raises(SerializationError):
        JsonCodec().decode(text, "x")
    assert not marker.exists()


@pytest.mark.parametrize(
    "text",
    [
        "{not json",
        "",
        '{"__t": "datetime", "v": "not a date"}',
        '{"__t": "bytes", "v": "***"}',
        '{"__t": "dict", "v": [[[1], 2]]}',  # an unhashable key
        '{"__t": "tuple"}',
        "[" * 100_000 + "]" * 100_000,
    ],
)
def test_corrupt_rows_are_refused(text: str) -> None:
    with pytest.raises(SerializationError):
        JsonCodec().decode(text, "builtins.dict")


def test_rows_that_no_longer_fit_their_type_are_refused() -> None:
    codec = fresh_codec(Country, Quote, Continent)
    name = type_name(City)
    for fields in ({"name": "x", "unknown": 1}, {"founded": None}, "not a mapping"):
        text = json.dumps({"__t": name, "v": fields})
        with pytest.raises(SerializationError, match="cannot rebuild"):
            codec.decode(text, name)
    with pytest.raises(SerializationError, match="missing required"):
        codec.decode(json.dumps({"__t": type_name(Quote), "v": {"level": 1}}), "q")
    with pytest.raises(SerializationError, match="cannot rebuild"):
        codec.decode(json.dumps({"__t": type_name(Continent), "v": "MARS"}), "c")


def test_deep_or_cyclic_values_cannot_be_encoded() -> None:
    cyclic: list[Any] = []
    cyclic.append(cyclic)
    with pytest.raises(SerializationError, match="too deeply"):
        JsonCodec().encode(cyclic)


# -- the allowlist --------------------------------------------------------------------------------


@dataclass
class Leaf:
    n: int


class Colour(enum.Enum):
    RED = 1


@dataclass
class Node:
    """Recursive, and reaching its other types only through generic arguments."""

    leaf: Annotated[Leaf | None, "doc"]
    children: list[Node]
    by_colour: dict[str, tuple[Colour, ...]]


class Wrapper(NamedTuple):
    nodes: Optional[list[Node]]  # noqa: UP045 - Optional is one of the forms walked


def test_annotations_are_walked_through_generics_and_fields() -> None:
    for value in (Leaf(1), Colour.RED, Wrapper(None)):
        with pytest.raises(SerializationError):
            JsonCodec().encode(value)
    allow_annotation(dict[str, Wrapper] | None)
    tree = Node(Leaf(1), [Node(None, [], {"x": (Colour.RED,)})], {})
    same(Wrapper([tree]))


def test_a_forward_reference_is_resolved_when_first_needed() -> None:
    def fetch() -> list[DefinedLater]:  # not defined yet, as at decoration time
        raise NotImplementedError

    allow_annotation(fetch)  # does not raise: the annotation is read when a type is looked up

    @dataclass
    class DefinedLater:
        n: int

    globals()["DefinedLater"] = DefinedLater  # as if the module defined it after the function
    try:
        same([DefinedLater(1)])
    finally:
        del globals()["DefinedLater"]


def test_a_functions_return_annotation_allows_its_types() -> None:
    def fetch() -> Later | None:
        raise NotImplementedError

    with pytest.raises(SerializationError):
        JsonCodec().encode(Later(3))
    allow_annotation(fetch)
    same(Later(3))


def test_allow_types_and_codec_allowed_types() -> None:
    @dataclass
    class Extra:
        when: datetime

    with pytest.raises(SerializationError):
        JsonCodec().encode(Extra(datetime(2026, 1, 1, tzinfo=UTC)))
    same(Extra(datetime(2026, 1, 1, tzinfo=UTC)), fresh_codec(Extra))
    allow_types(Extra)
    same(Extra(datetime(2026, 1, 1, tzinfo=UTC)))


def test_a_class_defined_anew_replaces_the_old_one() -> None:
    def make() -> type:
        @dataclass
        class Again:
            n: int

        return Again

    first, second = make(), make()
    allow_types(first)
    allow_types(second)
    assert type(round_trip(second(1))) is second


@dataclass
class Raced:
    """Allowed through a field annotation that blocks while it is read (the race test)."""

    n: int


def test_a_lookup_during_another_threads_resolution_waits_for_it() -> None:
    reading, release = threading.Event(), threading.Event()

    def gate() -> None:
        reading.set()
        release.wait(10)

    # Its field annotation names a function not defined yet: the type waits in ``pending``.
    holder = make_dataclass(
        "Holder", [("raced", "_race_gate() or Raced")], namespace={"__module__": __name__}
    )
    codec = fresh_codec(holder)
    text = json.dumps({"__t": type_name(Raced), "v": {"n": 1}})
    results: dict[int, Any] = {}

    def decode(i: int) -> None:
        try:
            results[i] = codec.decode(text, "x")
        except SerializationError as exc:
            results[i] = exc

    globals()["_race_gate"] = gate
    try:
        first = threading.Thread(target=decode, args=(0,))
        first.start()
        assert reading.wait(10)  # the first lookup is resolving, and blocks in the gate
        second = threading.Thread(target=decode, args=(1,))
        second.start()
        second.join(0.2)
        release.set()
        first.join(10)
        second.join(10)
    finally:
        release.set()
        del globals()["_race_gate"]
    assert results == {0: Raced(1), 1: Raced(1)}


@pytest.mark.parametrize("bad", [42, "Country", None])
def test_allowed_types_must_be_types(bad: Any) -> None:
    with pytest.raises(ConfigurationError):
        allow_types(bad)
    with pytest.raises(ConfigurationError):
        JsonCodec(allowed_types=[bad])


# -- property: anything JSON-like round-trips exactly ---------------------------------------------

ZONES = [ZoneInfo("Europe/Paris"), UTC, timezone(timedelta(hours=-3, minutes=-30))]
scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False)
    | st.text()
    | st.binary(max_size=20)
    | st.decimals(allow_nan=False)
    | st.datetimes(timezones=st.none() | st.sampled_from(ZONES))
    | st.dates()
    | st.times(timezones=st.none() | st.sampled_from(ZONES[1:]))
    | st.timedeltas()
    | st.uuids()
)
hashables = st.recursive(scalars, lambda inner: st.tuples(inner, inner), max_leaves=5)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.tuples(inner, inner)
        | st.dictionaries(st.text(max_size=5) | st.just("__t"), inner, max_size=4)
        | st.dictionaries(hashables, inner, max_size=3)
        | st.frozensets(hashables, max_size=3)
    ),
    max_leaves=20,
)


def _typed(value: Any) -> Any:
    """The value with the type of every part, so that 1 == 1.0 == True does not hide a change."""
    if isinstance(value, dict):
        return ("dict", sorted((repr(_typed(k)), _typed(v)) for k, v in value.items()))
    if isinstance(value, list | tuple):
        return (type(value).__name__, [_typed(v) for v in value])
    if isinstance(value, frozenset | set):
        return (type(value).__name__, sorted(repr(_typed(v)) for v in value))
    return (type(value).__name__, repr(value))


@given(values)
def test_json_like_values_round_trip_exactly(value: Any) -> None:
    assert _typed(round_trip(value)) == _typed(value)


# -- pickle ---------------------------------------------------------------------------------------


class Exploit:
    """Unpickling it would create a file: proof that a refused row never ran."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (Path.write_text, (self.path, "pwned"))


class ShellExploit:
    """Unpickling it would run a shell command."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (f"touch {self.path}",))


def test_pickle_round_trips_anything_picklable() -> None:
    codec = PickleCodec(b"k" * 32)
    same(Secret("s"), codec)
    same({"a": (1, {2}), "b": OrderedDict(x=1)}, codec)


@pytest.mark.parametrize("key", [None, b"", "", [], [b"ok", b""], 42])
def test_pickle_needs_a_signing_key(key: Any) -> None:
    with pytest.raises(ConfigurationError, match="key"):
        PickleCodec(key)


@pytest.mark.parametrize("exploit", [Exploit, ShellExploit])
def test_unsigned_tampered_or_foreign_pickle_rows_never_run(exploit: Any, tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    data = pickle.dumps(exploit(marker))
    codec = PickleCodec(b"right key")
    honest, _ = codec.encode("honest value")
    signed = base64.b64decode(honest)
    rows = {
        "unsigned": base64.b64encode(data).decode(),
        "short": base64.b64encode(b"x").decode(),
        "tampered": base64.b64encode(signed[:32] + data).decode(),
        "other key": base64.b64encode(
            hmac.new(b"wrong key", data, hashlib.sha256).digest() + data
        ).decode(),
        "not base64": "%%%",
    }
    for why, text in rows.items():
        with pytest.raises(SerializationError):
            codec.decode(text, "x")
        assert not marker.exists(), why
    assert codec.decode(honest, "builtins.str") == "honest value"


def test_a_pickle_row_is_bound_to_its_entry(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    codec = PickleCodec(b"right key")
    here, there = b"h" * 16, b"t" * 16
    text, _ = codec.encode(Exploit(marker), there)  # signed with the key, for another entry
    with pytest.raises(SerializationError, match="moved from another entry"):
        codec.decode(text, "x", here)
    with pytest.raises(SerializationError, match="does not verify"):
        codec.decode(text, "x")  # nor for no entry at all
    assert not marker.exists()
    honest, _ = codec.encode([1], here)
    assert codec.decode(honest, "builtins.list", here) == [1]


def test_a_pickle_row_signed_before_binding_is_refused_saying_so() -> None:
    codec = PickleCodec(b"key")
    unbound, _ = codec.encode({"v": 1})  # as earlier versions signed: over the pickle alone
    with pytest.raises(SerializationError, match="without an entry binding"):
        codec.decode(unbound, "builtins.dict", b"h" * 16)


def test_pickle_key_rotation() -> None:
    old = PickleCodec("old")
    text, _ = old.encode([1, 2])
    rotated = PickleCodec(["new", "old"])
    assert rotated.decode(text, "list") == [1, 2]
    new_text, _ = rotated.encode([3])
    with pytest.raises(SerializationError):
        old.decode(new_text, "list")


def test_unpicklable_values_are_a_serialization_error() -> None:
    with pytest.raises(SerializationError, match="cannot pickle"):
        PickleCodec("k").encode(lambda: None)


def test_codecs_are_codecs() -> None:
    assert isinstance(JsonCodec(), Codec)
    assert isinstance(PickleCodec("k"), Codec)
    assert "Country" in repr(JsonCodec([Country]))
    assert "s3cr3t" not in repr(PickleCodec("s3cr3t"))


# -- property: arbitrary JSON, registered types, and rows that are noise --------------------------

any_text = st.text(st.characters(exclude_categories=()) | st.characters(categories=["Cs"]))
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False)  # infinities included: written as JSON's Infinity
    | any_text,  # lone surrogates included
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(any_text | st.sampled_from(["__t", "v", "z", "f"]), inner, max_size=4)
    ),
    max_leaves=25,
)


@given(json_values)
def test_arbitrary_json_round_trips_exactly(value: Any) -> None:
    assert _typed(round_trip(value)) == _typed(value)


def registered() -> tuple[Country, Quote, Point, Continent, Level]:
    """A failover's function whose return annotation allows the types below."""
    raise NotImplementedError


allow_annotation(registered)

aware = st.datetimes(timezones=st.sampled_from(ZONES))
cities = st.builds(City, name=any_text, founded=st.none() | st.dates())
countries = st.builds(
    Country,
    code=st.text(max_size=3),
    continent=st.sampled_from(Continent),
    capital=cities,
    cities=st.lists(cities, max_size=3),
    tags=st.lists(any_text, max_size=3).map(tuple),
)
rates = st.builds(
    Rate,
    ccy=st.text(max_size=3),
    value=st.decimals(allow_nan=False, allow_infinity=False),
    at=aware,
)
quotes = st.builds(
    lambda rates, level, extra: Quote(rates=rates, level=level, **extra),
    st.dictionaries(st.text(max_size=3), rates, max_size=3),
    st.sampled_from(Level),
    st.dictionaries(st.sampled_from(["note", "source"]), json_values, max_size=2),
)
points = st.builds(Point, x=st.integers(), y=st.integers(), label=st.none() | any_text)
objects = countries | quotes | points | st.sampled_from([*Continent, *Level])
registered_values = objects | st.lists(objects, max_size=3) | st.dictionaries(any_text, objects)


@given(registered_values)
def test_registered_types_round_trip_exactly(value: Any) -> None:
    back = JsonCodec().decode(*JsonCodec().encode(value))
    assert _typed_deep(back) == _typed_deep(value)


def _typed_deep(value: Any) -> Any:
    """`_typed`, through dataclasses, models and enums: equal only if restored exactly."""
    if isinstance(value, pydantic.BaseModel) or (
        hasattr(value, "__dataclass_fields__") and not isinstance(value, type)
    ):
        return ("object", _fields_deep(value))
    if isinstance(value, enum.Enum):
        return ("enum", type_name(type(value)), value.name)
    if isinstance(value, dict):
        return ("dict", sorted((repr(k), _typed_deep(v)) for k, v in value.items()))
    if isinstance(value, list | tuple):
        return (type_name(type(value)), [_typed_deep(v) for v in value])
    return _typed(value)


def _fields_deep(value: Any) -> Any:
    if isinstance(value, pydantic.BaseModel):
        extra = value.__pydantic_extra__ or {}
        return (type_name(type(value)), _typed_deep(value.__dict__), _typed_deep(extra))
    held = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    return (type_name(type(value)), _typed_deep(held))


@given(any_text, any_text)
def test_noise_never_decodes_to_anything_but_json_or_an_error(text: str, payload_type: str) -> None:
    try:
        JsonCodec().decode(text, payload_type)
    except SerializationError:
        pass
    else:
        json.loads(text)  # only well-formed JSON text decodes
    with pytest.raises(SerializationError):
        PickleCodec(b"key").decode(text, payload_type, b"b" * 16)


@given(registered_values, st.data())
def test_edited_rows_decode_to_an_error_or_a_value(value: Any, data: st.DataObject) -> None:
    """A row with characters replaced, inserted, removed or cut off never raises anything but
    `SerializationError`; a signed row decodes to nothing but the value signed."""
    binding = b"b" * 16
    for codec in (JsonCodec(), PickleCodec(b"key")):
        text, payload_type = codec.encode(value, binding)
        at = data.draw(st.integers(0, len(text)))
        edit = data.draw(st.sampled_from(["replace", "insert", "remove", "cut"]))
        noise = data.draw(any_text.filter(bool))
        edited = {
            "replace": text[:at] + noise + text[at + len(noise) :],
            "insert": text[:at] + noise + text[at:],
            "remove": text[:at] + text[at + len(noise) :],
            "cut": text[:at],
        }[edit]
        try:
            back = codec.decode(edited, payload_type, binding)
        except SerializationError:
            continue
        if isinstance(codec, PickleCodec):
            assert _typed_deep(back) == _typed_deep(value)


class _Label(str):
    """A subclass of a builtin: JSON would write it as a plain str, so it is refused."""


class _Level(enum.IntEnum):
    LOW = 1


@pytest.mark.parametrize(
    "annotation",
    [
        OrderedDict,
        OrderedDict[str, int],
        collections.Counter[str],
        collections.defaultdict[str, int],
        _Label,
        list[_Label],
        dict[str, collections.deque[int]],
    ],
)
def test_unencodable_names_what_the_json_codec_refuses(annotation: Any) -> None:
    bad = unencodable(annotation)
    assert bad is not None
    with pytest.raises(SerializationError, match="cannot encode"):
        JsonCodec().encode(bad())


@pytest.mark.parametrize(
    "annotation",
    [
        dict[str, int],
        list[tuple[int, str]] | None,
        bool,
        _Level,
        datetime,
        date,
        Decimal,
        collections.abc.Mapping[str, int],
    ],
)
def test_unencodable_passes_what_the_json_codec_encodes(annotation: Any) -> None:
    assert unencodable(annotation) is None
