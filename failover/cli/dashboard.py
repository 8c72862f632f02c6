"""``failover dashboard``: serve the read-only dashboard of a store."""

from __future__ import annotations

import argparse
import logging
import socketserver
import sys
import threading
from typing import Any

from ..engine import utcnow
from .common import (
    PROG,
    CliError,
    display,
    from_environment,
    open_store,
    port,
    store_argument,
    table_prefix_argument,
    until_signal,
)

__all__ = ["TOKEN_VARIABLE", "add", "loopback", "refused", "run"]

TOKEN_VARIABLE = "FAILOVER_DASHBOARD_TOKEN"
"""The bearer token when ``--auth-token`` is not given: out of the process list."""


def add(commands: Any) -> None:
    """Add the command to the parser's ``commands`` (argparse's subparsers)."""
    dashboard = commands.add_parser(
        "dashboard",
        help="serve the read-only dashboard of a store",
        description=(
            "Serve the dashboard of a store shared by your services: the health the processes "
            "publish to it (Failover(publish_health=True)) added up per failover (the processes "
            "reporting, their statuses, the calls served live, stale and not recovered), the "
            "names it holds (entries, live and expired, oldest and newest as_of, size) and each "
            "name's entries."
        ),
    )
    store_argument(dashboard)
    table_prefix_argument(dashboard)
    dashboard.add_argument(
        "--host",
        default="127.0.0.1",
        help=(
            "the address to listen on (default: 127.0.0.1, this machine only); any other "
            f"address needs a token (${TOKEN_VARIABLE} or --auth-token), or --insecure"
        ),
    )
    dashboard.add_argument(
        "--port", type=port, default=8050, help="the port to listen on (default: 8050)"
    )
    dashboard.add_argument(
        "--auth-token",
        metavar="TOKEN",
        default=from_environment(TOKEN_VARIABLE),
        help=(
            "require this bearer token (open /?token=TOKEN once in a browser); default: "
            f"${TOKEN_VARIABLE}, best given there (every process on the machine can read a "
            "command's arguments)"
        ),
    )
    dashboard.add_argument(
        "--insecure",
        action="store_true",
        help=(
            "serve beyond this machine without a token: anyone who can reach the address reads "
            "the stored keys and times (and the payloads with --show-payloads)"
        ),
    )
    dashboard.add_argument(
        "--show-payloads",
        action="store_true",
        help="show a preview of each stored payload (they may hold personal data)",
    )
    dashboard.set_defaults(command=run)


def loopback(host: str) -> bool:
    """Whether ``host`` is this machine only."""
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def refused(host: str, token: str | None, insecure: bool) -> str | None:
    """Why the dashboard must not serve on ``host``, or ``None``: beyond this machine it
    needs a token, unless ``insecure`` says the network in between is trusted."""
    if loopback(host) or token or insecure:
        return None
    return (
        f"refusing to serve the dashboard on {host} without a token: anyone who can reach it "
        f"could read the stored keys and times. Set {TOKEN_VARIABLE} (or --auth-token), "
        "listen on 127.0.0.1 behind your own proxy, or pass --insecure if the network is trusted"
    )


def run(args: argparse.Namespace) -> int:
    """Run the command."""
    from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

    from ..dashboard import make_store_app

    out = sys.stdout
    logging.basicConfig(format=f"{PROG}: %(levelname)s: %(message)s")
    why = refused(args.host, args.auth_token, args.insecure)
    if why is not None:
        raise CliError(why)
    if not loopback(args.host) and not args.auth_token:
        print(
            f"{PROG}: warning: listening on {args.host} without a token (--insecure): anyone "
            "who can reach it can read the stored keys and times",
            file=sys.stderr,
        )
    store = open_store(args.store, "dashboard", create=False, table_prefix=args.table_prefix)
    app = make_store_app(
        store, utcnow, show_payloads=args.show_payloads, token=args.auth_token or None
    )

    class Server(socketserver.ThreadingMixIn, WSGIServer):
        daemon_threads = True

    class Quiet(WSGIRequestHandler):
        def log_message(self, format: str, *values: object) -> None:
            return None  # no access log on stderr: the page refreshes every few seconds

    try:
        server = make_server(args.host, args.port, app, server_class=Server, handler_class=Quiet)
    except OSError as exc:
        store.close()
        raise CliError(f"cannot listen on {args.host}:{args.port}: {exc.strerror}") from exc
    host = f"[{args.host}]" if ":" in args.host else args.host
    # Served on a thread: the main thread only waits for the signal, so the handler's exception
    # never lands inside the server's own request handling (which swallows it).
    serving = threading.Thread(target=server.serve_forever, name="failover-dashboard")

    def stop() -> None:
        if serving.is_alive():  # shutdown() would wait forever for a loop that never ran
            server.shutdown()
        server.server_close()
        store.close()

    started = (
        f"{PROG} dashboard of {display(args.store)} on http://{host}:{args.port}/ "
        "(SIGINT or SIGTERM stops it)"
    )
    signal_name = until_signal(started, serving.start, stop, out)
    print(f"{PROG} dashboard stopped ({signal_name})", file=out, flush=True)
    return 0
