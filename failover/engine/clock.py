"""The engine's default clock."""

from __future__ import annotations

import functools
from collections.abc import Callable
from datetime import UTC, datetime

__all__ = ["utcnow"]

utcnow: Callable[[], datetime] = functools.partial(datetime.now, UTC)
"""The default clock: aware UTC now (a partial of a builtin: no Python frame per call)."""
