"""Real processes of one fleet for the tests: forked children, each with an engine of its own,
driven by the test over pipes.

A child runs ``setup(index)`` (its engine, its failovers) and then obeys the test's commands,
one JSON line each (``[name, *args]``), answering each with one JSON line: the command's
result, or ``{"error": traceback}``. ``report`` lines (``{"event": ...}``) may come in
between, sent by the child's own threads (an upstream saying it was entered). Every read of
the test is bounded (`HANG`): a child that does not answer fails the test, never hangs it.
Children are forked before the test makes any engine of its own, and always reaped.
"""

from __future__ import annotations

import json
import os
import select
import signal
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import Any

HANG = 10.0  # the hang guard of every read from a child

Commands = dict[str, Callable[..., Any]]


class Child:
    """One forked process of the fleet, as the test sees it."""

    def __init__(self, index: int, pid: int, reading: int, writing: int) -> None:
        self.index = index
        self.pid = pid
        self._in = os.fdopen(reading, "r", buffering=1)
        self._out = writing
        self.events: list[Any] = []
        self._buffer = ""
        self.alive = True

    def send(self, *command: Any) -> None:
        os.write(self._out, (json.dumps(list(command)) + "\n").encode())

    def _line(self, timeout: float) -> Any:
        deadline = time.monotonic() + timeout
        while "\n" not in self._buffer:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([self._in.fileno()], [], [], max(left, 0))
            if not ready:
                raise TimeoutError(f"child {self.index} did not answer within {timeout}s")
            chunk = os.read(self._in.fileno(), 65536).decode()
            if not chunk:
                raise EOFError(f"child {self.index} ended")
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition("\n")
        return json.loads(line)

    def answer(self, timeout: float = HANG) -> Any:
        """The answer to the latest command (events seen meanwhile are kept in `events`)."""
        while True:
            said = self._line(timeout)
            if isinstance(said, dict) and "event" in said:
                self.events.append(said["event"])
                continue
            if isinstance(said, dict) and "error" in said:
                raise AssertionError(f"child {self.index}:\n{said['error']}")
            return said

    def ask(self, *command: Any, timeout: float = HANG) -> Any:
        self.send(*command)
        return self.answer(timeout)

    def event(self, timeout: float = HANG) -> Any:
        """The next event (one already seen first)."""
        if self.events:
            return self.events.pop(0)
        said = self._line(timeout)
        if isinstance(said, dict) and "event" in said:
            return said["event"]
        raise AssertionError(f"child {self.index}: an answer where an event was awaited: {said}")

    def kill(self) -> None:
        if self.alive:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
            self.alive = False

    def close(self) -> None:
        """Close the pipes."""
        self._in.close()
        with suppress(OSError):
            os.close(self._out)

    def end(self) -> None:
        if not self.alive:
            return
        try:
            self.send("exit")
            deadline = time.monotonic() + HANG
            while time.monotonic() < deadline:
                done, _ = os.waitpid(self.pid, os.WNOHANG)
                if done:
                    self.alive = False
                    return
                time.sleep(0.01)
        except OSError:
            pass
        self.kill()


class Here:
    """A child's side: its pipes, and `report` for its threads."""

    def __init__(self, reading: int, writing: int) -> None:
        self._in = os.fdopen(reading, "r", buffering=1)
        self._out = writing
        self._lock = threading.Lock()

    def say(self, value: Any) -> None:
        with self._lock:
            os.write(self._out, (json.dumps(value) + "\n").encode())

    def report(self, event: Any) -> None:
        self.say({"event": event})

    def serve(self, commands: Commands) -> None:
        for line in self._in:
            name, *args = json.loads(line)
            if name == "exit":
                return
            try:
                self.say(commands[name](*args))
            except BaseException:
                self.say({"error": traceback.format_exc()})


@contextmanager
def fleet_of(count: int, setup: Callable[[int, Here], Commands]) -> Iterator[list[Child]]:
    """``count`` forked children, each serving what ``setup(index, here)`` returns."""
    children: list[Child] = []
    try:
        for index in range(count):
            to_child = os.pipe()
            to_parent = os.pipe()
            pid = os.fork()
            if pid == 0:  # the child: never returns into pytest
                code = 0
                try:
                    os.close(to_child[1])
                    os.close(to_parent[0])
                    here = Here(to_child[0], to_parent[1])
                    try:
                        commands = setup(index, here)
                    except BaseException:
                        here.say({"error": traceback.format_exc()})
                        raise
                    here.say("ready")
                    here.serve(commands)
                except BaseException:
                    code = 1
                finally:
                    os._exit(code)
            os.close(to_child[0])
            os.close(to_parent[1])
            children.append(Child(index, pid, to_parent[0], to_child[1]))
        for child in children:
            assert child.answer() == "ready"
        yield children
    finally:
        for child in children:
            try:
                child.end()
            finally:
                child.close()
