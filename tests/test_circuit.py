"""The pybreaker internals that `failover.execution.circuit` reads: these tests fail when a
pybreaker release renames or retypes one of them (then widen the adapter, and the pin)."""

from __future__ import annotations

from importlib.metadata import version

import pybreaker

from failover.execution.circuit import Circuit


def test_the_adapter_reads_the_breakers_own_storage() -> None:
    storage = pybreaker.CircuitMemoryStorage(pybreaker.STATE_CLOSED)
    cb = pybreaker.CircuitBreaker(fail_max=3, state_storage=storage)
    circuit = Circuit(cb)
    assert circuit.storage is storage
    assert circuit.memory


def test_the_noticed_state_follows_the_breakers_transitions() -> None:
    cb = pybreaker.CircuitBreaker(fail_max=3)
    circuit = Circuit(cb)
    assert circuit.noticed_state() == circuit.stored_state() == pybreaker.STATE_CLOSED
    cb.open()
    assert circuit.noticed_state() == circuit.stored_state() == pybreaker.STATE_OPEN


def test_the_noticed_state_lags_a_change_made_in_the_storage_alone() -> None:
    storage = pybreaker.CircuitMemoryStorage(pybreaker.STATE_CLOSED)
    cb = pybreaker.CircuitBreaker(state_storage=storage)
    circuit = Circuit(cb)
    storage.state = pybreaker.STATE_OPEN  # as another process sharing the storage would
    assert circuit.stored_state() == pybreaker.STATE_OPEN
    assert circuit.noticed_state() == pybreaker.STATE_CLOSED


def test_failures_are_counted_in_the_storage_as_pybreaker_counts_them() -> None:
    cb = pybreaker.CircuitBreaker(fail_max=5)
    circuit = Circuit(cb)
    circuit.count_failure()
    circuit.count_failure()
    assert circuit.failures() == cb.fail_counter == 2


def test_a_custom_storage_is_counted_through_its_public_counter() -> None:
    class Storage(pybreaker.CircuitMemoryStorage):
        pass

    cb = pybreaker.CircuitBreaker(state_storage=Storage(pybreaker.STATE_CLOSED))
    circuit = Circuit(cb)
    assert not circuit.memory
    circuit.count_failure()
    assert circuit.failures() == 1


def test_the_listeners_are_the_breakers_own_list() -> None:
    cb = pybreaker.CircuitBreaker()
    circuit = Circuit(cb)
    listener = pybreaker.CircuitBreakerListener()
    cb.add_listener(listener)
    assert list(circuit.listeners()) == [listener]
    cb.remove_listener(listener)
    assert list(circuit.listeners()) == []


def test_the_installed_pybreaker_is_in_the_tested_range() -> None:
    major, minor = (int(part) for part in version("pybreaker").split(".")[:2])
    assert (1, 4) <= (major, minor) < (1, 5)
