"""What a call tells off its usual path: to its failover's stream, a recovery's read timed
(when an observer wants timings), the failures, and a result the store cannot encode, which the
observers (`failover.events`) count and log (a new one needs nothing of the runtime); to its
caller, why nothing was recovered (a note on the exception re-raised). A live result's timed
write stays in `Call.live`, on the metered success path.
"""

from __future__ import annotations

from time import perf_counter
from typing import TYPE_CHECKING, Any

from .context import Miss
from .errors import SerializationError

if TYPE_CHECKING:
    from .core import Runtime
    from .handlers.lookup import Lookup
    from .payload import ReferentialPayload

__all__ = ["looked_up", "note_unrecovered", "unencodable"]


def looked_up(rt: Runtime, lookup: Lookup, found: ReferentialPayload[Any] | Miss) -> None:
    """A recovery's read is done: timed for the observers; a failed read (treated as a miss)
    and a failed chore (an expired entry not dropped: the answer stands) told as trouble."""
    events = rt.events
    error = lookup.error
    if events.timed:
        seconds = perf_counter() - lookup.start
        if error is not None:
            events.read("error", seconds, None)
        elif isinstance(found, Miss):
            events.read("not_recovered", seconds, None)
        else:
            events.read("recovered", seconds, found)
    if error is not None:
        events.trouble("recover", error, "")
    chore = lookup.chore_error
    if chore is not None:
        events.trouble("chore", chore, "")


def unencodable(rt: Runtime, result: Any, exc: SerializationError) -> None:
    """The store cannot encode ``result``'s type: it is never offered again (each attempt
    would cost an encoding and a traceback), the rethrow note says why, and it is told once."""
    kind = type(result)
    name = f"{kind.__module__}.{kind.__qualname__}"
    rt.refused_types.add(kind)
    if rt.unstorable is None:
        rt.unstorable = f"the store cannot encode {name}: {exc}"
    rt.events.trouble("encode", exc, name)


def note_unrecovered(cause: BaseException, name: str, why: str) -> None:
    """Say on ``cause`` why failover ``name`` recovered nothing: one note per failover, however
    often the same exception object passes (an upstream re-raising a kept error, nested calls),
    so that notes never pile up on it."""
    prefix = f"failover {name!r}: nothing recovered ("
    note = f"{prefix}{why})"
    notes = getattr(cause, "__notes__", None)
    if isinstance(notes, list):
        for i, old in enumerate(notes):
            if isinstance(old, str) and old.startswith(prefix):
                notes[i] = note  # the latest reason, in the note's place
                return
    cause.add_note(note)
