"""Scatter / gather: a collection result stored and recovered per entity (one *slice* each).

A failover with ``splitter=`` stores each entity of a live result as an entry of its own, keyed
as a call with that entity's key as its only argument; on failure it finds the slices a call
asks for in one batch and merges them. So ``find_by_codes("DE,FR")`` recovers from what
``find_all()`` stored, and, with a shared ``domain``, a single-entity failover
(``find_country("FR")``) and a collection failover address the same entries.

`ListSplitter` does ``list[T]`` results and `DictSplitter` ``dict[K, V]`` results; any object
with the three methods of `PayloadSplitter` does the rest (and, with `Narrowing`'s ``narrowed``,
can narrow a partly fresh call to its missing slices).

- ``contexts``: `StoreContext`, `PayloadSplitter`, `Narrowing` and the slices' contexts;
- ``splitters``: `ListSplitter` and `DictSplitter`;
- ``checks``: the ``splitter=`` setting checked, and an entry's type for the engine.
"""

from .checks import check_splitter, slice_type
from .contexts import CallArguments, Narrowing, PayloadSplitter, StoreContext, slice_context
from .splitters import DictSplitter, ListSplitter

__all__ = [
    "CallArguments",
    "DictSplitter",
    "ListSplitter",
    "Narrowing",
    "PayloadSplitter",
    "StoreContext",
    "check_splitter",
    "slice_context",
    "slice_type",
]
