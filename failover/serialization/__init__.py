"""Serialization: how a stored value becomes text and comes back, and nothing else.

- ``base``: the `Codec` protocol and the name a type is stored under.
- ``allowlist``: the types the JSON codec may rebuild.
- ``json_codec``, ``pickle_codec``: the two codecs.
- ``crypto``: ciphers for payloads at rest.
- ``rows``: an entry as the four parts a text-keeping store writes (SQL, Redis).
- ``text``: an entry as one string with a header line, for any key-value store (Redis).

Which kind of object a value is (enum, dataclass, pydantic model...) is `failover.kinds`, below
this package: the entry (`failover.payload`), which ``rows`` builds, asks it too.
"""
