"""The fleet: where the processes of one service coordinate, through one Redis
(``Failover(fleet="redis://…")``). See `failover.fleet.core`."""

from .core import LABEL, LEASE_TTL, SYNC_EVERY, Fleet, make_fleet

__all__ = ["LABEL", "LEASE_TTL", "SYNC_EVERY", "Fleet", "make_fleet"]
