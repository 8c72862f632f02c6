"""The ``failover`` command line (also ``python -m failover``): the parser, built from the
command modules, and `main`.

Errors a user can fix (a bad URL, an unreachable database, a port in use) are one line on stderr
and exit status 1, never a traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from importlib.metadata import PackageNotFoundError, version
from typing import NoReturn

from ..errors import FailoverError
from . import clean, dashboard, demo, inspect, ops, scheduler
from .common import PROG, CliError, one_line

__all__ = ["main"]

# In the order `failover --help` lists them.
COMMANDS = (demo, inspect, clean, scheduler, dashboard, ops)


class _Parser(argparse.ArgumentParser):
    """An argument parser whose usage errors are one line too, pointing at ``--help``."""

    def error(self, message: str) -> NoReturn:
        """Print ``PROG: error: message; see PROG --help`` on stderr and exit with status 2."""
        self.exit(2, f"{self.prog}: error: {message}; see {self.prog} --help\n")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line.

    Args:
        argv: the arguments (default: ``sys.argv[1:]``).

    Returns:
        The exit status: 0 on success, 1 on an error (printed as one line on stderr), 130 when
        interrupted.
    """
    args = _parser().parse_args(argv)
    command: Callable[[argparse.Namespace], int] = args.command
    try:
        return command(args)
    except KeyboardInterrupt:
        return 130
    except _user_errors() as exc:
        print(f"{PROG}: error: {one_line(exc)}", file=sys.stderr)
        return 1


def _user_errors() -> tuple[type[BaseException], ...]:
    # The drivers are imported only when an error has to be matched, to keep --help fast.
    from ..stores.opening import driver_errors

    return (CliError, FailoverError, *driver_errors(), OSError)


def _version() -> str:
    try:
        return version("failover")
    except PackageNotFoundError:  # running from a source tree that is not installed
        return "unknown"


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog=PROG,
        description="Serve the last good answer, marked stale, when an upstream goes down.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    commands = parser.add_subparsers(title="commands", metavar="COMMAND", required=True)
    for command in COMMANDS:
        command.add(commands)
    return parser
