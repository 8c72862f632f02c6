"""`Layer`: the base of the store layers that wrap one store (copying, the store deadline, async
writes): each does what the store below it declares unless it says otherwise, and passes the
control over entries (`delete_all`, tags, `expire`) down to it. `PassingDown` is what it shares
with the tenant router (`failover.stores.layers.routing.MultiTenantStore`), whose store below
is the current tenant's."""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext

from ..errors import StoreError
from .base import (
    Capabilities,
    FailoverStore,
    delete_all,
    delete_tagged,
    does_io,
    expire,
    keeps_tags,
    native_async,
    reads_fresh,
    writes_async,
)

__all__ = ["Layer", "PassingDown"]


class PassingDown(Capabilities):
    """A store over another: it declares what `_declaring` declares (the store or the factory
    below), unless it says otherwise, and passes the control over entries to the store
    `_below` gives now."""

    @property
    def _declaring(self) -> object:
        """What declares the capabilities it follows."""
        raise NotImplementedError

    def _below(self) -> AbstractContextManager[FailoverStore]:
        """The store below now, for the length of a ``with``."""
        raise NotImplementedError

    @property
    def does_io(self) -> bool:
        """Whether the store below does I/O."""
        return does_io(self._declaring)

    @property
    def writes_async(self) -> bool:
        """Whether the store below's writes never block the caller."""
        return writes_async(self._declaring)

    @property
    def native_async(self) -> bool:
        """Whether the store below has async methods (they pass through the layer)."""
        return native_async(self._declaring)

    def delete_all(self, name: str) -> int:
        """The store below's `delete_all`."""
        with self._below() as store:
            return delete_all(store, name)

    @property
    def keeps_tags(self) -> bool:
        """Whether the store below keeps tags (``False`` when there is none now: a router
        without a tenant)."""
        try:
            with self._below() as store:
                return keeps_tags(store)
        except StoreError:
            return False

    def delete_tagged(self, tag: str) -> int:
        """The store below's `delete_tagged`."""
        with self._below() as store:
            return delete_tagged(store, tag)

    def expire(self, name: str, key: str) -> bool:
        """The store below's `expire`."""
        with self._below() as store:
            return expire(store, name, key)


class Layer(PassingDown):
    """A layer over one store (``inner``): it does what the store below declares, unless it
    says otherwise (a class attribute such as ``writes_async = True`` answers instead)."""

    inner: FailoverStore

    @property
    def _declaring(self) -> object:
        return self.inner

    def _below(self) -> AbstractContextManager[FailoverStore]:
        return nullcontext(self.inner)

    @property
    def reads_fresh(self) -> bool:
        """Whether the inner store's reads are fresh: a layer hands back what it read, unless
        it says otherwise."""
        return reads_fresh(self.inner)

    def layers_below(self) -> tuple[FailoverStore]:
        """The inner store."""
        return (self.inner,)
