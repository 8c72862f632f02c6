"""Stored times: an aware datetime as microseconds since the Unix epoch, UTC, and back, as the
stores that keep entries as text write them (`failover.serialization.rows`)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from ..errors import StoreError

__all__ = ["EPOCH", "datetime_of", "micros", "time_or_none"]

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def micros(value: datetime) -> int:
    """``value`` as microseconds since the Unix epoch.

    Raises:
        StoreError: a naive datetime.
    """
    try:
        return (value - EPOCH) // _MICROSECOND
    except TypeError:
        raise StoreError(f"datetimes must be timezone-aware, got {value!r}") from None


def datetime_of(value: float) -> datetime:
    """The aware UTC datetime of microseconds since the Unix epoch."""
    return EPOCH + timedelta(0, 0, value)  # positional: three times faster than by keyword


def time_or_none(value: object) -> datetime | None:
    """The aware UTC datetime of a stored time (microseconds since the Unix epoch), or ``None``
    when it is missing or not one (a row written by hand: text, a blob, out of range): for
    listing entries as stored, where a corrupt time must not end the listing."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return None
    try:
        return datetime_of(value)
    except (OverflowError, ValueError):  # out of datetime's range, NaN
        return None
