"""The process-wide default engine: the one failovers decorated without ``engine=`` run on."""

from __future__ import annotations

import threading
from typing import Any

from ..core import Decorated
from .failover import Failover
from .registry import warn_replaced

__all__ = ["configure", "get_engine", "installed", "register_default"]

installed: Failover | None = None
"""The default engine once made (the shells read it on every call); ``None`` before."""

_lock = threading.Lock()
_pending: dict[str, Decorated] = {}  # failovers of the default engine, carried over


def get_engine() -> Failover:
    """The process-wide default engine, made on first use (in-memory store)."""
    engine = installed
    if engine is not None:
        return engine
    return _install(None)


def configure(**kwargs: Any) -> Failover:
    """(Re)configure the default engine with `Failover`'s arguments; returns it.

    Failovers already decorated without ``engine=`` carry over to the new engine. The previous
    default engine is closed (its pending writes flushed).
    """
    return _install(Failover(**kwargs))


def _install(engine: Failover | None) -> Failover:
    global installed
    with _lock:
        if engine is None:
            if installed is not None:
                return installed
            engine = Failover()
        previous, installed = installed, engine
        for decorated in _pending.values():
            engine.register(decorated)
    if previous is not None:
        previous.close()
    return engine


def register_default(decorated: Decorated) -> None:
    """Record a failover of the default engine; registered now if that engine exists."""
    with _lock:
        previous = _pending.get(decorated.definition.name)
        _pending[decorated.definition.name] = decorated
        engine = installed
    if engine is not None:
        engine.register(decorated)
    elif previous is not None and previous is not decorated:
        warn_replaced(previous, decorated, stacklevel=5)
