"""`Layer`: the base of the store layers that wrap one store (copying, the store deadline, async
writes): each does what the store below it declares unless it says otherwise, and passes the
control over entries (`delete_all`, tags, `expire`) down to it."""

from __future__ import annotations

from .base import (
    Capabilities,
    FailoverStore,
    delete_all,
    delete_tagged,
    does_io,
    expire,
    keeps_tags,
    native_async,
    writes_async,
)

__all__ = ["Layer"]


class Layer(Capabilities):
    """A layer over one store (``inner``): it does what the store below declares, unless it
    says otherwise (a class attribute such as ``writes_async = True`` answers instead)."""

    inner: FailoverStore

    @property
    def does_io(self) -> bool:
        """Whether the inner store does I/O."""
        return does_io(self.inner)

    @property
    def writes_async(self) -> bool:
        """Whether the inner store's writes never block the caller."""
        return writes_async(self.inner)

    @property
    def native_async(self) -> bool:
        """Whether the inner store has async methods (they pass through the layer)."""
        return native_async(self.inner)

    def layers_below(self) -> tuple[FailoverStore]:
        """The inner store."""
        return (self.inner,)

    def delete_all(self, name: str) -> int:
        """The inner store's `delete_all`."""
        return delete_all(self.inner, name)

    @property
    def keeps_tags(self) -> bool:
        """Whether the inner store keeps tags."""
        return keeps_tags(self.inner)

    def delete_tagged(self, tag: str) -> int:
        """The inner store's `delete_tagged`."""
        return delete_tagged(self.inner, tag)

    def expire(self, name: str, key: str) -> bool:
        """The inner store's `expire`."""
        return expire(self.inner, name, key)
