"""The plain configuration's success path, decided once per runtime at binding.

Most failovers are plain: the default key, a fixed ``ttl``, no ``store_if``, labels, tags,
store interval, soft timeout or single flight, on an in-process `InMemoryStore`. For those,
storing a success is a key, a copy of the result and one entry put in the store's table, and
the shells (``shells.py``) do it in their own frame, with no `Call` and no envelope: a `Call`
is made only when the upstream fails. `Plain` holds what that needs, decided here; any other
failover goes the general way (`Call.live`, the handler chain).
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

from .call import Call
from .expiry import FixedTtl
from .handlers.default import DefaultHandler
from .keys import memo_of
from .stores.backends.memory import InMemoryStore
from .stores.layers.copying import CopyingStore

if TYPE_CHECKING:
    from .core import Runtime

__all__ = ["Plain", "plain_path"]


class Plain:
    """What the plain success path of one runtime needs, read once.

    Attributes:
        name: the failover's effective name (its entries' name).
        ttl: the fixed time to live of its entries.
        put: the store's `InMemoryStore.put`.
        copies: whether the result is copied before it is kept (a copying layer was in front).
        skip_first: the wrapper's first argument is ``self``/``cls``, not part of the key.
        n: how many arguments the key is made of, when they come positionally.
        memo: the memo of the failover's keys (`failover.keys.memo_of`).
    """

    __slots__ = ("copies", "memo", "n", "name", "put", "skip_first", "ttl")

    def __init__(
        self, name: str, ttl: timedelta, store: InMemoryStore, copies: bool, rt: Runtime
    ) -> None:
        self.name = name
        self.ttl = ttl
        self.put = store.put
        self.copies = copies
        self.skip_first = rt.binder.skip_first
        self.n = rt.binder.n if rt.binder.simple else -1  # -1: never positional alone
        self.memo = memo_of(name)


def plain_path(rt: Runtime) -> Plain | None:
    """The plain success path of ``rt``, or ``None`` when its failover is not plain."""
    d = rt.definition
    handler: Any = rt.handler
    if type(handler) is not DefaultHandler or handler.tenant is not None:
        return None
    if handler.store_interval or d.store_interval or type(d.expiry) is not FixedTtl:
        return None
    if d.key is not None or d.label is not None or d.tags is not None or d.store_if is not None:
        return None
    if rt.call_type is not Call or rt.router is not None or rt.may_offload:
        return None
    if not rt.bare and rt.guarded is None:  # a soft timeout: its own path
        return None
    store: Any = handler.store_
    copies = type(store) is CopyingStore
    if copies:
        store = store.inner
    if type(store) is not InMemoryStore or (store.copy and not copies):
        return None
    ttl = d.expiry.ttl
    return Plain(d.effective_name, ttl, store, copies, rt)
