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


def test_closed_reads_the_stored_and_the_noticed_state() -> None:
    storage = pybreaker.CircuitMemoryStorage(pybreaker.STATE_CLOSED)
    cb = pybreaker.CircuitBreaker(state_storage=storage)
    circuit = Circuit(cb)
    assert circuit.closed()
    storage.state = pybreaker.STATE_OPEN  # another process opened it: not noticed yet
    assert not circuit.closed()
    storage.state = pybreaker.STATE_CLOSED
    cb.open()  # noticed open here, and stored open
    assert not circuit.closed()


def test_closed_is_not_while_this_process_noticed_another_state() -> None:
    storage = pybreaker.CircuitMemoryStorage(pybreaker.STATE_CLOSED)
    cb = pybreaker.CircuitBreaker(state_storage=storage)
    circuit = Circuit(cb)
    cb.open()
    storage.state = pybreaker.STATE_CLOSED  # closed by another process: not noticed yet
    assert not circuit.closed()
    cb.half_open()
    storage.state = pybreaker.STATE_CLOSED
    assert not circuit.closed()
    cb.close()
    assert circuit.closed()


def test_closed_reads_a_custom_storage_through_its_public_state() -> None:
    class Storage(pybreaker.CircuitMemoryStorage):
        pass

    storage = Storage(pybreaker.STATE_CLOSED)
    circuit = Circuit(pybreaker.CircuitBreaker(state_storage=storage))
    assert circuit.closed()
    storage.state = pybreaker.STATE_OPEN
    assert not circuit.closed()


def test_a_success_resets_the_failures_and_tells_the_listeners_that_listen() -> None:
    heard: list[str] = []

    class Hears(pybreaker.CircuitBreakerListener):
        def success(self, cb: pybreaker.CircuitBreaker) -> None:
            heard.append(cb.name)

    cb = pybreaker.CircuitBreaker(fail_max=5, name="b")
    cb.add_listener(pybreaker.CircuitBreakerListener())  # the base one: nothing to tell
    cb.add_listener(Hears())
    circuit = Circuit(cb)
    circuit.count_failure()
    circuit.succeeded()
    assert circuit.failures() == 0
    assert heard == ["b"]
