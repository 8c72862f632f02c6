"""`Serializer`: how a store that keeps text turns an envelope into it and back.

One serializer serves every such store (SQL, Redis): the codec (JSON with its allowlist by
default, or signed pickle), the cipher, and what happens to an entry that cannot be read back.
An entry is kept as four parts, whatever the store's layout: the payload text
(``codec-marker:text``, sealed in ``ENC(...)`` when a cipher is set), the value's type name, and
``as_of`` and ``expire_on`` as microseconds since the Unix epoch, UTC.

Bad entries: a payload of a type off the allowlist, corrupt text, an unknown codec marker, a
pickle whose signature does not verify, a payload that does not decrypt, or times that are not
times. Reading one never runs code of the entry's choosing: `Serializer.load` raises
`SerializationError` (a store's ``find`` lets it through: the engine counts a recover ``error``
and treats the call as a miss), and `Serializer.load_each` skips it with a warning (``find_many``,
``find_all``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

from ..codec import Codec, JsonCodec
from ..crypto import Cipher, seal, unseal
from ..errors import ConfigurationError, SerializationError, StoreError
from ..payload import envelope
from .base import Payload

__all__ = ["Serializer", "datetime_of", "micros"]

log = logging.getLogger(__name__)

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)
_NO = object()  # equal to no time: what the memo of the last times starts with
_SEALED = "ENC("  # what `failover.crypto.seal` puts first
_TYPE_NAME_MAX = 255  # the SQL column's width; informative only, so cut rather than refused


def micros(value: datetime | None) -> int | None:
    """``value`` as microseconds since the Unix epoch (``None`` stays ``None``).

    Raises:
        StoreError: a naive datetime.
    """
    if value is None:
        return None
    try:
        return (value - _EPOCH) // _MICROSECOND
    except TypeError:
        raise StoreError(f"datetimes must be timezone-aware, got {value!r}") from None


def datetime_of(value: int | None) -> datetime | None:
    """The aware UTC datetime of microseconds since the Unix epoch (``None`` stays ``None``)."""
    return None if value is None else _EPOCH + timedelta(microseconds=value)


class Serializer:
    """Codec, cipher and bad-entry handling, shared by the stores that keep text.

    Args:
        owner: names the store in error messages (its ``repr``); may be set later.
        codec: turns values into text and back; default `JsonCodec`. Entries written as JSON
            stay readable with any codec.
        cipher: encrypts the payloads written (e.g. `FernetCipher`); encrypted entries need it
            to be read, plain ones are read either way.
        allowed_types: more types the JSON codec may restore (see `JsonCodec`).

    Raises:
        ConfigurationError: a codec or a cipher that is not one (naming ``owner``).
    """

    def __init__(
        self,
        owner: str,
        codec: Codec | None = None,
        cipher: Cipher | None = None,
        allowed_types: Iterable[Any] = (),
    ) -> None:
        self.owner = owner
        self.codec = _resolve_codec(owner, codec, allowed_types)
        if cipher is not None and not all(
            hasattr(cipher, a) for a in ("scheme", "encrypt", "decrypt")
        ):
            raise ConfigurationError(f"{owner}: cipher must be a Cipher, got {cipher!r}")
        self.cipher = cipher
        json_codec = self.codec if isinstance(self.codec, JsonCodec) else None
        # Entries written as JSON are safe to read whatever this store writes now.
        self._readers: dict[str, Codec] = {
            "json": json_codec or JsonCodec(allowed_types),
            self.codec.marker: self.codec,
        }
        self._marker = f"{self.codec.marker}:"
        self._last_times: tuple[object, object, datetime, datetime] = (_NO, _NO, _EPOCH, _EPOCH)

    def dump(self, payload: Payload) -> tuple[str, str]:
        """The stored text of the envelope's value, and its type name.

        Raises:
            SerializationError: the codec cannot encode the value (naming the entry).
        """
        try:
            text, payload_type = self.codec.encode(payload.payload)
        except SerializationError as exc:
            raise self._unstorable(payload, str(exc)) from exc
        except Exception as exc:  # a codec of the user's that raises its own errors
            raise self._unstorable(payload, repr(exc)) from exc
        text = self._marker + text
        if self.cipher is not None:
            text = seal(self.cipher, text)
        return text, payload_type[:_TYPE_NAME_MAX]

    def _unstorable(self, payload: Payload, why: str) -> SerializationError:
        return SerializationError(
            f"{self.owner}: cannot store ({payload.name!r}, {payload.key!r}): {why}"
        )

    def load(
        self,
        name: str,
        key: str,
        text: str,
        payload_type: str,
        as_of: int | None,
        expire_on: int | None,
    ) -> Payload:
        """The envelope back from its stored parts (times in microseconds since the epoch; an
        entry without them is corrupt).

        Raises:
            SerializationError: the entry cannot be decoded (see the module's docstring); the
                message names the store and the entry.
        """
        try:
            plain = unseal(self.cipher, text) if text.startswith(_SEALED) else text
            if plain.startswith(self._marker):  # written by this codec: the common case
                value = self.codec.decode(plain[len(self._marker) :], payload_type)
            else:
                marker, sep, body = plain.partition(":")
                codec = self._readers.get(marker) if sep else None
                if codec is None:
                    raise SerializationError(
                        f"unknown codec marker {marker[:20]!r} (this store reads "
                        f"{', '.join(sorted(self._readers))})"
                    )
                value = codec.decode(body, payload_type)
        except Exception as exc:
            raise SerializationError(
                f"{self.owner}: entry ({name!r}, {key!r}) cannot be decoded: {exc}"
            ) from exc
        last = self._last_times
        if last[0] == as_of and last[1] == expire_on:
            return envelope(name, key, value, last[2], last[3], True)
        try:  # datetime_of, inlined: this runs for every entry of a batch read
            if as_of is None or expire_on is None:
                raise TypeError("a time is missing")
            when, until = _EPOCH + timedelta(0, 0, as_of), _EPOCH + timedelta(0, 0, expire_on)
        except (TypeError, ValueError, OverflowError) as exc:
            # Times missing, or written by hand (out of range, or text where a number belongs),
            # make the entry as corrupt as a bad payload.
            raise SerializationError(
                f"{self.owner}: entry ({name!r}, {key!r}) has corrupt times: {exc}"
            ) from exc
        # Entries written in one batch share their times (the slices of a scatter/gather call):
        # their datetimes are made once. One tuple, replaced whole: safe across threads.
        self._last_times = (as_of, expire_on, when, until)
        return envelope(name, key, value, when, until, True)

    def load_each(
        self, name: str, rows: Iterable[tuple[str, str, str, int | None, int | None]]
    ) -> Iterator[Payload]:
        """The envelopes of ``(key, text, payload_type, as_of, expire_on)`` rows; an entry that
        cannot be decoded is skipped with a warning."""
        for key, text, payload_type, as_of, expire_on in rows:
            try:
                yield self.load(name, key, text, payload_type, as_of, expire_on)
            except SerializationError as exc:
                log.warning("%s; skipped", exc)


def _resolve_codec(owner: str, codec: Codec | None, allowed_types: Iterable[Any]) -> Codec:
    allowed = tuple(allowed_types)
    if codec is None:
        return JsonCodec(allowed)
    if not all(hasattr(codec, a) for a in ("marker", "encode", "decode")):
        raise ConfigurationError(f"{owner}: codec must be a Codec, got {codec!r}")
    if allowed and isinstance(codec, JsonCodec):
        return JsonCodec((*codec.allowed_types, *allowed))
    return codec
