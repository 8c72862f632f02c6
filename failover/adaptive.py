"""Durations the answer decides: ``ttl=`` and ``fresh_for=`` given as callables of the result
and the call's arguments, and ``ttl_jitter=``, which spreads the expiries of entries stored
together.

A duration callable is ``(result, *args, **kwargs) -> duration | None``: the result first, then
the call's arguments as the function receives them (without ``self``/``cls``); for a
scatter/gather failover, one slice's payload and that slice's argument. ``None`` means the
failover's default: the default ``ttl`` (1 hour), or for ``fresh_for`` no freshness at all (the
upstream is called). ``ttl`` is asked when an entry is stored (its ``expire_on`` is stored with
it); ``fresh_for`` when a stored entry is read, of that entry's payload, so it must depend on the
payload and the arguments only (a max-age the payload carries, not the time it is asked).

A failover with neither (the default) keeps `FixedTtl` and its inlined path: nothing here runs.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from .expiry import LONGEST, parse_ttl

if TYPE_CHECKING:
    from .definition import FailoverDefinition
    from .payload import ReferentialPayload

__all__ = ["AdaptiveTtl", "FreshSince", "duration_of"]

Durations = Callable[..., object]
"""``(result, *args, **kwargs) -> duration | None``."""

_NEVER = datetime.max  # made aware where it is compared (`FreshSince`)


def duration_of(fn: Durations, what: str, result: Any, args: Any, kwargs: Any) -> timedelta | None:
    """What ``fn`` says for ``result`` and the arguments: a timedelta, or ``None`` (the
    failover's default).

    Raises:
        ConfigurationError: ``fn`` returned something that is not a positive duration (a
            number of seconds, text such as ``"90s"``, a timedelta), naming ``what``.
    """
    said = fn(result, *args, **kwargs)
    if said is None:
        return None
    if isinstance(said, timedelta) and timedelta(0) < said <= LONGEST:
        return said  # the common answer: no parsing
    return parse_ttl(said, what, "the callable's duration")  # type: ignore[arg-type]


class AdaptiveTtl:
    """The expiry of ``ttl=`` given as a callable, or with ``ttl_jitter=``: an entry lives what
    the callable says for it (``ttl`` when it says ``None``), shortened by up to ``jitter`` of
    that, so that entries stored together do not expire together, and never later than the ttl
    said. The share taken off is spread by the entry's key (a checksum of it, the same in every
    process): the envelope a caller gets shows the expiry its entry was stored with.

    Args:
        ttl: the default ttl (the callable said ``None``, or there is no callable).
        of: the callable, or ``None``.
        jitter: the most of each entry's ttl taken off (0 to 1).
        owner: the failover, for the message of a callable that answers no duration.
    """

    __slots__ = ("jitter", "of", "owner", "ttl")

    def __init__(self, ttl: timedelta, of: Durations | None, jitter: float, owner: str) -> None:
        self.ttl = ttl
        self.of = of
        self.jitter = jitter
        self.owner = owner

    def __repr__(self) -> str:
        return f"AdaptiveTtl(ttl={self.ttl}, of={self.of!r}, jitter={self.jitter})"

    def compute_expiry(self, definition: FailoverDefinition, now: datetime) -> datetime:
        """The expiry of an entry stored at ``now`` whose result and key are not known here:
        the default ttl, the latest any entry of it expires."""
        return now + self.ttl

    def expiry_of(self, now: datetime, result: Any, args: Any, kwargs: Any, key: str) -> datetime:
        """The expiry of ``result`` (of the call ``args``, ``kwargs``) stored at ``now`` under
        ``key``."""
        ttl = self.ttl
        if self.of is not None:
            said = duration_of(self.of, f"{self.owner}: ttl=", result, args, kwargs)
            if said is not None:
                ttl = said
        return now + self._spread(ttl, key)

    def is_expired(self, payload: ReferentialPayload[Any], now: datetime) -> bool:
        """Expired once ``now`` reaches the stored ``expire_on``."""
        return payload.expire_on is not None and now >= payload.expire_on

    def _spread(self, ttl: timedelta, key: str) -> timedelta:
        if not self.jitter:
            return ttl
        # Shortened, never lengthened: a ttl is the most staleness a caller may be served.
        share = zlib.crc32(key.encode()) / 0x1_0000_0000  # 0 <= share < 1, per key
        return ttl * (1.0 - self.jitter * share)


class FreshSince:
    """The threshold of a ``fresh_for=`` callable at ``now``, per entry: an entry stored after
    ``now - fresh_for(payload, *args, **kwargs)`` is fresh; one the callable gives ``None`` never
    is (the failover's default: no freshness)."""

    __slots__ = ("fn", "now", "owner")

    def __init__(self, fn: Durations, now: datetime, owner: str) -> None:
        self.fn = fn
        self.now = now
        self.owner = owner

    def __call__(self, payload: Any, args: Any, kwargs: Any) -> datetime:
        """The time after which an entry of ``payload`` (of the call ``args``, ``kwargs``)
        must have been stored to be fresh at ``now``."""
        said = duration_of(self.fn, f"{self.owner}: fresh_for=", payload, args, kwargs)
        if said is None:
            return _NEVER.replace(tzinfo=self.now.tzinfo)
        return self.now - said
