"""`JsonCodec`: a stored value as JSON text, and back; the default codec of every store.

It restores JSON types exactly, a few standard types always (``tuple``, ``set``, ``frozenset``,
``bytes``, ``datetime``, ``date``, ``time``, ``timedelta``, ``Decimal``, ``UUID``), and
dataclasses, pydantic models, ``NamedTuple``\\ s and ``Enum``\\ s only for types on an allowlist
(`failover.serialization.allowlist`). Decoding looks types up by name in that allowlist and
nowhere else: it never imports a module named by a row and never calls anything but the allowed
types' own constructors.

The JSON tagging: a value JSON cannot hold is written as ``{"__t": TAG, "v": VALUE}`` where
``TAG`` is a short name for the standard types (``"tuple"``, ``"datetime"``, ...) and
``module.QualName`` for allowlisted types. A dict is written as a plain JSON object only when its
keys are strings other than ``"__t"``; any other dict is tagged ``"dict"`` with its items as a
list of pairs, so a user dict can never be mistaken for a tag.
"""

from __future__ import annotations

import base64
import dataclasses
import inspect
import json
import types
import typing
from collections.abc import Callable, Iterable
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from typing import Any, TypeVar
from uuid import UUID
from zoneinfo import ZoneInfo

from .. import kinds
from ..errors import ConfigurationError, SerializationError
from .allowlist import Allowlist, checked_types, global_allowlist, restorable
from .base import Codec, type_name

__all__ = ["JsonCodec", "resolve_codec", "unencodable"]

_TAG = "__t"
# Exactly these types (not subclasses: an IntEnum is an int to json) are JSON as they are.
_SCALARS = frozenset({str, int, float, bool, type(None)})
_STR = frozenset({str})
_encoder = json.JSONEncoder(ensure_ascii=False, check_circular=False, separators=(",", ":"))


def _c_encoder(encoder: json.JSONEncoder) -> Callable[[Any], str]:
    """``encoder.encode``, made once at C speed where the interpreter has the C encoder:
    ``JSONEncoder.encode`` makes a new one on every call, which costs more than the encoding of
    a small value. Stateless (no circular check: the codec's own walk bounds the depth), so
    threads share it."""
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:  # an interpreter without the C speedups
        return encoder.encode
    basestring = (
        json.encoder.encode_basestring_ascii if encoder.ensure_ascii
        else json.encoder.encode_basestring
    )  # fmt: skip
    encode = make(
        None, encoder.default, basestring, None, encoder.key_separator,
        encoder.item_separator, encoder.sort_keys, encoder.skipkeys, encoder.allow_nan,
    )  # fmt: skip
    join = "".join
    return lambda tree: join(encode(tree, 0))


# For text UTF-8 cannot hold (lone surrogates): escaped, it is text every database driver takes.
_ascii_encoder = json.JSONEncoder(ensure_ascii=True, check_circular=False, separators=(",", ":"))
_encode = _c_encoder(_encoder)


def _tagged(tag: str, value: Any) -> dict[str, Any]:
    return {_TAG: tag, "v": value}


def _folded(out: dict[str, Any], value: datetime | time) -> dict[str, Any]:
    if value.fold:  # which of a repeated wall-clock time (isoformat leaves it out)
        out["f"] = 1
    return out


def _enc_zoned(tag: str, value: datetime | time) -> dict[str, Any]:
    tz = value.tzinfo
    if isinstance(tz, ZoneInfo) and tz.key:
        # A named zone comes back as itself, not as a fixed offset (and a time's zone, which
        # has no offset isoformat could write, not as nothing).
        out = _tagged(tag, value.replace(tzinfo=None).isoformat())
        out["z"] = tz.key
        return _folded(out, value)
    return _folded(_tagged(tag, value.isoformat()), value)


_Clock = TypeVar("_Clock", datetime, time)


def _zoned(value: _Clock, obj: dict[str, Any]) -> _Clock:
    zone = obj.get("z")
    if zone is not None:
        value = value.replace(tzinfo=ZoneInfo(zone))
    return value.replace(fold=1) if obj.get("f") else value


def _dec_datetime(obj: dict[str, Any]) -> datetime:
    return _zoned(datetime.fromisoformat(obj["v"]), obj)


def _dec_time(obj: dict[str, Any]) -> time:
    return _zoned(time.fromisoformat(obj["v"]), obj)


def _td(value: timedelta) -> list[int]:
    return [value.days, value.seconds, value.microseconds]


# The standard types, always allowed: type -> (tag, value -> JSON-able).
_STANDARD: dict[type, tuple[str, Callable[[Any], Any]]] = {
    date: ("date", date.isoformat),
    timedelta: ("timedelta", _td),
    Decimal: ("Decimal", str),
    UUID: ("UUID", str),
    bytes: ("bytes", lambda b: base64.b64encode(b).decode("ascii")),
}

_DECODERS: dict[str, Callable[[dict[str, Any]], Any]] = {
    "tuple": lambda o: tuple(o["v"]),
    "set": lambda o: set(o["v"]),
    "frozenset": lambda o: frozenset(o["v"]),
    "dict": lambda o: dict(o["v"]),
    "datetime": _dec_datetime,
    "date": lambda o: date.fromisoformat(o["v"]),
    "time": _dec_time,
    "timedelta": lambda o: timedelta(*o["v"]),
    "Decimal": lambda o: Decimal(o["v"]),
    "UUID": lambda o: UUID(o["v"]),
    "bytes": lambda o: base64.b64decode(o["v"], validate=True),
}


class JsonCodec:
    """JSON with tagged non-JSON values; restores only allowed types.

    Tuples, sets, frozensets, bytes, dicts with non-string keys, ``datetime`` and ``time``
    (aware ones with their offset, or their ``zoneinfo`` zone), ``date``, ``timedelta``,
    ``Decimal`` and ``UUID`` round-trip exactly. Dataclasses, pydantic models (their fields and
    extras; private attributes are not kept), ``NamedTuple``\\ s and ``Enum``\\ s round-trip when
    their type is on the process-wide allowlist or in ``allowed_types``; other values (and
    subclasses of the builtin types) cannot be encoded.

    Dataclasses and ``NamedTuple``\\ s are rebuilt through their constructor, pydantic models with
    ``model_construct`` (by field name, not re-validated: a stored row missing a field the class
    now requires is undecodable, hence a miss), enums by value.

    Args:
        allowed_types: more types allowed for this codec only (closed over their fields).

    Raises:
        ConfigurationError: ``allowed_types`` holds something that is not a type.
    """

    marker = "json"

    def __init__(self, allowed_types: Iterable[Any] = ()) -> None:
        self.allowed_types = tuple(checked_types(allowed_types, "JsonCodec"))
        self._local = Allowlist()
        for tp in self.allowed_types:
            self._local.add(tp)
        self._decoder = json.JSONDecoder(object_hook=self._hook)
        # The decoder's C scanner (typeshed does not declare it): value and end of a text.
        self._scan: Callable[[str, int], tuple[Any, int]] = self._decoder.scan_once  # type: ignore[attr-defined]

    def __repr__(self) -> str:
        names = ", ".join(
            type_name(t) if isinstance(t, type) else repr(t) for t in self.allowed_types
        )
        return f"JsonCodec(allowed_types=[{names}])"

    def _allowed(self, name: str, expected: type | None = None) -> type | None:
        for allowlist in (self._local, global_allowlist()):
            tp = allowlist.get(name, expected)
            if tp is not None and (expected is None or tp is expected):
                return tp
        return None

    def encode(self, value: Any, binding: bytes = b"") -> tuple[str, str]:
        """The value as compact JSON text, and its type's name (``binding`` is not used: JSON
        rows are not authenticated).

        Raises:
            SerializationError: a value of a type that is neither JSON, standard nor allowed; or
                a structure too deep or cyclic.
        """
        try:
            tree = self._enc(value)
            text = _encode(tree)
            if not text.isascii():
                try:
                    text.encode("utf-8")
                except UnicodeEncodeError:
                    text = _ascii_encoder.encode(tree)
            return text, type_name(type(value))
        except SerializationError:
            raise
        except RecursionError:
            raise SerializationError("value is nested too deeply, or cyclic") from None
        except Exception as exc:  # e.g. a dataclass field never set
            raise SerializationError(f"cannot encode the value as JSON: {exc!r}") from exc

    def _enc(self, value: Any) -> Any:
        tp = type(value)
        if tp is str or tp is int or tp is float or tp is bool or value is None:
            return value
        if tp is dict:
            return self._enc_dict(value)
        if tp is list:
            if _SCALARS.issuperset(map(type, value)):
                return value
            return [self._enc(v) for v in value]
        if tp is tuple:
            return _tagged("tuple", [self._enc(v) for v in value])
        if tp is set or tp is frozenset:
            return _tagged(tp.__name__, [self._enc(v) for v in value])
        if tp is datetime:
            return _enc_zoned("datetime", value)
        if tp is time:
            return _enc_zoned("time", value)
        standard = _STANDARD.get(tp)
        if standard is not None:
            return _tagged(standard[0], standard[1](value))
        return self._enc_object(value)

    def _enc_dict(self, value: dict[Any, Any]) -> Any:
        if (
            _SCALARS.issuperset(map(type, value.values()))
            and _STR.issuperset(map(type, value))
            and _TAG not in value
        ):
            return value  # flat JSON (the commonest payload), checked at C speed: as it is
        out = {}
        enc = self._enc
        for k, v in value.items():
            if type(k) is not str or k == _TAG:
                return _tagged("dict", [[enc(k), enc(v)] for k, v in value.items()])
            out[k] = enc(v)
        return out

    def _enc_object(self, value: Any) -> Any:
        tp = type(value)
        kind = restorable(tp)
        name = type_name(tp)
        if kind is None:
            raise SerializationError(
                f"cannot encode a value of type {name}: JSON holds JSON types, the standard types "
                "and allowed dataclasses, pydantic models, NamedTuples and Enums"
            )
        if self._allowed(name, tp) is None:
            raise SerializationError(
                f"type {name} is not on the serialization allowlist: name it in the failover's "
                "return annotation, or pass it in allowed_types= "
                "(or to failover.serialization.allowlist.allow_types)"
            )
        if kind == kinds.ENUM:
            return _tagged(name, self._enc(value.value))
        fields = {n: getattr(value, n) for n in kinds.field_names(tp, kind)}
        if kind == kinds.PYDANTIC and value.__pydantic_extra__:
            fields.update(value.__pydantic_extra__)
        return _tagged(name, self._enc_dict(fields))

    def decode(self, text: str, payload_type: str, binding: bytes = b"") -> Any:
        """The value back from its JSON text (``binding`` is not used).

        Raises:
            SerializationError: corrupt JSON, an unknown tag, a type not allowed, or fields that
                no longer fit the type.
        """
        try:
            try:
                # The scanner alone when it reads the whole text (compact JSON, as encode
                # writes): the full decoder's whitespace checks cost a third of a small row.
                value, end = self._scan(text, 0)
            except StopIteration:  # not JSON where it starts: the full decoder says why
                return self._decoder.decode(text)
            return value if end == len(text) else self._decoder.decode(text)
        except SerializationError as exc:
            raise SerializationError(f"{payload_type} value: {exc}") from None
        except RecursionError:
            raise SerializationError(f"{payload_type} value: nested too deeply") from None
        except Exception as exc:
            raise SerializationError(
                f"{payload_type} value: corrupt or undecodable ({exc!r})"
            ) from exc

    def _hook(self, obj: dict[str, Any]) -> Any:
        if _TAG not in obj:
            return obj
        tag = obj[_TAG]
        decoder = _DECODERS.get(tag)
        if decoder is not None:
            return decoder(obj)
        tp = self._allowed(tag) if isinstance(tag, str) else None
        if tp is None:
            raise SerializationError(f"type {tag!r} is not on the serialization allowlist")
        kind = restorable(tp)
        value = obj.get("v")
        try:
            if kind == kinds.ENUM:
                return tp(value)
            if not isinstance(value, dict):
                raise TypeError("fields are not a mapping")
            if kind == kinds.PYDANTIC:
                return _construct_model(tp, value)
            if kind == kinds.DATACLASS:
                return _construct_dataclass(tp, value)
            return tp(**value)
        except Exception as exc:
            raise SerializationError(f"cannot rebuild {tag}: {exc}") from exc


def _construct_dataclass(tp: type, values: dict[str, Any]) -> Any:
    fields = {f.name: f for f in dataclasses.fields(tp)}
    unknown = values.keys() - fields.keys()
    if unknown:
        raise TypeError(f"unknown fields {sorted(unknown)}")
    obj = tp(**{k: v for k, v in values.items() if fields[k].init})
    for k, v in values.items():
        if not fields[k].init:
            object.__setattr__(obj, k, v)  # also works on frozen dataclasses
    return obj


def _construct_model(tp: Any, values: dict[str, Any]) -> Any:
    # By field name, without validation: the row was valid when written. A model that changed
    # since (a required field added) refuses the row; changed field types are not re-checked.
    missing = [
        name for name, f in tp.__pydantic_fields__.items() if f.is_required() and name not in values
    ]
    if missing:
        raise TypeError(f"missing required fields {missing}")
    if "_fields_set" in values:
        # model_construct's own argument, never a field (a field cannot start with "_"): a row
        # naming it would set the model's private state to whatever it holds.
        raise TypeError("'_fields_set' is not a field")
    return tp.model_construct(**values)


# Exactly these (JsonCodec encodes by exact type: a subclass, OrderedDict or a str subclass,
# is refused), besides the standard ones and the allowed kinds.
_JSON_LIKE = frozenset(
    {str, int, float, bool, type(None), dict, list, tuple, set, frozenset, datetime, time}
)


def unencodable(annotation: Any) -> Any:
    """A type named by a return annotation that `JsonCodec` can never encode, or ``None`` when
    every type it names can be (or it cannot tell: ``Any``, type variables, protocols)."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return unencodable(typing.get_args(annotation)[0])
    if origin is not None:
        # The container itself (OrderedDict[str, int]), then what it holds; a union is none.
        container = () if origin is types.UnionType else (origin,)
        for arg in (*container, *typing.get_args(annotation)):
            if arg is not Ellipsis and (bad := unencodable(arg)) is not None:
                return bad
        return None
    if not isinstance(annotation, type) or annotation in (object, inspect.Signature.empty):
        return None  # unknown (no annotation at all included): nothing to say
    if annotation in _JSON_LIKE or annotation in _STANDARD:
        return None
    if restorable(annotation) is not None or getattr(annotation, "_is_protocol", False):
        return None
    if inspect.isabstract(annotation) or annotation.__module__ in ("collections.abc", "typing"):
        return None
    return annotation


def resolve_codec(codec: Codec | None, allowed_types: Iterable[Any], owner: str) -> Codec:
    """The codec a store that keeps text writes with: ``codec``, or JSON with ``allowed_types``
    (added to a given JSON codec's own).

    Raises:
        ConfigurationError: ``codec`` is not a `Codec`, or ``allowed_types`` not a list of
            types (naming ``owner``).
    """
    # A type or a name given alone (allowed_types=Country) is a list of one forgotten.
    if isinstance(allowed_types, type | str) or not isinstance(allowed_types, Iterable):
        raise ConfigurationError(
            f"{owner}: allowed_types must be a list of types, got {allowed_types!r}"
        )
    allowed = tuple(checked_types(allowed_types, f"{owner}: allowed_types"))
    if codec is None:
        return JsonCodec(allowed)
    if not all(hasattr(codec, a) for a in ("marker", "encode", "decode")):
        raise ConfigurationError(f"{owner}: codec must be a Codec, got {codec!r}")
    if allowed and isinstance(codec, JsonCodec):
        return JsonCodec((*codec.allowed_types, *allowed))
    return codec
