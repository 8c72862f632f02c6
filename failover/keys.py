"""Default keys: a canonical, process-independent encoding of a call's argument values, digested.

The raw key encodes each value with a type tag and, for variable-length values, a length prefix,
so the encoding is self-delimiting and unambiguous (``1`` vs ``"1"``, ``"a,b"`` vs ``["a", "b"]``).
Mappings and sets are encoded in sorted order of their encoded items, so their iteration order does
not matter. Nothing here uses ``hash()``, which ``PYTHONHASHSEED`` changes between processes.

Any ``str`` makes a key, lone surrogates included (``"\\ud800"``, from a path or a header decoded
with ``surrogateescape``): the text is digested as UTF-8 with ``surrogatepass``, which gives the
UTF-8 of every other string unchanged (so no stored key moves), and to a lone surrogate bytes
that no other string's UTF-8 holds (so it shares no key with one).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import re
import uuid
import warnings
from collections.abc import Callable, Mapping, Sequence, Set
from decimal import Decimal
from typing import Any

from . import kinds

__all__ = ["MEMO", "canonical", "digest", "key_tag", "make_key", "memo_of"]

_IDENTITY_REPR = re.compile(r" at 0x[0-9a-fA-F]+>$")
_warned_types: set[type] = set()


def _type_name(tp: type) -> str:
    return f"{tp.__module__}.{tp.__qualname__}"


def _str(v: str) -> str:
    return f"s{len(v)}:{v}"


def _seq(tag: str, items: Sequence[Any] | Set[Any]) -> str:
    return f"{tag}{len(items)}[{''.join(map(canonical, items))}]"


def _unordered(tag: str, encoded: list[str]) -> str:
    encoded.sort()
    return f"{tag}{len(encoded)}[{''.join(encoded)}]"


def _mapping(v: Mapping[Any, Any]) -> str:
    return _unordered("d", [canonical(k) + canonical(x) for k, x in v.items()])


def _other(v: Any) -> str:
    tp = type(v)
    kind = kinds.kind_of(tp)
    if kind == kinds.ENUM:
        return f"e{_type_name(tp)}:{canonical(v.value)}"
    if kind == kinds.NAMEDTUPLE:
        return f"n{_type_name(tp)}:{_seq('t', v)}"
    if kind == kinds.DATACLASS:
        values = {name: getattr(v, name) for name in kinds.field_names(tp, kind)}
        return f"D{_type_name(tp)}:{_mapping(values)}"
    if kind == kinds.PYDANTIC:
        # The field values themselves, as for dataclasses: model_dump() would turn a nested
        # model into a dict, and give Outer(a=Inner(x=1)) the key of Outer(a={"x": 1}).
        state = v.__dict__
        values = {name: state[name] for name in kinds.field_names(tp, kind) if name in state}
        extra = v.__pydantic_extra__
        if extra:
            values.update(extra)
        return f"P{_type_name(tp)}:{_mapping(values)}"
    # An attrs value is keyed by its repr (its fields, as attrs writes it), as it always was:
    # keying it by fields would move every stored entry of such a key.
    if isinstance(v, dt.datetime | dt.date | dt.time):
        return f"t{tp.__name__}:{v.isoformat()};"
    if isinstance(v, Decimal | uuid.UUID):
        return f"x{tp.__name__}:{_str(str(v))}"
    if isinstance(v, str):
        return _str(str(v))
    if isinstance(v, bytes | bytearray):
        return f"b{len(v)}:{bytes(v).hex()}"
    if isinstance(v, Mapping):
        return _mapping(v)
    if isinstance(v, Set):
        return _unordered("S", [canonical(x) for x in v])
    if isinstance(v, list | tuple):
        return _seq("l" if isinstance(v, list) else "t", v)
    text = repr(v)
    if _IDENTITY_REPR.search(text) and tp not in _warned_types:
        _warned_types.add(tp)
        warnings.warn(
            f"failover: {_type_name(tp)} has no value representation (its repr is its identity), "
            "so keys built from it differ between processes and calls; pass key= or give the "
            "type a __repr__",
            stacklevel=4,
        )
    return f"r{_type_name(tp)}:{_str(text)}"


_ENCODERS: dict[type, Callable[[Any], str]] = {
    str: _str,
    int: lambda v: f"i{v};",
    bool: lambda v: "T" if v else "F",
    type(None): lambda v: "N",
    float: lambda v: f"f{v!r};",
    tuple: lambda v: _seq("t", v),
    list: lambda v: _seq("l", v),
    dict: _mapping,
    set: lambda v: _unordered("S", [canonical(x) for x in v]),
    frozenset: lambda v: _unordered("S", [canonical(x) for x in v]),
}


def canonical(value: Any) -> str:
    """The canonical text of one value: equal values give equal texts in every process."""
    encoder = _ENCODERS.get(type(value))
    if encoder is not None:
        return encoder(value)
    return _other(value)


_blake2b = hashlib.blake2b


def _utf8(text: str) -> bytes:
    # "surrogatepass": a lone surrogate is 3 bytes (ED A0 80...) that valid UTF-8 never holds.
    return text.encode("utf-8", "surrogatepass")


def digest(name: str, raw: str) -> str:
    """The stored key: a 128-bit blake2b digest of ``f"{name}:{raw}"`` (UTF-8, lone surrogates
    passed through), as 32 hex characters."""
    return _blake2b(_utf8(f"{name}:{raw}"), digest_size=16).hexdigest()


def key_tag(key: object) -> str:
    """How a log line names a stored key without showing it: ``key#`` and 12 hex digits of a
    blake2b digest of the key. The decorator's keys are digests already, but a store used
    directly keeps whatever key it is given. ``key_tag(k)`` of a key the dashboard lists gives
    the tag its log lines show."""
    text = key if isinstance(key, str) else repr(key)
    return "key#" + _blake2b(_utf8(text), digest_size=6).hexdigest()


_MEMO_MAX = 4_096  # per name: a catalogue of reference data fits; a huge key space just misses
_memos: dict[str, dict[tuple[Any, ...], str]] = {}
_MEMO_TYPES = (str, int)
MEMO = _MEMO_TYPES
"""The types of argument whose keys are memoised (`memo_of`)."""


def memo_of(name: str) -> dict[tuple[Any, ...], str]:
    """The memo of ``name``'s keys: ``(value, ...) -> key``, for values all of a `MEMO` type
    only (``1 == 1.0 == True`` in a dict); what `make_key` fills."""
    memo = _memos.get(name)
    return _memos.setdefault(name, {}) if memo is None else memo


def make_key(name: str, values: tuple[Any, ...]) -> str:
    """The default key of a call whose bound argument values, in signature order, are ``values``.

    Keys of calls whose arguments are all exactly ``str`` or ``int`` (most reference-data
    lookups) are encoded inline and memoised, per name, so that one failover with a huge key
    space cannot flush the memo of the others. The memo is sound only for those types: equal
    tuples of them always mean equal values, which is not true in general (``1 == 1.0 == True``).
    """
    for v in values:
        if type(v) not in _MEMO_TYPES:
            return digest(name, _seq("t", values))
    memo = _memos.get(name)
    if memo is None:
        memo = memo_of(name)
    key = memo.get(values)
    if key is None:
        # Same text as _seq("t", values) for str and int, without the generic dispatch.
        raw = "".join([f"s{len(v)}:{v}" if type(v) is str else f"i{v};" for v in values])
        key = _blake2b(_utf8(f"{name}:t{len(values)}[{raw}]"), digest_size=16).hexdigest()
        if len(memo) >= _MEMO_MAX:
            memo.clear()
        memo[values] = key
    return key
