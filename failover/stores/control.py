"""Control over entries for stores that declare nothing of it (the defaults of
`failover.stores.base.Capabilities`): every entry of a name removed by listing them
(`delete_all_listed`), and a fresh window ended by writing the entry again, flagged
(`expire_rewritten`). A store that can do either in one operation (the library's all do)
declares its own ``delete_all`` or ``expire`` (`failover.stores.declaring`); tags have no
fallback: a store keeps them or does not."""

from __future__ import annotations

from typing import Any

from ..errors import ConfigurationError
from ..payload import envelope
from .protocol import FailoverStore, Payload

__all__ = ["delete_all_listed", "expire_rewritten", "fresh_ended", "no_tags"]


def delete_all_listed(store: FailoverStore, name: str) -> int:
    """Remove every entry of ``name`` from ``store``: its entries listed (``find_all``), then
    removed one by one (``delete``): two operations or more, not one; how many were listed."""
    keys = [p.key for p in store.find_all(name)]
    delete_many: Any = getattr(store, "delete_many", None)
    if callable(delete_many):
        delete_many(name, keys)
    else:
        for key in keys:
            store.delete(name, key)
    return len(keys)


def expire_rewritten(store: FailoverStore, name: str, key: str) -> bool:
    """End the fresh window of ``(name, key)`` in ``store`` by writing the entry again, flagged
    ``fresh_ended``, with its own ``as_of`` (entries only move forward: a newer entry stored
    meanwhile stays). Not atomic: an entry deleted between the read and the write comes back
    (a store of your own avoids that with an ``expire`` method). Whether there was an entry."""
    found = store.find(name, key)
    if found is None:
        return False
    if not found.fresh_ended:
        store.store(fresh_ended(found))
    return True


def fresh_ended(found: Payload) -> Payload:
    """``found`` with its fresh window ended (``fresh_ended``), the rest as it was."""
    return envelope(
        found.name,
        found.key,
        found.payload,
        found.as_of,
        found.expire_on,
        found.up_to_date,
        label=found.label,
        tags=found.tags,
        fresh_ended=True,
    )


def no_tags(store: object) -> ConfigurationError:
    """The error of ``invalidate_tag`` on a store that keeps no tags."""
    return ConfigurationError(
        f"{store!r} keeps no tags: engine.invalidate_tag() needs a store that does (every "
        "store of the library; a store of your own declares a delete_tagged(tag) method, and "
        "stores each entry's tags, ReferentialPayload.tags)"
    )
