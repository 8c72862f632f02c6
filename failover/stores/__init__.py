"""Stores and store layers: every one implements `FailoverStore`."""

from .base import FailoverStore
from .copying import CopyingStore
from .factory import make_store
from .memory import InMemoryStore
from .ttl import CachetoolsStore

__all__ = ["CachetoolsStore", "CopyingStore", "FailoverStore", "InMemoryStore", "make_store"]
