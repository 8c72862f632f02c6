"""Exceptions raised by `failover`.

The tree::

    FailoverError                 root of everything this library raises of its own
    ├── ConfigurationError        a setting that cannot work (at decoration or engine construction)
    ├── StoreError                a store refused or failed an operation
    ├── SerializationError        a value could not be encoded, or a row could not be decoded
    ├── SplitterError             a scatter/gather splitter raised
    ├── BulkheadFull              no bulkhead permit could be had (a recovery cause)
    ├── RateLimited               a call over the failover's ``rate=`` (a recovery cause)
    ├── Throttled                 a key served stale within ``throttle=`` (a recovery cause)
    ├── NothingToRenew            the upstream said NotModified, and no entry was stored
    └── SoftTimeoutError          the upstream was slower than ``timeout=`` (also a TimeoutError)

A guard's refusal carries the guard's name (``guard``: ``bulkhead``, ``breaker``, ``timeout``…):
`refused_by` reads it, and the event stream reports the refusal as that guard's, never as a
failure of the upstream. A new guard's exception sets ``guard`` the same way.

The upstream's own exceptions are never wrapped: with the ``rethrow`` policy the caller gets the
original exception back, with a note (``add_note``) saying why nothing was recovered.
"""

from __future__ import annotations

from typing import ClassVar

__all__ = [
    "BulkheadFull",
    "ConfigurationError",
    "FailoverError",
    "NothingToRenew",
    "PartialWrite",
    "RateLimited",
    "SerializationError",
    "SoftTimeoutError",
    "SplitterError",
    "StoreError",
    "Throttled",
    "refused_by",
]


class FailoverError(Exception):
    """Root of the exceptions raised by `failover` itself."""


class ConfigurationError(FailoverError, ValueError):
    """A setting that cannot work; raised at decoration or engine construction time."""


class StoreError(FailoverError):
    """A store refused or failed an operation."""


class PartialWrite(StoreError):
    """A write the store made in part: some of its entries were written, the others not sent
    (one Redis Cluster node out). Not an outage (the store breaker stays closed, the other
    nodes serve their keys); the async-writes queue tries the batch again, whole (an entry
    written twice stays as it is: entries only move forward)."""


class SerializationError(FailoverError):
    """A value could not be encoded, or a stored row could not be decoded."""


class SplitterError(FailoverError):
    """A scatter/gather splitter raised; the message names the failover and the operation."""


class BulkheadFull(FailoverError):
    """No bulkhead permit was available in time; the call goes to recovery.

    Attributes:
        guard: ``"bulkhead"``, the guard that refused.
        pool: the pool whose permits could not be had (``None`` when raised elsewhere).
    """

    guard: ClassVar[str] = "bulkhead"
    pool: str | None = None


class RateLimited(FailoverError):
    """The call was over the failover's ``rate=``; it goes to recovery, the upstream not called.

    Attributes:
        guard: ``"rate"``, the guard that refused.
    """

    guard: ClassVar[str] = "rate"


class Throttled(FailoverError):
    """The key was served stale after a failure less than ``throttle=`` ago: the call is
    served the stored entry again, the upstream not called.

    Attributes:
        guard: ``"throttle"``, the guard that refused.
    """

    guard: ClassVar[str] = "throttle"


class NothingToRenew(FailoverError):
    """The upstream answered `failover.NotModified` (conditional refresh), but no entry of the
    call's key is stored to renew: a failure of the upstream (it sent no payload), recovered
    like any other."""


class SoftTimeoutError(FailoverError, TimeoutError):
    """The upstream did not answer within the failover's ``timeout=``; the call goes to
    recovery while the upstream call goes on in the background (its result is stored).

    Attributes:
        guard: ``"timeout"``, the guard that cut the wait.
    """

    guard: ClassVar[str] = "timeout"


def refused_by(exc: BaseException) -> str | None:
    """The name of the guard whose refusal ``exc`` is (its ``guard`` attribute), or ``None``
    when it is not a guard's refusal (the upstream's own exception)."""
    guard = getattr(exc, "guard", None)
    return guard if isinstance(guard, str) else None
