"""`PickleCodec`: signed pickle, the explicit opt-in for values JSON cannot hold.

Every row is signed with HMAC-SHA256 over the entry's binding (its store and its name and key)
and the pickle, and a row whose signature does not verify (tampered with, or moved from another
entry or another store) is refused before it is
unpickled.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import pickle
from collections.abc import Sequence
from typing import Any

from ..errors import ConfigurationError, SerializationError
from .base import type_name

__all__ = ["PickleCodec"]


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
    the entry (its store, name and key): reading checks the signature (in constant time) before
    unpickling, so an unsigned or tampered row is refused, and so is a signed row moved under
    another entry's key or into another store (another tenant's, table, key prefix). Rows signed
    by earlier versions (bound to their entry only, or not at all) do not verify: a store reads
    them as misses until the entry is stored again. Unpickling a
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
                "(unsigned, tampered with, signed with another key, moved from another entry or "
                "another store, or signed by an earlier version)"
            )
        try:
            return pickle.loads(data)  # safe only because the signature verified above
        except Exception as exc:
            raise SerializationError(f"{payload_type} value: cannot unpickle ({exc})") from exc
