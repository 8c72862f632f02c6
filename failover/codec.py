"""Codecs: how a stored value becomes the text of a SQL row, and back.

A `Codec` turns a value into ``(text, payload_type)`` and back. Two ship with the library:

- `JsonCodec` (the default): JSON, with non-JSON values tagged. It restores JSON types exactly,
  a few standard types always (``tuple``, ``set``, ``frozenset``, ``bytes``, ``datetime``,
  ``date``, ``time``, ``timedelta``, ``Decimal``, ``UUID``), and dataclasses, pydantic models,
  ``NamedTuple``\\ s and ``Enum``\\ s only for types on an allowlist. Decoding looks types up by
  name in that allowlist and nowhere else: it never imports a module named by a row and never
  calls anything but the allowed types' own constructors.
- `PickleCodec`: the explicit opt-in for values JSON cannot hold; every row is signed with
  HMAC-SHA256 over the entry's binding and the pickle, and a row whose signature does not verify
  (tampered with, or moved from another entry) is refused before it is unpickled.

A store passes every call a ``binding``: a digest of the entry's name and key. A codec that
authenticates its rows covers it, so that a row moved under another entry's key does not verify;
one that does not (JSON, which anyone able to write the table can write anyway) ignores it.

The allowlist is process-wide: `allow_annotation` (the engine calls it for every registered
failover, with the decorated function) and `allow_types` add to it. An annotation is closed over
its generic arguments (``list[Country]``, ``dict[str, Rate]``, ``Country | None``,
``Annotated[...]``) and, recursively, over the field types of the dataclasses, pydantic models and
``NamedTuple``\\ s it names.

The JSON tagging: a value JSON cannot hold is written as ``{"__t": TAG, "v": VALUE}`` where
``TAG`` is a short name for the standard types (``"tuple"``, ``"datetime"``, ...) and
``module.QualName`` for allowlisted types. A dict is written as a plain JSON object only when its
keys are strings other than ``"__t"``; any other dict is tagged ``"dict"`` with its items as a
list of pairs, so a user dict can never be mistaken for a tag.
"""

from __future__ import annotations

import base64
import dataclasses
import enum
import hashlib
import hmac
import inspect
import json
import logging
import pickle
import threading
import types
import typing
from collections.abc import Callable, Iterable, Sequence
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from typing import Any, Protocol, TypeVar, runtime_checkable
from uuid import UUID
from zoneinfo import ZoneInfo

from .errors import ConfigurationError, SerializationError

__all__ = [
    "Codec",
    "JsonCodec",
    "PickleCodec",
    "allow_annotation",
    "allow_types",
    "type_name",
]

log = logging.getLogger(__name__)


@runtime_checkable
class Codec(Protocol):
    """Turns stored values into text and back.

    A store writes ``f"{codec.marker}:{text}"`` in its payload column and ``payload_type`` beside
    it; on reading, the marker picks the codec, and a row whose ``payload_type`` does not name the
    decoded value's type is refused as corrupt.

    Attributes:
        marker: the short name that prefixes the rows this codec writes (``"json"``).
    """

    marker: str

    def encode(self, value: Any, binding: bytes = b"") -> tuple[str, str]:
        """The value as ``(text, payload_type)``; ``payload_type`` is ``type_name(type(value))``.

        Args:
            value: the value to store.
            binding: the entry the row is written for (a digest of its name and key); a codec
                that signs its rows signs it too. Empty: not bound to any entry.

        Raises:
            SerializationError: the value cannot be encoded.
        """
        ...

    def decode(self, text: str, payload_type: str, binding: bytes = b"") -> Any:
        """The value back from what `encode` returned for the same ``binding``.

        Raises:
            SerializationError: the text cannot be decoded, names a type not allowed, or (a
                signing codec) was not written for ``binding``.
        """
        ...


def type_name(tp: type) -> str:
    """The name a type is tagged and allowed under: ``module.QualName``."""
    return f"{tp.__module__}.{tp.__qualname__}"


# -- the allowlist --------------------------------------------------------------------------------

_ENUM, _DATACLASS, _PYDANTIC, _NAMEDTUPLE = range(4)
_kinds: dict[type, int | None] = {}


def _kind(tp: type) -> int | None:
    """Which of the restorable kinds ``tp`` is, or ``None`` (cached per type)."""
    try:
        return _kinds[tp]
    except KeyError:
        pass
    kind: int | None = None
    if issubclass(tp, enum.Enum):
        kind = _ENUM
    elif dataclasses.is_dataclass(tp):
        kind = _DATACLASS
    elif isinstance(getattr(tp, "__pydantic_fields__", None), dict) and hasattr(
        tp, "model_construct"
    ):
        kind = _PYDANTIC
    elif issubclass(tp, tuple) and isinstance(getattr(tp, "_fields", None), tuple):
        kind = _NAMEDTUPLE
    _kinds[tp] = kind
    return kind


def _field_names(tp: type, kind: int) -> Iterable[str]:
    if kind == _DATACLASS:
        return [f.name for f in dataclasses.fields(tp)]
    if kind == _PYDANTIC:
        return list(tp.__pydantic_fields__)  # type: ignore[attr-defined]
    if kind == _NAMEDTUPLE:
        return list(tp._fields)  # type: ignore[attr-defined]
    return []


def _field_types(tp: type, kind: int) -> list[Any]:
    """The annotations of ``tp``'s fields; raises ``NameError`` while a forward reference in
    them cannot be resolved yet."""
    if kind == _ENUM:
        return []
    hints = typing.get_type_hints(tp, include_extras=True)
    return [hints[name] for name in _field_names(tp, kind) if name in hints]


def _closure(annotation: Any) -> tuple[dict[str, type], list[Any]]:
    """Every restorable type an annotation names, directly or through fields, by name; and the
    types whose field annotations cannot be resolved yet."""
    found: dict[str, type] = {}
    unresolved: list[Any] = []
    stack = [annotation]
    seen: dict[int, Any] = {}  # holds what it saw, so that no id is reused during the walk
    while stack:
        tp = stack.pop()
        if id(tp) in seen:
            continue
        seen[id(tp)] = tp
        origin = typing.get_origin(tp)
        if origin is typing.Literal:
            continue  # its arguments are values, not types
        if origin is typing.Annotated:
            stack.append(typing.get_args(tp)[0])
            continue
        if origin is not None:
            stack.append(origin)
            stack.extend(typing.get_args(tp))
            continue
        if not isinstance(tp, type):
            continue  # None, TypeVars, Ellipsis
        kind = _kind(tp)
        if kind is None:
            continue
        found[type_name(tp)] = tp
        try:
            stack.extend(_field_types(tp, kind))
        except NameError:
            unresolved.append(tp)
        except Exception:  # an annotation typing cannot evaluate: its fields stay unknown
            log.debug("failover: cannot read the field types of %r", tp, exc_info=True)
    return found, unresolved


def _is_function(obj: Any) -> bool:
    return callable(obj) and not isinstance(obj, type) and typing.get_origin(obj) is None


class _Allowlist:
    """Types decodable by name. Functions and types whose annotations are not resolvable yet
    (forward references) wait in ``pending`` and are retried when a lookup misses."""

    def __init__(self) -> None:
        self.types: dict[str, type] = {}
        # By id: a callable object need not be hashable; the value keeps the id from being reused.
        self.pending: dict[int, Any] = {}
        self.lock = threading.Lock()

    def add(self, annotation: Any) -> None:
        with self.lock:
            if _is_function(annotation):
                self.pending[id(annotation)] = annotation
            else:
                self._add(annotation)

    def _add(self, annotation: Any) -> None:
        found, unresolved = _closure(annotation)
        self.types.update(found)
        self.pending.update((id(tp), tp) for tp in unresolved)

    def get(self, name: str, expected: type | None = None) -> type | None:
        """The type allowed under ``name``; pending annotations are resolved first when the name
        is missing, or names another type than ``expected`` (a class defined anew)."""
        tp = self.types.get(name)
        if tp is None or (expected is not None and tp is not expected):
            # Another thread may be resolving (holding the lock, ``pending`` already taken):
            # wait for it rather than miss a type it is about to add.
            if self.pending or self.lock.locked():
                with self.lock:
                    if self.pending:
                        self._resolve()
            tp = self.types.get(name)
        return tp

    def _resolve(self) -> None:
        pending, self.pending = self.pending, {}
        for item in pending.values():
            if not _is_function(item):
                self._add(item)
                continue
            try:
                hints = typing.get_type_hints(item, include_extras=True)
            except NameError:
                self.pending[id(item)] = item  # a forward reference not defined yet: try later
                continue
            except Exception:
                log.debug("failover: cannot read the return annotation of %r", item, exc_info=True)
                continue
            if "return" in hints:
                self._add(hints["return"])


_global: list[_Allowlist] = []  # the process-wide allowlist, made on first use
_global_lock = threading.Lock()


def _allowlist() -> _Allowlist:
    if not _global:
        with _global_lock:
            if not _global:
                _global.append(_Allowlist())
    return _global[0]


def allow_annotation(annotation_or_function: Any) -> None:
    """Allow every dataclass, pydantic model, ``NamedTuple`` and ``Enum`` an annotation names.

    The engine calls this with every registered failover's function. A function's return
    annotation is read lazily (with `typing.get_type_hints`) when a type is first looked up, so
    forward references defined after decoration work.

    Args:
        annotation_or_function: a type annotation (``list[Country]``, ``Rate | None``) or a
            function whose return annotation is allowed.
    """
    _allowlist().add(annotation_or_function)


def allow_types(*types: Any) -> None:
    """Allow these types (and the types their fields name) process-wide.

    Args:
        *types: dataclasses, pydantic models, ``NamedTuple``\\ s, ``Enum``\\ s, or annotations
            naming them.

    Raises:
        ConfigurationError: an argument is neither a type nor a type annotation.
    """
    for tp in _checked_types(types, "allow_types"):
        _allowlist().add(tp)


def _checked_types(types: Iterable[Any], owner: str) -> list[Any]:
    checked = list(types)
    for tp in checked:
        if not isinstance(tp, type) and typing.get_origin(tp) is None:
            raise ConfigurationError(f"{owner}: expected types or type annotations, got {tp!r}")
    return checked


# -- JSON -----------------------------------------------------------------------------------------

_TAG = "__t"
# Exactly these types (not subclasses: an IntEnum is an int to json) are JSON as they are.
_SCALARS = frozenset({str, int, float, bool, type(None)})
_STR = frozenset({str})
_encoder = json.JSONEncoder(ensure_ascii=False, check_circular=False, separators=(",", ":"))
# For text UTF-8 cannot hold (lone surrogates): escaped, it is text every database driver takes.
_ascii_encoder = json.JSONEncoder(ensure_ascii=True, check_circular=False, separators=(",", ":"))


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
        self.allowed_types = tuple(_checked_types(allowed_types, "JsonCodec"))
        self._local = _Allowlist()
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
        for allowlist in (self._local, _allowlist()):
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
            text = _encoder.encode(tree)
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
        kind = _kind(tp)
        name = type_name(tp)
        if kind is None:
            raise SerializationError(
                f"cannot encode a value of type {name}: JSON holds JSON types, the standard types "
                "and allowed dataclasses, pydantic models, NamedTuples and Enums"
            )
        if self._allowed(name, tp) is None:
            raise SerializationError(
                f"type {name} is not on the serialization allowlist: name it in the failover's "
                "return annotation, or pass it in allowed_types= (or to failover.codec.allow_types)"
            )
        if kind == _ENUM:
            return _tagged(name, self._enc(value.value))
        fields = {n: getattr(value, n) for n in _field_names(tp, kind)}
        if kind == _PYDANTIC and value.__pydantic_extra__:
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
        kind = _kind(tp)
        value = obj.get("v")
        try:
            if kind == _ENUM:
                return tp(value)
            if not isinstance(value, dict):
                raise TypeError("fields are not a mapping")
            if kind == _PYDANTIC:
                return _construct_model(tp, value)
            if kind == _DATACLASS:
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
    return tp.model_construct(**values)


# -- pickle ---------------------------------------------------------------------------------------

_MAC_SIZE = hashlib.sha256().digest_size


def _keys(key: Any, owner: str) -> list[bytes]:
    if isinstance(key, str | bytes):
        keys = [key]
    elif isinstance(key, Sequence):
        keys = list(key)
    else:
        raise ConfigurationError(f"{owner}: key must be bytes, str or a list of them, got {key!r}")
    out = []
    for k in keys:
        raw = k.encode() if isinstance(k, str) else k
        if not isinstance(raw, bytes) or not raw:
            raise ConfigurationError(f"{owner}: a signing key must be non-empty bytes or str")
        out.append(raw)
    if not out:
        raise ConfigurationError(f"{owner}: a signing key is required (pickle rows are signed)")
    return out


class PickleCodec:
    """Pickle, signed: the opt-in for values that JSON cannot hold.

    Each row is ``base64(HMAC-SHA256(key, binding + data) + data)``, where ``binding`` identifies
    the entry (its name and key): reading checks the signature (in constant time) before
    unpickling, so an unsigned or tampered row is refused, and so is a signed row moved under
    another entry's key. Rows signed without a binding (by earlier versions) do not verify
    for a binding: a store reads them as misses until the entry is stored again. Unpickling a
    verified row runs whatever the pickle says, so anyone holding the key can run code in every
    reader: keep the key secret, and prefer `JsonCodec`.

    Args:
        key: the signing key (bytes, or str encoded as UTF-8), or a list of keys for rotation:
            the first signs, every one verifies.

    Raises:
        ConfigurationError: no key, or an empty one.
    """

    marker = "pickle"

    def __init__(self, key: bytes | str | Sequence[bytes | str]) -> None:
        self._keys = _keys(key, "PickleCodec")

    def __repr__(self) -> str:
        return f"PickleCodec(<{len(self._keys)} key(s)>)"

    def _mac(self, key: bytes, data: bytes) -> bytes:
        return hmac.new(key, data, hashlib.sha256).digest()

    def encode(self, value: Any, binding: bytes = b"") -> tuple[str, str]:
        """The value pickled and signed together with ``binding``, base64-encoded; and its
        type's name.

        Raises:
            SerializationError: the value cannot be pickled.
        """
        try:
            data = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as exc:
            raise SerializationError(f"cannot pickle the value: {exc}") from exc
        signed = self._mac(self._keys[0], binding + data) + data
        return base64.b64encode(signed).decode("ascii"), type_name(type(value))

    def _verifies(self, mac: bytes, data: bytes) -> bool:
        return any(hmac.compare_digest(mac, self._mac(key, data)) for key in self._keys)

    def decode(self, text: str, payload_type: str, binding: bytes = b"") -> Any:
        """The value back, once its signature over ``binding`` and the pickle is verified.

        Raises:
            SerializationError: not base64, unsigned, signed with another key, tampered with,
                signed for another entry (or without a binding), or failing to unpickle.
        """
        try:
            signed = base64.b64decode(text, validate=True)
        except ValueError:
            raise SerializationError(f"{payload_type} value: pickle row is not base64") from None
        mac, data = signed[:_MAC_SIZE], signed[_MAC_SIZE:]
        if len(mac) < _MAC_SIZE or not self._verifies(mac, binding + data):
            if binding and len(mac) == _MAC_SIZE and self._verifies(mac, data):
                raise SerializationError(
                    f"{payload_type} value: pickle row refused, it is signed without an entry "
                    "binding (an earlier version wrote it): a miss until the entry is stored again"
                )
            raise SerializationError(
                f"{payload_type} value: pickle row refused, its signature does not verify "
                "(unsigned, tampered with, signed with another key, or moved from another entry)"
            )
        try:
            return pickle.loads(data)  # safe only because the signature verified above
        except Exception as exc:
            raise SerializationError(f"{payload_type} value: cannot unpickle ({exc})") from exc


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
    if _kind(annotation) is not None or getattr(annotation, "_is_protocol", False):
        return None
    if inspect.isabstract(annotation) or annotation.__module__ in ("collections.abc", "typing"):
        return None
    return annotation
