"""Codecs: how a stored value becomes the text of a row, and back.

The public names, where they have always been importable; they live in `failover.serialization`:
`Codec` and `type_name` in ``base``, `JsonCodec` in ``json_codec``, `PickleCodec` in
``pickle_codec``, `allow_annotation` and `allow_types` in ``allowlist``.
"""

from .serialization.allowlist import allow_annotation, allow_types
from .serialization.base import Codec, type_name
from .serialization.json_codec import JsonCodec, unencodable
from .serialization.pickle_codec import PickleCodec

__all__ = [
    "Codec",
    "JsonCodec",
    "PickleCodec",
    "allow_annotation",
    "allow_types",
    "type_name",
    "unencodable",
]
