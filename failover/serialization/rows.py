"""Rows: how a store that keeps text turns an entry into it and back (`Serializer`).

One serializer serves every such store (SQL, Redis): the codec (JSON with its allowlist by
default, or signed pickle), the entry binding, the cipher, and what happens to an entry that
cannot be trusted. An entry is kept as four parts, whatever the store's layout: the payload
text (``codec-marker:text``, sealed in ``ENC(...)`` when a cipher is set), the value's type name,
and ``as_of`` and ``expire_on`` as microseconds since the Unix epoch, UTC.

Signed and encrypted payloads carry the entry's binding (`entry_binding`, a digest of its name and
key), so a payload moved under another entry's key is refused.

Bad entries: a payload of a type off the allowlist, corrupt text, an unknown codec marker, a
pickle whose signature does not verify, a payload that does not decrypt or belongs to another
entry, a type name that does not name the decoded value's type, or times that are missing or not
times. Reading one never runs code of the entry's choosing: `Serializer.load` and
`Serializer.envelope` raise `SerializationError` and nothing else (a store's ``find`` lets it
through: the engine counts a recover ``error`` and treats the call as a miss), and
`Serializer.each` skips the entry with a warning (``find_many``, ``find_all``).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

from ..errors import ConfigurationError, SerializationError, StoreError
from ..payload import ReferentialPayload, envelope
from .allowlist import checked_types
from .base import Codec, type_name
from .crypto import Cipher, is_sealed, seal, unseal
from .json_codec import JsonCodec

__all__ = ["Serializer", "datetime_of", "entry_binding", "micros", "time_or_none"]

log = logging.getLogger(__name__)

Payload = ReferentialPayload[Any]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)
_TYPE_MAX = 255  # the SQL store's payload_type column: informative and checked, so cut
_NO = object()  # equal to no time: what the memo of the last times starts with


def entry_binding(name: str, key: str) -> bytes:
    """The identity of an entry that signed and encrypted payloads carry: 16 bytes of blake2b
    over its name and key (length-prefixed, so that no two pairs run together)."""
    text = f"{len(name)}:{name}:{key}".encode("utf-8", "surrogatepass")
    return hashlib.blake2b(text, digest_size=16).digest()


def micros(value: datetime) -> int:
    """``value`` as microseconds since the Unix epoch.

    Raises:
        StoreError: a naive datetime.
    """
    try:
        return (value - _EPOCH) // _MICROSECOND
    except TypeError:
        raise StoreError(f"datetimes must be timezone-aware, got {value!r}") from None


def datetime_of(value: float) -> datetime:
    """The aware UTC datetime of microseconds since the Unix epoch."""
    return _EPOCH + timedelta(0, 0, value)  # positional: three times faster than by keyword


def time_or_none(value: object) -> datetime | None:
    """The aware UTC datetime of a stored time (microseconds since the Unix epoch), or ``None``
    when it is missing or not one (a row written by hand: text, a blob, out of range): for
    listing entries as stored, where a corrupt time must not end the listing."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return None
    try:
        return datetime_of(value)
    except (OverflowError, ValueError):  # out of datetime's range, NaN
        return None


class Serializer:
    """Codec, entry binding, cipher and bad-entry handling, shared by the stores that keep text.

    Args:
        codec: writes the values; default `JsonCodec` (with ``allowed_types``). Entries written
            as JSON stay readable whatever codec writes.
        cipher: encrypts what is written, when set; encrypted entries need it to be read, plain
            ones are read either way.
        allowed_types: more types the JSON codec may restore.
        owner: names the store in error messages; a store sets ``where`` once it knows more.

    Raises:
        ConfigurationError: ``codec`` is not a `Codec`, or ``cipher`` not a `Cipher` (naming
            ``owner``).
    """

    def __init__(
        self,
        codec: Codec | None = None,
        cipher: Cipher | None = None,
        allowed_types: Iterable[Any] = (),
        owner: str = "store",
    ) -> None:
        self.codec = _resolve_codec(codec, allowed_types, owner)
        if cipher is not None and not all(
            hasattr(cipher, a) for a in ("scheme", "encrypt", "decrypt")
        ):
            raise ConfigurationError(f"{owner}: cipher must be a Cipher, got {cipher!r}")
        self.cipher = cipher
        self.where = owner
        # Entries written as JSON are safe to read whatever this store writes now.
        self._json = self.codec if isinstance(self.codec, JsonCodec) else JsonCodec(allowed_types)
        self._readers: dict[str, Codec] = {"json": self._json, self.codec.marker: self.codec}
        self._unbound = cipher is None and self.codec is self._json
        self._last_times: tuple[object, object, datetime, datetime] = (_NO, _NO, _EPOCH, _EPOCH)

    # -- writing ----------------------------------------------------------------------------------

    def dump(self, name: str, key: str, value: Any) -> tuple[str, str]:
        """The payload text and type name of ``value`` stored as the entry ``(name, key)``.

        Raises:
            SerializationError: the codec cannot encode the value.
        """
        # JSON entries in clear check no binding: not computed for them (a quarter of an encoding).
        binding = b"" if self._unbound else entry_binding(name, key)
        try:
            text, payload_type = self.codec.encode(value, binding)
        except Exception as exc:  # a codec of the user's may raise its own errors
            detail = exc if isinstance(exc, SerializationError) else repr(exc)
            raise SerializationError(
                f"{self.where}: cannot store ({name!r}, {key!r}): {detail}"
            ) from exc
        text = f"{self.codec.marker}:{text}"
        if self.cipher is not None:
            text = seal(self.cipher, text, binding)
        return text, payload_type[:_TYPE_MAX]

    def stored(self, payload: Payload) -> tuple[str, str, int, int]:
        """The four stored parts of an envelope: payload text, type name, ``as_of`` and
        ``expire_on`` (microseconds since the epoch).

        Raises:
            SerializationError: the value cannot be encoded, or a time is missing.
            StoreError: a naive datetime.
        """
        as_of, expire_on = payload.as_of, payload.expire_on
        if as_of is None or expire_on is None:
            raise SerializationError(
                f"{self.where}: cannot store ({payload.name!r}, {payload.key!r}): a stored entry "
                "needs as_of and expire_on"
            )
        text, payload_type = self.dump(payload.name, payload.key, payload.payload)
        return text, payload_type, micros(as_of), micros(expire_on)

    # -- reading ----------------------------------------------------------------------------------

    def load(self, name: str, key: str, raw: Any, payload_type: Any) -> Any:
        """The value of the payload stored as the entry ``(name, key)``.

        Raises:
            SerializationError: the payload cannot be trusted or decoded (and nothing else).
        """
        try:
            # The binding only for the entries that check it: sealed ones, and signed codecs'.
            binding = entry_binding(name, key) if is_sealed(raw) else None
            text = raw if binding is None else unseal(self.cipher, raw, binding)
            marker, sep, body = text.partition(":")
            codec = self._readers.get(marker) if sep else None
            if codec is None:
                raise SerializationError(
                    f"unknown codec marker {marker[:20]!r} (this store reads "
                    f"{', '.join(sorted(self._readers))})"
                )
            if codec is self._json:
                value = codec.decode(body, payload_type)
            else:
                value = codec.decode(body, payload_type, binding or entry_binding(name, key))
            actual = type_name(type(value))[:_TYPE_MAX]
            if actual != payload_type:
                raise SerializationError(
                    f"its type name says {str(payload_type)[:80]!r}, its payload holds {actual!r}"
                )
            return value
        except Exception as exc:
            raise SerializationError(
                f"{self.where}: entry ({name!r}, {key!r}) cannot be decoded: {exc}"
            ) from exc

    def envelope(
        self,
        name: str,
        key: str,
        raw: Any,
        payload_type: Any,
        as_of: Any,
        expire_on: Any,
        label: Any = None,
    ) -> Payload:
        """The envelope of an entry from its four stored parts, and its label (kept only when
        it is a string: a label is never decoded).

        Raises:
            SerializationError: the entry cannot be trusted or decoded, or its times are missing
                or not times (and nothing else).
        """
        last = self._last_times
        if last[0] == as_of and last[1] == expire_on:
            # Entries written in one batch share their times (the slices of a scatter/gather
            # call): their datetimes are made once.
            when, until = last[2], last[3]
        else:
            try:
                if as_of is None or expire_on is None:
                    # Only a table of an earlier version allows NULL times; nothing writes them.
                    raise ValueError("as_of or expire_on is NULL")
                when, until = datetime_of(as_of), datetime_of(expire_on)
            except (TypeError, ValueError, OverflowError) as exc:
                # Times written by hand (NULL, out of range, or text where a number belongs)
                # make the entry as corrupt as a bad payload.
                raise SerializationError(
                    f"{self.where}: entry ({name!r}, {key!r}) has corrupt times: {exc}"
                ) from exc
            self._last_times = (as_of, expire_on, when, until)  # one tuple: safe across threads
        value = self.load(name, key, raw, payload_type)
        if label is not None and not isinstance(label, str):
            label = None  # written by hand: a label is text, or none
        return envelope(name, key, value, when, until, True, label=label)

    def each(
        self,
        name: str,
        rows: Iterable[Any],
        split: Callable[[str, Any], tuple[Any, ...]] | None = None,
    ) -> Iterator[tuple[str, Payload]]:
        """``(key, envelope)`` of each row; an entry that cannot be trusted or decoded is
        skipped with a warning.

        Args:
            name: the entries' name.
            rows: ``(key, payload, payload_type, as_of, expire_on)`` rows, then the label
                where the store keeps one, or with ``split``, whatever the store keeps.
            split: ``(name, row) -> (key, payload, payload_type, as_of, expire_on[, label])``, for a
                store that keeps an entry in another shape; it raises `SerializationError` (see
                `corrupt`) for a row that is not an entry.
        """
        for row in rows:
            try:
                key, *parts = row if split is None else split(name, row)
                yield key, self.envelope(name, key, *parts)
            except SerializationError as exc:
                log.warning("%s; skipped", exc)

    def corrupt(self, name: str, key: str, why: object) -> SerializationError:
        """The error of an entry that is not one (a store's own layout around the parts)."""
        return SerializationError(
            f"{self.where}: entry ({name!r}, {key!r}) cannot be decoded: {why}"
        )


def _resolve_codec(codec: Codec | None, allowed_types: Iterable[Any], owner: str) -> Codec:
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
