"""The entry binding: what signed and encrypted payloads are bound to (a digest of the store's
identity, the entry's name and its key), so that a payload moved under another entry's key, into
another tenant's store, another table or another key prefix is refused
(`failover.serialization.rows.Serializer`)."""

from __future__ import annotations

import hashlib

__all__ = ["entry_binding", "store_identity"]


def store_identity(place: str, tenant: str | None = None) -> str:
    """What a store's protected rows are bound to besides their entry.

    Args:
        place: where the store keeps its rows, with no space in it (``"sql:acme_failover_store"``,
            schema included; ``"redis:failover:t:acme:"``, the key prefix).
        tenant: the tenant the store serves, when a tenant router made it.
    """
    # No space in a place (table names, key prefixes): what follows the first one is the tenant.
    return place if tenant is None else f"{place} {tenant}"


def entry_binding(name: str, key: str, store: str = "") -> bytes:
    """What signed and encrypted payloads carry: 16 bytes of blake2b over the store's identity
    (`store_identity`), the entry's name and its key (length-prefixed, so that no two triples
    run together)."""
    text = f"{len(store)}:{store}{len(name)}:{name}:{key}".encode("utf-8", "surrogatepass")
    return hashlib.blake2b(text, digest_size=16).digest()
