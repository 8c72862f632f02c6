"""Rows: how a store that keeps text turns an entry into it and back (`Serializer`).

One serializer serves every such store (SQL, Redis): the codec (JSON with its allowlist by
default, or signed pickle), the entry binding, the cipher, and what happens to an entry that
cannot be trusted. An entry is kept as four parts, whatever the store's layout: the payload
text (``codec-marker:text``, sealed in ``ENC(...)`` when a cipher is set), the value's type name,
and ``as_of`` and ``expire_on`` as microseconds since the Unix epoch, UTC.

An entry whose fresh window was ended (``.expire()``: `ReferentialPayload.fresh_ended`) has
`ENDED` (``!``) in front of its payload text, outside any seal or signature: a store marks it in
place, in one statement or script (``payload = '!' || payload``), without the key to decode it;
the next write of the entry replaces the text, and the mark with it. Earlier versions read a
marked entry as an unknown codec (a miss).

Signed and encrypted payloads carry the entry's binding (`failover.serialization.binding`): a
payload moved under another entry's key, into another tenant's store, another table or another
key prefix is refused. A store that encrypts or signs refuses plain rows too (unless
``accept_plain``: a migration), and every store refuses a payload longer than ``max_row_bytes``
before decoding anything of it.

Bad entries: a payload of a type off the allowlist, corrupt text, an unknown codec marker, a
pickle whose signature does not verify, a payload that does not decrypt or belongs to another
entry or another store, a plain payload in a store that encrypts or signs, a payload over
``max_row_bytes``, a type name that does not name the decoded value's type, or times that are
missing or not times. Reading one never runs code of the entry's choosing: `Serializer.load` and
`Serializer.envelope` raise `SerializationError` and nothing else (a store's ``find`` lets it
through: the engine counts a recover ``error`` and treats the call as a miss), and
`Serializer.each` skips the entry with a warning (``find_many``, ``find_all``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime
from typing import Any, Final

from ..errors import ConfigurationError, SerializationError
from ..keys import key_tag
from ..payload import ReferentialPayload, envelope
from .base import Codec, type_name
from .binding import entry_binding, store_identity
from .crypto import Cipher, is_sealed, seal, unseal
from .json_codec import JsonCodec, resolve_codec
from .row_options import DEFAULT_MAX_ROW_BYTES, checked_max_row_bytes, over_limit, utf8_size
from .times import EPOCH, datetime_of, micros

__all__ = ["ENDED", "SerializedStore", "Serializer"]

log = logging.getLogger(__name__)

Payload = ReferentialPayload[Any]

_TYPE_MAX = 255  # the SQL store's payload_type column: informative and checked, so cut
_NO = object()  # equal to no time: what the memo of the last times starts with

ENDED: Final = "!"
"""Put in front of an entry's payload text once its fresh window is ended (``.expire()``)."""


class Serializer:
    """Codec, entry binding, cipher and bad-entry handling, shared by the stores that keep text.

    Args:
        codec: writes the values; default `JsonCodec` (with ``allowed_types``). Entries written
            as JSON stay readable whatever codec writes (plain ones only with ``accept_plain``
            when the store encrypts or signs).
        cipher: encrypts what is written, when set; encrypted entries need it to be read.
        allowed_types: more types the JSON codec may restore.
        owner: names the store in error messages; a store sets ``where`` once it knows more.
        accept_plain: with a cipher or a codec other than JSON (one that signs: `PickleCodec`),
            also read the entries that are neither encrypted nor signed, which anyone able to
            write the store can forge. For a migration to encryption or signing only.
        max_row_bytes: a stored payload longer than this is refused before anything of it is
            decoded or decrypted (and a value that encodes longer is not written).
        place: where the store keeps its rows (see `store_identity`); protected rows are bound
            to it.

    Raises:
        ConfigurationError: ``codec`` is not a `Codec`, ``cipher`` not a `Cipher`, or
            ``max_row_bytes`` not a positive int (naming ``owner``).
    """

    def __init__(
        self,
        codec: Codec | None = None,
        cipher: Cipher | None = None,
        allowed_types: Iterable[Any] = (),
        owner: str = "store",
        *,
        accept_plain: bool = False,
        max_row_bytes: int = DEFAULT_MAX_ROW_BYTES,
        place: str = "",
    ) -> None:
        self.codec = resolve_codec(codec, allowed_types, owner)
        if cipher is not None and not all(
            hasattr(cipher, a) for a in ("scheme", "encrypt", "decrypt")
        ):
            raise ConfigurationError(f"{owner}: cipher must be a Cipher, got {cipher!r}")
        self.cipher = cipher
        self.where = owner
        self.accept_plain = bool(accept_plain)
        self.max_row_bytes = checked_max_row_bytes(max_row_bytes, owner)
        self.place = place
        self.tenant: str | None = None
        self.identity = store_identity(place)
        # Entries written as JSON are safe to read whatever this store writes now.
        self._json = self.codec if isinstance(self.codec, JsonCodec) else JsonCodec(allowed_types)
        self._readers: dict[str, Codec] = {"json": self._json, self.codec.marker: self.codec}
        self._unbound = cipher is None and self.codec is self._json
        # Encrypting or signing: a row neither sealed nor signed could be anyone's.
        self.protected = not self._unbound
        self._last_times: tuple[object, object, datetime, datetime] = (_NO, _NO, EPOCH, EPOCH)

    def bind_tenant(self, tenant: str) -> None:
        """Bind the rows to ``tenant`` too (a tenant router's store), before any is read or
        written; again with the same tenant changes nothing.

        Raises:
            ConfigurationError: the store serves another tenant already (one store handed to
                two tenants would mix their entries).
        """
        if self.tenant == tenant:
            return
        if self.tenant is not None:
            raise ConfigurationError(
                f"{self.where} serves tenant {self.tenant[:60]!r}: it cannot serve "
                f"{str(tenant)[:60]!r} too (give each tenant a store of its own)"
            )
        if not isinstance(tenant, str):
            raise ConfigurationError(f"{self.where}: a tenant id is a string, got {tenant!r}")
        self.tenant = tenant
        self.identity = store_identity(self.place, tenant)

    def binding(self, name: str, key: str) -> bytes:
        """The binding of the entry ``(name, key)`` in this store (`entry_binding`)."""
        return entry_binding(name, key, self.identity)

    # -- writing ----------------------------------------------------------------------------------

    def dump(self, name: str, key: str, value: Any) -> tuple[str, str]:
        """The payload text and type name of ``value`` stored as the entry ``(name, key)``.

        Raises:
            SerializationError: the codec cannot encode the value.
        """
        # JSON entries in clear check no binding: not computed for them (a quarter of an encoding).
        binding = b"" if self._unbound else entry_binding(name, key, self.identity)
        try:
            text, payload_type = self.codec.encode(value, binding)
        except Exception as exc:  # a codec of the user's may raise its own errors
            detail = exc if isinstance(exc, SerializationError) else repr(exc)
            raise SerializationError(
                f"{self.where}: cannot store ({name!r}, {key_tag(key)}): {detail}"
            ) from exc
        text = f"{self.codec.marker}:{text}"
        if self.cipher is not None:
            text = seal(self.cipher, text, binding)
        if over_limit(text, self.max_row_bytes):
            # Never read back: refused now rather than written, fetched and refused each time.
            raise SerializationError(
                f"{self.where}: cannot store ({name!r}, {key_tag(key)}): the value encodes to "
                f"{utf8_size(text)} bytes, over max_row_bytes={self.max_row_bytes}"
            )
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
                f"{self.where}: cannot store ({payload.name!r}, {key_tag(payload.key)}): a "
                "stored entry needs as_of and expire_on"
            )
        text, payload_type = self.dump(payload.name, payload.key, payload.payload)
        if payload.fresh_ended:  # written again as it was (a queued write overtaken by .expire)
            text = ENDED + text
        return text, payload_type, micros(as_of), micros(expire_on)

    # -- reading ----------------------------------------------------------------------------------

    def load(self, name: str, key: str, raw: Any, payload_type: Any) -> Any:
        """The value of the payload stored as the entry ``(name, key)``.

        Raises:
            SerializationError: the payload cannot be trusted or decoded (and nothing else).
        """
        try:
            self.check_size(raw)
            sealed = is_sealed(raw)
            # The binding only for the entries that check it: sealed ones, and signed codecs'.
            binding = entry_binding(name, key, self.identity) if sealed else None
            text = raw if binding is None else unseal(self.cipher, raw, binding)
            marker, sep, body = text.partition(":")
            codec = self._readers.get(marker) if sep else None
            if codec is None:
                raise SerializationError(
                    f"unknown codec marker {marker[:20]!r} (this store reads "
                    f"{', '.join(sorted(self._readers))})"
                )
            if codec is self._json:
                if self.protected and not sealed and not self.accept_plain:
                    raise SerializationError(
                        "a plain row (neither encrypted nor signed) in a store that "
                        f"{'encrypts' if self.cipher is not None else 'signs'} its rows: "
                        "anyone able to write the store could have written it "
                        "(accept_plain=True reads such rows, for a migration only)"
                    )
                value = codec.decode(body, payload_type)
            else:
                value = codec.decode(
                    body, payload_type, binding or entry_binding(name, key, self.identity)
                )
            actual = type_name(type(value))[:_TYPE_MAX]
            if actual != payload_type:
                raise SerializationError(
                    f"its type name says {str(payload_type)[:80]!r}, its payload holds {actual!r}"
                )
            return value
        except Exception as exc:
            raise SerializationError(
                f"{self.where}: entry ({name!r}, {key_tag(key)}) cannot be decoded: {exc}"
            ) from exc

    def check_size(self, raw: object) -> None:
        """Refuse a stored payload (text or bytes) longer than ``max_row_bytes``, looking at
        its length only.

        Raises:
            SerializationError: it is longer.
        """
        if isinstance(raw, str | bytes) and over_limit(raw, self.max_row_bytes):
            raise SerializationError(
                f"the row is {utf8_size(raw)} bytes, over max_row_bytes={self.max_row_bytes}: "
                "refused undecoded"
            )

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
                    f"{self.where}: entry ({name!r}, {key_tag(key)}) has corrupt times: {exc}"
                ) from exc
            self._last_times = (as_of, expire_on, when, until)  # one tuple: safe across threads
        ended = isinstance(raw, str) and raw[:1] == ENDED
        value = self.load(name, key, raw[1:] if ended else raw, payload_type)
        if label is not None and not isinstance(label, str):
            label = None  # written by hand: a label is text, or none
        return envelope(name, key, value, when, until, True, label=label, fresh_ended=ended)

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
        if split is None and self._unbound:
            yield from self._plain(name, rows)
            return
        for row in rows:
            try:
                key, *parts = row if split is None else split(name, row)
                yield key, self.envelope(name, key, *parts)
            except SerializationError as exc:
                log.warning("%s; skipped", exc)

    def _plain(self, name: str, rows: Iterable[Any]) -> Iterator[tuple[str, Payload]]:
        """`each` for a store that neither encrypts nor signs, in bulk: a row of compact JSON
        text, short enough to be within ``max_row_bytes`` whatever its characters, with the
        times of the row before it (the slices of one write), is decoded here without the
        per-row frames of `envelope` and `load`; any other row, and any row whose decoding
        fails, goes through `envelope`, which decides and says why."""
        short = self.max_row_bytes // 4  # 4 UTF-8 bytes a character at most
        decode = self._json.decode
        names: dict[type, str] = {}  # each value type's name, made once per batch
        for row in rows:
            key, raw, payload_type, as_of, expire_on, *rest = row
            label = rest[0] if rest else None
            last = self._last_times
            if (
                type(raw) is str
                and len(raw) <= short
                and raw.startswith("json:")
                and last[0] == as_of
                and last[1] == expire_on
                and (label is None or type(label) is str)
            ):
                try:
                    value = decode(raw[5:], payload_type)
                except SerializationError:
                    pass  # `envelope` says why, below
                else:
                    tp = type(value)
                    actual = names.get(tp)
                    if actual is None:
                        actual = names[tp] = type_name(tp)[:_TYPE_MAX]
                    if actual == payload_type:
                        yield key, envelope(name, key, value, last[2], last[3], True, label=label)
                        continue
            try:
                yield key, self.envelope(name, key, raw, payload_type, as_of, expire_on, label)
            except SerializationError as exc:
                log.warning("%s; skipped", exc)

    def corrupt(self, name: str, key: str, why: object) -> SerializationError:
        """The error of an entry that is not one (a store's own layout around the parts)."""
        return SerializationError(
            f"{self.where}: entry ({name!r}, {key_tag(key)}) cannot be decoded: {why}"
        )


class SerializedStore:
    """What a store that keeps its entries as text through a `Serializer` (its ``serializer``)
    shows of it: `failover.stores.SqlStore`, `failover.stores.RedisStore`."""

    serializer: Serializer

    @property
    def accept_plain(self) -> bool:
        """Whether plain entries are read although the store encrypts or signs (a migration)."""
        return self.serializer.accept_plain

    @property
    def max_row_bytes(self) -> int:
        """The longest stored entry read or written, in bytes."""
        return self.serializer.max_row_bytes

    @property
    def tenant(self) -> str | None:
        """The tenant this store serves, when a tenant router made it."""
        return self.serializer.tenant

    def bind_tenant(self, tenant: str) -> None:
        """Serve ``tenant``: its encrypted and signed entries are bound to it (a tenant router
        calls this on the stores it makes, before using them).

        Raises:
            ConfigurationError: the store serves another tenant already.
        """
        self.serializer.bind_tenant(tenant)
