"""An entry as one string, for any key-value store (the `RedisStore` writes it), and back.

A header line ``{as_of} {expire_on} {type}`` (microseconds since the Unix epoch, UTC; the
value's type name), then the payload text as `Serializer` writes it (codec, signature,
encryption). `EntryText` writes and decodes it; a store's listing reads the header as stored,
not decoded (`failover.stores.backends.redis.browsing`).

An entry with a label (a failover with ``label=``) ends its header line with a tab and the label
(``{as_of} {expire_on} {type}\t{label}``; neither a type name nor a label holds a tab or a line
break). A value without one is as earlier versions wrote it, and earlier versions read it; they
read a labelled value as undecodable (a miss), so opt in once every process is on this version.

Here, not beside the Redis store, so that it imports without redis-py.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

from ..errors import SerializationError
from ..payload import ReferentialPayload
from .rows import Serializer
from .times import datetime_of

__all__ = ["EntryText", "as_stored"]

Payload = ReferentialPayload[Any]


class EntryText:
    """A store's entries as strings, and back.

    Args:
        serializer: the store's codec, signature and cipher.
        clock: the time ``expire_on`` is measured on, or ``None`` for the wall clock.
    """

    def __init__(self, serializer: Serializer, clock: Callable[[], datetime] | None) -> None:
        self.serializer = serializer
        self._clock = clock

    def offset_ms(self) -> int:
        """The wall clock's time (a key-value store's, e.g. Redis's) minus the store's clock, in
        milliseconds."""
        if self._clock is None:
            return 0
        return round((time.time() - self._clock().timestamp()) * 1000)

    def value(self, payload: Payload) -> tuple[str, int]:
        """The stored string of an entry, and when the store expires it (ms since the epoch,
        before the clock's offset)."""
        text, payload_type, as_of, expire_on = self.serializer.stored(payload)
        header = f"{as_of} {expire_on} {_one_field(payload_type)}"
        if payload.label is not None:
            header = f"{header}\t{_one_field(payload.label)}"
        return f"{header}\n{text}", expire_on // 1000

    def parts(self, name: str, pair: tuple[str, Any]) -> tuple[str, str, str, int, int, str | None]:
        """A stored value split into ``(key, payload, payload_type, as_of, expire_on, label)``.

        Raises:
            SerializationError: longer than ``max_row_bytes``, or not a failover entry (no
                header, or not UTF-8).
        """
        key, raw = pair
        try:
            # The whole value, before a byte of it is decoded (max_row_bytes).
            self.serializer.check_size(raw)
        except SerializationError as exc:
            raise self.serializer.corrupt(name, key, exc) from None
        try:
            data = raw if isinstance(raw, bytes) else raw.encode()
            header, _, body = data.partition(b"\n")
            as_of, expire_on, rest = header.split(b" ", 2)
            payload_type, tab, label = rest.decode().partition("\t")
            return (
                key,
                body.decode(),
                payload_type,
                int(as_of),
                int(expire_on),
                label if tab else None,
            )
        except ValueError as exc:  # UnicodeDecodeError included
            raise self.serializer.corrupt(name, key, f"not a failover entry ({exc})") from exc

    def load(self, name: str, key: str, raw: bytes | str) -> Payload:
        """The entry of a stored value.

        Raises:
            SerializationError: the value cannot be trusted or decoded.
        """
        return self.serializer.envelope(name, *self.parts(name, (key, raw)))

    def decoded(self, name: str, pairs: Iterable[tuple[str, Any]]) -> dict[str, Payload]:
        """The entries of ``(key, stored value or None)`` pairs; a value that cannot be
        trusted or decoded is skipped with a warning."""
        found = ((k, raw) for k, raw in pairs if raw is not None)
        return dict(self.serializer.each(name, found, self.parts))


def _one_field(text: str) -> str:
    """``text`` as one field of the header: no line break ends the header, no tab the type."""
    if "\n" in text or "\t" in text:
        return text.replace("\n", " ").replace("\t", " ")
    return text


def as_stored(
    raw: bytes | str,
) -> tuple[datetime | None, datetime | None, str, str | None, bytes]:
    """A stored string's ``(as_of, expire_on, type, label, payload text)``, not decoded: for a
    listing (an unreadable header gives no times and the type ``"?"``)."""
    data = raw if isinstance(raw, bytes) else raw.encode()
    head, _, body = data.partition(b"\n")
    fields, tab, label = head.decode(errors="replace").partition("\t")
    header = fields.split(" ", 2)
    as_of: datetime | None
    expire_on: datetime | None
    try:
        as_of, expire_on = datetime_of(int(header[0])), datetime_of(int(header[1]))
        payload_type = header[2]
    except (ValueError, IndexError, OverflowError):
        as_of = expire_on = None
        payload_type = "?"
    return as_of, expire_on, payload_type, label if tab else None, body
