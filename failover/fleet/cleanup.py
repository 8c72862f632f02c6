"""One cleanup per period for the whole fleet (``engine.start_cleanup(every=…)`` under
``fleet=``).

Before each scheduled run, the scheduler asks for the period's turn: a lease (``SET NX PX``
of one key, living one period) in the fleet's Redis. The instance that takes it cleans; the
others skip that period (counted in `CleanupTurns.counts`). A cleanup is idempotent, so while
the fleet's Redis does not answer every instance cleans (counted ``local``, the fleet's trouble
logged once): a missed cleanup costs more than a repeated one. Each period's verdict is told
to the engine's stream (`failover.events.Observer.cleanup_turn`).
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Protocol

__all__ = ["CleanupTurns"]


class Link(Protocol):
    client: Any
    events: Any  # the engine's stream (`failover.events.Events`)

    def trouble(self, operation: str, exc: BaseException) -> None: ...


class CleanupTurns:
    """The cleanup turns of one fleet.

    Args:
        link: the fleet.
        key: the turn's key.
        token: this process's name on the turns it takes.
    """

    def __init__(self, link: Link, key: str, token: str) -> None:
        self.link = link
        self.key = key
        self.token = token
        self.counts: Counter[str] = Counter()  # ran, skipped, local

    def turn(self, every: float) -> bool:
        """Whether this instance cleans this period (on the scheduler's thread)."""
        try:
            taken = self.link.client.set(
                self.key, self.token, nx=True, px=max(1, int(every * 1000))
            )
        except Exception as exc:
            self.link.trouble("cleanup", exc)
            self.counts["local"] += 1
            self.link.events.cleanup_turn(True)
            return True
        self.counts["ran" if taken else "skipped"] += 1
        self.link.events.cleanup_turn(bool(taken))
        return bool(taken)
