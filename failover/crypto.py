"""Ciphers for stored payloads: the public names, where they have always been importable (they
live in `failover.serialization.crypto`)."""

from .serialization.crypto import Cipher, FernetCipher, is_sealed, seal, unseal

__all__ = ["Cipher", "FernetCipher", "is_sealed", "seal", "unseal"]
