"""Scatter/gather's key type check: a recovery that misses every slice it asks for, although
slices of the name are stored under keys of another type (``int`` ids stored by ``item_key``,
``"1,2,3"`` split into ``str`` keys on recovery), is warned about once per failover.

Checked only on the all-miss path, and at most `CHECKS` times per failover: one extra read of
the same slices with their keys' type switched (``str`` <-> ``int``).
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from ..context import RecoverContext
from ..definition import FailoverDefinition
from ..stores.base import FailoverStore
from .base import slice_key

__all__ = ["KeyTypes"]

log = logging.getLogger("failover")

CHECKS = 10  # all-miss recoveries checked per failover, at most: a miss may be a real miss
SAMPLE = 20  # slices of one recovery tried under the other type


def _switched(value: Any) -> Any:
    """``value`` as the other likely key type (``str`` <-> ``int``), or ``None``."""
    if isinstance(value, str):
        text = value.strip()
        digits = text[1:] if text[:1] in "+-" else text
        return int(text) if digits.isdigit() and digits.isascii() else None
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return None


class KeyTypes:
    """Counts each failover's checks; thread-safe (a race costs one extra check at most)."""

    def __init__(self) -> None:
        self.checks: dict[str, int] = {}
        self.lock = threading.Lock()

    def check(
        self,
        store: FailoverStore,
        d: FailoverDefinition,
        requested: list[RecoverContext[Any]],
    ) -> None:
        """After a recovery found none of the slices ``requested``: warn (once per failover)
        when the same slices are stored under keys of the other type. Never raises."""
        with self.lock:
            done = self.checks.get(d.name, 0)
            if done >= CHECKS:
                return
            self.checks[d.name] = done + 1
        try:
            tried: dict[str, tuple[Any, Any]] = {}
            for asked in requested[:SAMPLE]:
                arguments = dict(asked.arguments)
                if len(arguments) != 1:
                    continue
                ((argument, value),) = arguments.items()
                other = _switched(value)
                if other is not None:
                    tried[slice_key(d, {argument: other})] = (value, other)
            found = store.find_many(d.effective_name, list(tried)) if tried else {}
        except Exception:  # a diagnosis never costs a call anything
            log.debug("failover %r: the key type check failed", d.name, exc_info=True)
            return
        if not found:
            return
        with self.lock:
            self.checks[d.name] = CHECKS  # warned: never checked again
        asked_for, stored_as = tried[next(iter(found))]
        # Types only: argument values may be personal data, and are caller-controlled text.
        log.warning(
            "failover %r: a recovery found none of its slices, asked for by %s keys, but slices "
            "of this name are stored under %s keys: the splitter's keys on store (item_key) and "
            "on recovery (keys_from_args, or the first argument split on commas) differ in type. "
            "Convert them in keys_from_args, e.g. "
            "keys_from_args=lambda ids: [int(i) for i in ids.split(',')]",
            d.name,
            type(asked_for).__name__,
            type(stored_as).__name__,
        )
        log.debug("failover %r: e.g. asked for %r, stored as %r", d.name, asked_for, stored_as)
