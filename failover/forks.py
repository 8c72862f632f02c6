"""Objects that start anew in a forked child (a preforking server's workers): their threads
did not come along, and a lock another thread held at the fork stays held in the child."""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable
from typing import Any

__all__ = ["INHERITED", "AfterFork"]

INHERITED: list[Any] = []
"""A forked child's connections of its parent (database sessions, SQLite files): never used
nor closed, since closing one would end the parent's session or drop its file locks, and held
here for good, since a collected connection would be closed."""


class AfterFork:
    """The live objects of one kind, each reset in a forked child by ``reset(obj)``. The fork
    hook is registered by the first `add`, not at import: a process that never starts one
    pays nothing."""

    def __init__(self, reset: Callable[[Any], None]) -> None:
        self.reset = reset
        self.objects: weakref.WeakSet[Any] = weakref.WeakSet()
        self.lock = threading.Lock()
        self.hooked = False

    def add(self, obj: object) -> None:
        """Reset ``obj`` in the children of forks to come (while it lives)."""
        with self.lock:
            if not self.hooked and hasattr(os, "register_at_fork"):  # POSIX only
                os.register_at_fork(after_in_child=self._in_child)
                self.hooked = True
            self.objects.add(obj)

    def discard(self, obj: object) -> None:
        """``obj`` needs no reset any more (stopped)."""
        self.objects.discard(obj)

    def _in_child(self) -> None:
        self.lock = threading.Lock()  # another thread may have held it at the fork
        for obj in list(self.objects):
            self.reset(obj)
