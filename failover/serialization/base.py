"""The `Codec` protocol every codec follows, `Encoding` (what writes through one), and the name
a type is stored and allowed under.

A store passes every call a ``binding``: a digest of the store's identity (tenant, table or key
prefix) and the entry's name and key. A codec that authenticates its rows covers it, so that a row
moved under another entry's key or into another store does not verify;
one that does not (JSON, which anyone able to write the table can write anyway) ignores it.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

__all__ = ["Codec", "Encoding", "type_name"]


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
            binding: the entry the row is written for (a digest of its store, name and key); a
                codec that signs its rows signs it too. Empty: not bound to any entry.

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


@runtime_checkable
class Encoding(Protocol):
    """A store that writes its values through a `Codec` (`SqlStore`, `RedisStore`; optional for
    a store of your own): with a JSON codec, the engine warns at registration about a function
    whose results it can never encode."""

    @property
    def codec(self) -> Codec:
        """The codec values are written with."""
        ...


def type_name(tp: type) -> str:
    """The name a type is tagged and allowed under: ``module.QualName``."""
    return f"{tp.__module__}.{tp.__qualname__}"
