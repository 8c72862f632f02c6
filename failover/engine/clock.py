"""The engine's default clock."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from datetime import UTC, datetime

__all__ = ["epoch_seconds", "seconds", "utcnow"]

utcnow: Callable[[], datetime] = functools.partial(datetime.now, UTC)
"""The default clock: aware UTC now (a partial of a builtin: no Python frame per call)."""

seconds: Callable[[], float] = time.time
"""The default clock as seconds since the epoch (the plain success path's reading,
`failover.plain`): bound here, at import, as `utcnow` is."""


def epoch_seconds(clock: Callable[[], datetime]) -> Callable[[], float]:
    """``clock`` as seconds since the epoch: the default clock's own float reading
    (`seconds`), else the clock's reading converted (a test's fake clock)."""
    return seconds if clock is utcnow else lambda: clock().timestamp()
