"""What counts as a store *out*: an operation refused at the connection, or one that timed out.

The one place that tells a store that cannot be reached (a killed PostgreSQL refusing
connections, a Redis that is gone, a socket that timed out) from one that answered with an
error (a bad statement) or a value the store cannot encode (the caller's own): the store
breaker (`failover.stores.layers.deadline.DeadlineStore`) counts the first kind toward opening, and
the async-writes queue retries it. The drivers are recognised by their classes' names, so that
none is imported here.
"""

from __future__ import annotations

import errno
import socket

from ..errors import PartialWrite

__all__ = ["out", "worth_retrying"]

# An OSError that is not a ConnectionError but still says the network is in the way (a full
# disk, a permission error are not: they are the store's own trouble, not an outage).
_NETWORK_ERRNOS = frozenset(
    {
        errno.ENETUNREACH,
        errno.EHOSTUNREACH,
        errno.ENETDOWN,
        errno.EHOSTDOWN,
        errno.EADDRNOTAVAIL,
        errno.ETIMEDOUT,
    }
)

# Connection-level errors of the drivers, by their defining module and name (subclasses too).
_AT_CONNECTION = frozenset(
    {
        ("sqlalchemy.exc", "OperationalError"),
        ("sqlalchemy.exc", "DisconnectionError"),
        ("sqlalchemy.exc", "TimeoutError"),  # the pool's: no connection came in time
        ("psycopg", "OperationalError"),  # psycopg.errors.ConnectionTimeout, psycopg_pool's too
        ("redis.exceptions", "ConnectionError"),
        ("redis.exceptions", "TimeoutError"),
    }
)


def out(exc: BaseException) -> bool:
    """Whether ``exc`` (or an exception it was raised from) says the store could not be
    reached: refused or lost at the connection, or timed out (`ConnectionError`,
    `TimeoutError`, a socket's name or network errors; not any `OSError`: a full disk is no
    outage). A store's own wrapping (`failover.errors.StoreError` raised ``from`` the driver's
    error) is looked through."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, ConnectionError | TimeoutError | socket.gaierror) or (
            isinstance(current, OSError) and current.errno in _NETWORK_ERRNOS
        ):
            return True
        for kind in type(current).__mro__:
            if (kind.__module__, kind.__qualname__) in _AT_CONNECTION:
                return True
        current = current.__cause__ or current.__context__
    return False


def worth_retrying(exc: BaseException) -> bool:
    """Whether a write that failed with ``exc`` is tried again later (the async-writes queue
    parks it): the store was out, or it made the write in part (`PartialWrite`)."""
    return isinstance(exc, PartialWrite) or out(exc)
