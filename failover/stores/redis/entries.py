"""What ``failover inspect`` and the dashboard list of a Redis entry: `StoredEntry`, read from a
stored value without decoding it."""

from __future__ import annotations

from datetime import datetime
from typing import NamedTuple

from ...serialization.rows import datetime_of

__all__ = ["StoredEntry", "describe"]


class StoredEntry(NamedTuple):
    """One entry as Redis holds it, not decoded (what ``failover inspect`` lists).

    Attributes:
        name: the failover name.
        key: the entry's key.
        as_of: when it was stored, or ``None`` when unreadable.
        expire_on: when it expires, or ``None`` when unreadable.
        size: the stored value's size in bytes.
        payload_type: the stored value's type name (``"?"`` when unreadable).
        payload: the payload text as stored (``json:...``, ``pickle:...``, ``ENC(...)``).
    """

    name: str
    key: str
    as_of: datetime | None
    expire_on: datetime | None
    size: int
    payload_type: str
    payload: str


def describe(name: str, key: str, raw: bytes | str) -> StoredEntry:
    """The entry as stored (a value with an unreadable header is listed with no times)."""
    data = raw if isinstance(raw, bytes) else raw.encode()
    head, _, body = data.partition(b"\n")
    header = head.decode(errors="replace").split(" ", 2)
    as_of: datetime | None
    expire_on: datetime | None
    try:
        as_of, expire_on = datetime_of(int(header[0])), datetime_of(int(header[1]))
        payload_type = header[2]
    except (ValueError, IndexError, OverflowError):
        as_of = expire_on = None
        payload_type = "?"
    payload = body.decode(errors="replace")
    return StoredEntry(name, key, as_of, expire_on, len(data), payload_type, payload)
