"""Bounds every connection to a SQL server shares, sync and async alike."""

__all__ = ["CONNECT_TIMEOUT_S"]

CONNECT_TIMEOUT_S = 10
"""Seconds a new connection may take to open: a server out of reach fails the call's store
operation instead of holding it (the operating system's own limit is minutes)."""
