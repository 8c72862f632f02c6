"""Encryption at rest for the payloads a store writes.

A `Cipher` encrypts the encoded payload text; the store writes ``ENC(<scheme>:<token>)``.
Reading honours that marker whether or not the store encrypts its own writes: turning encryption
off keeps the encrypted rows readable while the key is still configured. A row without it is plain:
a store that encrypts refuses it unless told ``accept_plain`` (`failover.serialization.rows`), for
a migration. `FernetCipher` is the one shipped; it needs ``cryptography``
(``pip install failover[encryption]``).

What is encrypted is ``@<binding>:<text>``, where ``binding`` (hex) is a digest of the store's
identity (tenant, table or key prefix) and the entry's name and key: ciphers have no associated
data, so the binding travels inside the ciphertext, and a row moved under another entry's key or
into another store decrypts to the wrong binding and is refused. Rows encrypted by earlier
versions (bound to their entry only, or not at all) are refused too (a miss until stored again).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from ..errors import ConfigurationError, SerializationError

__all__ = ["Cipher", "FernetCipher", "is_sealed", "seal", "unseal"]

_OPEN, _CLOSE = "ENC(", ")"
_BOUND = "@"  # starts the plain text of a bound row; an unbound one starts with a codec marker


@runtime_checkable
class Cipher(Protocol):
    """Encrypts and decrypts payload text.

    Attributes:
        scheme: the name written in the row's marker (``"fernet"``).
    """

    scheme: str

    def encrypt(self, text: str) -> str:
        """The ciphertext of ``text``, as ASCII text without ``)``."""
        ...

    def decrypt(self, token: str) -> str:
        """The text back.

        Raises:
            SerializationError: the token does not decrypt (wrong key, tampered, truncated).
        """
        ...


def is_sealed(text: str) -> bool:
    """Whether a stored payload carries the ``ENC(...)`` marker.

    Raises:
        AttributeError: ``text`` is not text (a corrupt row).
    """
    return text.startswith(_OPEN)


def seal(cipher: Cipher, text: str, binding: bytes) -> str:
    """``text`` encrypted together with the entry's ``binding``, in its ``ENC(scheme:token)``
    marker."""
    return f"{_OPEN}{cipher.scheme}:{cipher.encrypt(f'{_BOUND}{binding.hex()}:{text}')}{_CLOSE}"


def unseal(cipher: Cipher | None, text: str, binding: bytes) -> str:
    """The plain text of a stored payload: decrypted if it carries the ``ENC(...)`` marker
    (and checked to be ``binding``'s), as it is otherwise.

    Raises:
        SerializationError: an encrypted row and no cipher, a cipher of another scheme, a
            token that does not decrypt, or one encrypted for another entry or store, or without
            a binding.
    """
    if not text.startswith(_OPEN):
        return text
    if not text.endswith(_CLOSE):
        raise SerializationError("encrypted row is truncated (no closing parenthesis)")
    scheme, sep, token = text[len(_OPEN) : -len(_CLOSE)].partition(":")
    if not sep:
        raise SerializationError("encrypted row has no scheme")
    if cipher is None:
        raise SerializationError(
            f"row is encrypted ({scheme}) and this store has no cipher to decrypt it"
        )
    if scheme != cipher.scheme:
        raise SerializationError(
            f"row is encrypted with {scheme!r}; this store's cipher is {cipher.scheme!r}"
        )
    plain = cipher.decrypt(token)
    prefix = f"{_BOUND}{binding.hex()}:"
    if plain.startswith(prefix):
        return plain[len(prefix) :]
    if plain.startswith(_BOUND):
        raise SerializationError(
            "encrypted row belongs to another entry or another store (tenant, table, key "
            "prefix): it was moved or copied here, or an earlier version wrote it"
        )
    raise SerializationError(
        "encrypted row carries no entry binding (an earlier version wrote it): a miss until the "
        "entry is stored again"
    )


class FernetCipher:
    """Fernet (AES-128-CBC with HMAC-SHA256, from ``cryptography``), with key rotation.

    Args:
        key: a Fernet key (32 url-safe base64-encoded bytes, see `generate_key`), or a list of
            keys: the first encrypts, every one decrypts. To rotate, put the new key first and
            keep the old ones until the rows they wrote have expired.

    Raises:
        ConfigurationError: ``cryptography`` is not installed, no key was given, or a key is
            not a valid Fernet key.
    """

    scheme = "fernet"

    def __init__(self, key: str | bytes | Sequence[str | bytes]) -> None:
        try:
            from cryptography.fernet import Fernet, InvalidToken, MultiFernet
        except ImportError:
            raise _missing_cryptography() from None

        keys: list[Any]
        if isinstance(key, str | bytes):
            keys = [key]
        elif isinstance(key, Sequence):
            keys = list(key)
        else:  # None, or a number: a misconfiguration, not a TypeError from list()
            raise ConfigurationError(
                f"FernetCipher: key must be str, bytes or a list of them, got {key!r}"
            )
        if not keys:
            raise ConfigurationError("FernetCipher: at least one key is required")
        try:
            self._fernet = MultiFernet([Fernet(k) for k in keys])
        except (ValueError, TypeError) as exc:
            raise ConfigurationError(
                "FernetCipher: not a valid Fernet key (32 url-safe base64-encoded bytes; "
                "make one with FernetCipher.generate_key())"
            ) from exc
        self._invalid_token: type[Exception] = InvalidToken
        self.key_count = len(keys)

    def __repr__(self) -> str:
        return f"FernetCipher(<{self.key_count} key(s)>)"

    @staticmethod
    def generate_key() -> str:
        """A fresh random Fernet key, as text (store it as a secret).

        Raises:
            ConfigurationError: ``cryptography`` is not installed.
        """
        try:
            from cryptography.fernet import Fernet
        except ImportError:
            raise _missing_cryptography() from None

        return Fernet.generate_key().decode("ascii")

    def encrypt(self, text: str) -> str:
        """``text`` encrypted with the first key: a url-safe base64 Fernet token."""
        return self._fernet.encrypt(text.encode()).decode("ascii")

    def decrypt(self, token: str) -> str:
        """The text back, with whichever key decrypts it.

        Raises:
            SerializationError: no key decrypts the token (wrong key, tampered, truncated).
        """
        try:
            return self._fernet.decrypt(token.encode("ascii")).decode()
        except (self._invalid_token, UnicodeError):
            raise SerializationError(
                "encrypted row does not decrypt with the configured key(s)"
            ) from None


def _missing_cryptography() -> ConfigurationError:
    return ConfigurationError(
        "FernetCipher needs the 'cryptography' package: pip install failover[encryption]"
    )
