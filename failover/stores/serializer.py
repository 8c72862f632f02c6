"""The row format's public names, where they have always been importable (they live in
`failover.serialization.rows`)."""

from ..serialization.rows import Serializer, datetime_of, entry_binding, micros, time_or_none

__all__ = ["Serializer", "datetime_of", "entry_binding", "micros", "time_or_none"]
