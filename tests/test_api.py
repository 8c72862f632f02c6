"""The public surface: what `import failover` exports is exactly `__all__`, sorted."""

from __future__ import annotations

import inspect

import failover
import failover.stores


def test_all_is_sorted_and_complete() -> None:
    for module in (failover, failover.stores):
        assert module.__all__ == sorted(module.__all__)
        for name in module.__all__:  # resolves the lazy exports (SqlStore imports SQLAlchemy)
            getattr(module, name)
        public = {
            name
            for name, value in vars(module).items()
            if not name.startswith("_") and not inspect.ismodule(value)
        }
        assert public - {"annotations"} == set(module.__all__)


def test_every_public_name_has_a_docstring() -> None:
    for name in failover.__all__:
        assert inspect.getdoc(getattr(failover, name)), name


def test_submodules_reached_from_the_package() -> None:
    """`failover.asgi`, `failover.http` and `failover.served` come with ``import failover`` and
    keep their names there, not at the top: they are about one kind of caller each."""
    for module in (failover.asgi, failover.http, failover.served):
        assert module.__all__ == sorted(module.__all__)
        for name in module.__all__:
            assert inspect.getdoc(getattr(module, name)), f"{module.__name__}.{name}"
            assert not hasattr(failover, name), name
