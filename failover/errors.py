"""Exceptions raised by `failover`.

The tree::

    FailoverError                 root of everything this library raises of its own
    ├── ConfigurationError        a setting that cannot work (at decoration or engine construction)
    ├── StoreError                a store refused or failed an operation
    ├── SerializationError        a value could not be encoded, or a row could not be decoded
    ├── SplitterError             a scatter/gather splitter raised
    ├── BulkheadFull              no bulkhead permit could be had (a recovery cause)
    └── SoftTimeoutError          the upstream was slower than ``timeout=`` (also a TimeoutError)

The upstream's own exceptions are never wrapped: with the ``rethrow`` policy the caller gets the
original exception back, with a note (``add_note``) saying why nothing was recovered.
"""

from __future__ import annotations

__all__ = [
    "BulkheadFull",
    "ConfigurationError",
    "FailoverError",
    "SerializationError",
    "SoftTimeoutError",
    "SplitterError",
    "StoreError",
]


class FailoverError(Exception):
    """Root of the exceptions raised by `failover` itself."""


class ConfigurationError(FailoverError, ValueError):
    """A setting that cannot work; raised at decoration or engine construction time."""


class StoreError(FailoverError):
    """A store refused or failed an operation."""


class SerializationError(FailoverError):
    """A value could not be encoded, or a stored row could not be decoded."""


class SplitterError(FailoverError):
    """A scatter/gather splitter raised; the message names the failover and the operation."""


class BulkheadFull(FailoverError):
    """No bulkhead permit was available in time; the call goes to recovery."""


class SoftTimeoutError(FailoverError, TimeoutError):
    """The upstream did not answer within the failover's ``timeout=``; the call goes to
    recovery while the upstream call goes on in the background (its result is stored)."""
