"""The engine's upkeep, as its public methods: cleanup, flush, close (a base of `Failover`)."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

from ..cleanup import CleanupScheduler
from .maintenance import Maintenance

if TYPE_CHECKING:
    from typing import Self

__all__ = ["Lifecycle"]


class Lifecycle:
    """Cleanup, flush and close of an engine, delegated to its `Maintenance`."""

    maintenance: Maintenance

    def clean(self) -> int:
        """Delete expired entries from the store (every tenant); return the count removed.

        Cleanups of one engine never overlap: a call made while another runs (a scheduler's, or
        one by hand on another thread) waits for it to end.
        """
        return self.maintenance.clean()

    def start_cleanup(
        self, every: timedelta | float | str = timedelta(hours=1)
    ) -> CleanupScheduler:
        """Start a `CleanupScheduler` that runs `clean` now, then every ``every``.

        `close` stops it; so does ``scheduler.stop()``, or leaving ``with engine.start_cleanup():``.

        Args:
            every: the period: a timedelta, seconds, or ``"30s"``/``"15m"``/``"1h"``.

        Returns:
            The running scheduler.

        Raises:
            ConfigurationError: ``every`` is not a positive duration.
            RuntimeError: the engine is closed.
        """
        return self.maintenance.start_cleanup(self, every)

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every write queued by async writes (every tenant's) is written.

        Args:
            timeout: the most seconds to wait; ``None`` waits as long as it takes.

        Returns:
            ``True`` when everything was written, ``False`` when the timeout came first.
        """
        return self.maintenance.flush(timeout)

    def close(self, timeout: float = 5.0) -> None:
        """Stop the cleanup schedulers started here, stop the background refreshes of soft
        timeouts (async ones are cancelled; sync ones get up to ``timeout`` seconds to end and
        be stored), flush pending writes, release the stores.

        Idempotent.
        """
        self.maintenance.close(timeout)

    async def aclose(self, timeout: float = 5.0) -> None:
        """`close` for async code: the store's async connections of this event loop are closed
        on it, and the rest (flushing the queued writes included) on a worker thread, so the
        loop is never blocked. Idempotent."""
        await self.maintenance.aclose(timeout)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
