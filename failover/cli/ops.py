"""``failover ops``: where the shipped alert rules and Grafana dashboard are."""

from __future__ import annotations

import argparse
from typing import Any

__all__ = ["add", "run"]


def add(commands: Any) -> None:
    """Add the command to the parser's ``commands`` (argparse's subparsers)."""
    ops = commands.add_parser(
        "ops",
        help="where the shipped alert rules and Grafana dashboard are",
        description=(
            "Print the directory holding alerts.yml (Prometheus alerting rules), "
            "alerts_test.yml (their promtool tests) and grafana-dashboard.json."
        ),
    )
    ops.add_argument("what", choices=["path"], help="path: print the directory")
    ops.set_defaults(command=run)


def run(args: argparse.Namespace) -> int:
    """Run the command."""
    from importlib.resources import files

    print(files("failover") / "ops")
    return 0
