"""Bounds every connection to a SQL server shares, sync and async alike."""

from typing import Any

__all__ = ["CONNECT_TIMEOUT_S", "KEEPALIVES", "STATEMENT_TIMEOUT_MS"]

CONNECT_TIMEOUT_S = 10
"""Seconds a new connection may take to open: a server out of reach fails the call's store
operation instead of holding it (the operating system's own limit is minutes)."""

STATEMENT_TIMEOUT_MS = 30_000
"""PostgreSQL's ``statement_timeout`` on the store's connections: a statement stuck on a lock
(a queued write, a cleanup batch) ends server-side instead of holding its worker for good.
Not set behind a bouncer, which refuses startup options: the server's own setting rules there."""

KEEPALIVES: dict[str, Any] = {
    "keepalives": 1,
    "keepalives_idle": 10,
    "keepalives_interval": 5,
    "keepalives_count": 3,
}
"""libpq's TCP keepalives: a peer gone without a word (a partition, a dead host) breaks the
connection within about 25 s instead of the system's two hours."""
