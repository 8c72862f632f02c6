"""How a task waits for permits of `failover.execution.redis_permits.RedisPermits`: each ask
runs on a worker thread (a Redis round trip never blocks the event loop) and is given up on past
the call's deadline plus a margin; a task that stops waiting takes nothing."""

from __future__ import annotations

import asyncio
import threading
import uuid
from time import monotonic
from typing import TYPE_CHECKING

from .permits import remaining

try:
    from ..stores.backends.redis.permits import Unreachable, unanswered
except ImportError as exc:  # pragma: no cover - exercised where redis-py is not installed
    raise ImportError(
        f"RedisPermits needs redis-py: pip install 'failover[redis]' ({exc})"
    ) from exc

if TYPE_CHECKING:
    from .permits import LocalPermits

__all__ = ["AsyncAsks"]


class _Asking:
    """The asks of one waiting task: ``out`` while one runs on a worker thread, ``gone`` once
    the task stopped waiting. Both change under the source's lock: whichever of the worker and
    the task sees the other's gives the lease back, exactly once."""

    __slots__ = ("gone", "out")

    def __init__(self) -> None:
        self.gone = False
        self.out = False


class AsyncAsks:
    """`RedisPermits`'s ``aacquire``: the asks of a waiting task (a mixin of `RedisPermits`,
    which makes the asks themselves)."""

    _lock: threading.Lock
    _margin: float
    poll: float

    if TYPE_CHECKING:

        def _ask(self, lease: str, weight: int, queue: bool) -> bool: ...
        def _leave(self, lease: str) -> None: ...
        def _fall_back(self, exc: Unreachable) -> LocalPermits: ...
        def _enter_wait(self) -> None: ...
        def _exit_wait(self) -> None: ...

    async def aacquire(self, weight: int, deadline: float | None) -> object | None:
        """`acquire` for a task: each ask runs on a worker thread (a Redis round trip never
        blocks the event loop), and is given up on past the deadline plus a margin (a hung
        Redis, busy workers); cancelled, the task takes nothing: what an ask got after the
        task stopped waiting goes back from the worker thread (`_ask_for`), not through the
        loop, which may be closed by then."""
        lease, pause, queued = uuid.uuid4().hex, 0.002, False
        loop = asyncio.get_running_loop()
        asking = _Asking()
        self._enter_wait()
        try:
            while True:
                queue = deadline is None or deadline > monotonic()
                asking.out = True
                ask = loop.run_in_executor(None, self._ask_for, asking, lease, weight, queue)
                # Given up on (a timeout, a cancel), the ask still ends on its worker, maybe
                # raising: shield forgets it then, so its error is taken here, not left for
                # asyncio's "Future exception was never retrieved" (what it says is `_warn`ed).
                ask.add_done_callback(_retrieved)
                limit = (remaining(deadline) or 0.0) + self._margin
                try:
                    async with asyncio.timeout(limit):
                        granted = await asyncio.shield(ask)
                except TimeoutError as exc:
                    self._give_up(asking, lease)
                    raise unanswered(f"no answer from Redis in {limit:g}s") from exc
                except asyncio.CancelledError:
                    self._give_up(asking, lease)
                    raise
                if granted:
                    return lease, weight
                queued = queued or queue
                left = remaining(deadline)
                if not queue or left == 0:
                    if queued:
                        await loop.run_in_executor(None, self._leave, lease)
                    return None
                try:
                    await asyncio.sleep(pause if left is None else min(pause, left))
                except asyncio.CancelledError:
                    self._give_up(asking, lease)
                    raise
                pause = min(pause * 2, self.poll)
        except Unreachable as exc:
            local = await self._fall_back(exc).aacquire(weight, deadline)
            return None if local is None else (None, local)
        finally:
            self._exit_wait()

    def _ask_for(self, asking: _Asking, lease: str, weight: int, queue: bool) -> bool:
        """`_ask` for a task, on a worker thread: when the task stopped waiting meanwhile,
        whatever the ask got goes back here."""
        try:
            return self._ask(lease, weight, queue)
        finally:
            with self._lock:
                asking.out = False
                gone = asking.gone
            if gone:
                self._leave(lease)

    def _give_up(self, asking: _Asking, lease: str) -> None:
        """The task stops waiting: an ask still running gives its lease back when it ends;
        with none running, the lease (a place in the queue) goes back now, off the loop."""
        with self._lock:
            asking.gone = True
            out = asking.out
        if not out:
            threading.Thread(
                target=self._leave, args=(lease,), name="failover-permits-leave", daemon=True
            ).start()


def _retrieved(ask: asyncio.Future[bool]) -> None:
    if not ask.cancelled():
        ask.exception()
