"""The ``failover`` command line: in-process through `main` (fast), and as real subprocesses for
the demo's run time and the scheduler's signal handling."""

from __future__ import annotations

import os
import re
import signal
import socket
import sqlite3
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from urllib.request import urlopen

import pytest

from failover.cli import main, render_table
from failover.engine import utcnow
from failover.payload import envelope
from failover.stores import make_store
from failover.stores.backends.sql import SqlStore

COMMANDS = ["demo", "inspect", "clean", "scheduler"]


def outcomes(output: str) -> list[str]:
    """The outcome column of the demo's timeline, in order."""
    return re.findall(r"^\d+\s.*\s(live|stale|error)$", output, flags=re.MULTILINE)


# -- help and arguments -------------------------------------------------------------------------


@pytest.mark.parametrize("command", [[], *([c] for c in COMMANDS)])
def test_help(command: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main([*command, "--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: failover {' '.join(command)}".rstrip())
    for word in COMMANDS if not command else ["--store"]:
        assert word in out


def test_a_command_is_required(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main([])
    assert exit_.value.code == 2
    assert "required" in capsys.readouterr().err


def test_render_table() -> None:
    table = render_table(["a", "long header"], [["wide cell", "x"], ["", "y"]])
    assert table.splitlines() == [
        "a          long header",
        "---------  -----------",
        "wide cell  x",
        "           y",
    ]


# -- errors: one line, no traceback -------------------------------------------------------------


def single_error_line(capsys: pytest.CaptureFixture[str]) -> str:
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("failover: error: ")
    assert "Traceback" not in captured.err
    return lines[0]


@pytest.mark.parametrize(
    "url",
    [
        "not a url",
        "nosuchscheme://x",
        "memory://?max_entries=lots",
        "sqlite:////nonexistent-dir/sub/failover.db",
        "postgresql+nosuchdriver://user@127.0.0.1/db",
        "postgresql+psycopg://user:secret@127.0.0.1:port/db",  # not a SQLAlchemy URL
    ],
)
@pytest.mark.parametrize("command", ["inspect", "clean", "scheduler", "demo"])
def test_bad_store_urls(command: str, url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([command, "--store", url]) == 1
    captured = capsys.readouterr()
    assert "secret" not in captured.out + captured.err
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("failover: error: ")


@pytest.mark.parametrize("command", ["inspect", "clean", "scheduler", "dashboard"])
def test_a_misspelt_scheme_gets_the_nearest(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([command, "--store", "postgres://app:secret@127.0.0.1:1/db"]) == 1
    line = single_error_line(capsys)
    assert "did you mean postgresql+psycopg://?" in line
    assert "secret" not in line


@pytest.mark.parametrize("url", ["memory://", "cachetools://", "sqlite://", "sqlite:///:memory:"])
@pytest.mark.parametrize("command", ["inspect", "clean", "scheduler"])
def test_in_process_stores_cannot_be_inspected(
    command: str, url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([command, "--store", url]) == 1
    assert "durable store" in single_error_line(capsys)


def test_unreachable_database(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as sock:  # a port nobody listens on: connection refused at once
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        url = f"postgresql+psycopg://user:secret@127.0.0.1:{port}/db"
        assert main(["clean", "--store", url]) == 1
    line = single_error_line(capsys)
    assert line.startswith("failover: error: cannot reach postgresql+psycopg://user:***@127.0.0.1")
    assert "secret" not in line


def test_a_bare_period_is_seconds(capsys: pytest.CaptureFixture[str]) -> None:
    # Parsed (not a usage error): the command gets as far as refusing the in-process store.
    assert main(["scheduler", "--store", "memory://", "--every", "90"]) == 1
    assert "durable store" in single_error_line(capsys)


def test_metrics_port_in_use(sqlite_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        assert main(["scheduler", "--store", sqlite_url, "--metrics-port", port]) == 1
    assert "Address already in use" in single_error_line(capsys)


def usage_error_line(capsys: pytest.CaptureFixture[str], prog: str) -> str:
    """A usage error is one line too, pointing at --help rather than printing the usage."""
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1, err
    assert err.startswith(f"{prog}: error: ")
    assert err.rstrip().endswith(f"; see {prog} --help")
    return err


@pytest.mark.parametrize(
    ("argv", "prog", "message"),
    [
        ([], "failover", "the following arguments are required: COMMAND"),
        (["bogus"], "failover", "argument COMMAND: invalid choice: 'bogus'"),
        (["inspect"], "failover inspect", "the following arguments are required: --store"),
        (["clean", "--store", "sqlite:///x.db", "--nope"], "failover", "unrecognized arguments"),
    ],
)
def test_usage_errors_are_one_line(
    argv: list[str], prog: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    assert message in usage_error_line(capsys, prog)


@pytest.mark.parametrize("port", ["0", "65536", "http", "-1"])
def test_bad_metrics_port_is_a_usage_error(port: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["scheduler", "--store", "sqlite:///never-opened.db", f"--metrics-port={port}"])
    assert exit_.value.code == 2
    err = usage_error_line(capsys, "failover scheduler")
    assert f"argument --metrics-port: {port!r} is not a TCP port" in err


@pytest.mark.parametrize("every", ["soon", "0", "-5m", "nan", "inf", "1e400", "1e15"])
def test_bad_period_is_a_usage_error(every: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["scheduler", "--store", "sqlite:///never-opened.db", f"--every={every}"])
    assert exit_.value.code == 2
    err = usage_error_line(capsys, "failover scheduler")
    assert f"argument --every: {every!r} is not a positive duration" in err


@pytest.mark.parametrize("every", ["1e10", "999999d"])
def test_a_period_too_long_to_wait_is_a_usage_error(
    every: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # Past threading.TIMEOUT_MAX the scheduler's thread would die on its first wait.
    with pytest.raises(SystemExit) as exit_:
        main(["scheduler", "--store", "sqlite:///never-opened.db", f"--every={every}"])
    assert exit_.value.code == 2
    err = usage_error_line(capsys, "failover scheduler")
    assert f"argument --every: {every!r} is too long" in err


# -- demo -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["memory", "sqlite", "sqlite-memory"])
def test_demo_in_process(kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    urls = {"memory": "memory://", "sqlite-memory": "sqlite://"}
    url = urls.get(kind, f"sqlite:///{tmp_path / 'demo.db'}")
    assert main(["demo", "--store", url]) == 0
    out = capsys.readouterr().out
    assert outcomes(out) == ["live", "stale", "stale", "live", "error", "error", "live"]
    assert re.search(r"^2 .*\sFalse\s+5m\s+stale$", out, flags=re.MULTILINE)
    assert re.search(r"^3 .*\sFalse\s+30m\s+stale$", out, flags=re.MULTILINE)
    assert "nothing recovered (no stored entry)" in out
    assert "nothing recovered (the stored entry had expired)" in out
    assert ("failover inspect --store" in out) is (kind == "sqlite")


def test_demo_subprocess_runs_on_its_default_store(tmp_path: Path) -> None:
    env = {**os.environ, "TMPDIR": str(tmp_path)}  # the default SQLite file lands here
    proc = subprocess.run(
        [sys.executable, "-m", "failover", "demo"],
        capture_output=True,
        text=True,
        timeout=30,
        env=env,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    found = outcomes(proc.stdout)
    assert found == ["live", "stale", "stale", "live", "error", "error", "live"]
    assert (tmp_path / "failover-demo.db").exists()
    assert f"store sqlite:///{tmp_path}" in proc.stdout


# -- inspect and clean on a SQLite file -----------------------------------------------------------


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    """A SQLite store file with, under two names, one live and one expired entry each."""
    url = f"sqlite:///{tmp_path / 'store.db'}"
    store = make_store(url)
    now = utcnow()
    for name in ("countries", "rates"):
        for key, as_of in (("live-key", now), ("old-key", now - timedelta(hours=2))):
            payload = {"name": name, "key": key}
            store.store(envelope(name, key, payload, as_of, as_of + timedelta(hours=1), True))
    store.close()
    return url


def test_inspect_lists_every_entry(sqlite_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", "--store", sqlite_url]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["name", "key", "as_of", "expire_on", "size", "type", "status"]
    rows = [line.split() for line in lines[2:] if line.startswith(("countries", "rates"))]
    # name, key, as_of (date time), expire_on (date time), size, type, status
    assert [(r[0], r[1], r[-2], r[-1]) for r in rows] == [
        ("countries", "old-key", "builtins.dict", "expired"),
        ("countries", "live-key", "builtins.dict", "live"),
        ("rates", "old-key", "builtins.dict", "expired"),
        ("rates", "live-key", "builtins.dict", "live"),
    ]
    assert all(int(r[-3]) > len('{"name":"rates","key":"old-key"}') for r in rows)
    assert lines[-1] == "4 entries, 2 expired"


def test_inspect_one_name(sqlite_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", "--store", sqlite_url, "--name", "rates"]) == 0
    out = capsys.readouterr().out
    assert "rates" in out
    assert "countries" not in out
    assert main(["inspect", "--store", sqlite_url, "--name", "nobody"]) == 0
    assert capsys.readouterr().out.startswith("no entries under 'nobody'")


def test_inspect_lists_corrupt_rows_instead_of_crashing(
    sqlite_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # Rows written by hand: times out of range or not numbers, a binary payload, NULL type; a
    # label that would move the terminal's cursor (shown escaped), one that is not text.
    path = sqlite_url.removeprefix("sqlite:///")
    with sqlite3.connect(path) as conn:
        conn.executemany(
            "INSERT INTO failover_store VALUES ('junk', ?, ?, ?, ?, ?, ?)",
            [
                ("huge", 1, 2**62, "json:1", "builtins.int", "\x1b[2Jcleared"),
                ("text", "abc", "def", "json:1", "builtins.int", b"\xff"),
                ("blob", 1, 2, b"\x00\xff", "builtins.int", None),
            ],
        )
    conn.close()
    assert main(["inspect", "--store", sqlite_url, "--name", "junk"]) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = {
        line.split()[1]: " ".join(line.split()[2:]) for line in lines if line.startswith("junk")
    }
    epoch = "1970-01-01 00:00:00+00:00"
    assert rows == {
        "blob": f"{epoch} {epoch} 2 builtins.int expired",
        "huge": f"\\x1b[2Jcleared {epoch} - 6 builtins.int live",
        "text": "- - 6 builtins.int live",
    }
    assert lines[-1] == "3 entries, 1 expired"


def test_inspect_and_clean_never_create_a_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "typo.db"
    for command in ("inspect", "clean"):
        assert main([command, "--store", f"sqlite:///{missing}"]) == 1
        assert "no such SQLite file" in single_error_line(capsys)
    assert not missing.exists()
    (tmp_path / "other.db").touch()  # a database, but not one of failover's
    assert main(["inspect", "--store", f"sqlite:///{tmp_path / 'other.db'}"]) == 1
    assert "no such table: failover_store" in single_error_line(capsys)


def test_table_prefix(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = f"sqlite:///{tmp_path / 'prefixed.db'}"
    store = SqlStore(url, table_prefix="acme_")
    as_of = utcnow() - timedelta(hours=2)
    store.store(envelope("n", "k", 1, as_of, as_of + timedelta(hours=1), True))
    store.close()
    assert main(["inspect", "--store", url, "--table-prefix", "acme_"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "1 entry, 1 expired"
    assert main(["clean", "--store", url, "--table-prefix", "acme_"]) == 0
    assert capsys.readouterr().out.strip() == "removed 1 expired entry"
    assert main(["clean", "--store", url, "--table-prefix", "bad prefix"]) == 1
    assert "prefix" in single_error_line(capsys)


def test_clean_removes_the_expired_entries(
    sqlite_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["clean", "--store", sqlite_url]) == 0
    assert capsys.readouterr().out.strip() == "removed 2 expired entries"
    assert main(["clean", "--store", sqlite_url]) == 0
    assert capsys.readouterr().out.strip() == "removed 0 expired entries"
    assert main(["inspect", "--store", sqlite_url]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "2 entries, 0 expired"


# -- scheduler ------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def start_cli(*command: str) -> tuple[subprocess.Popen[str], str]:
    """``failover COMMAND...`` in a subprocess, and the first line it prints (its start)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "failover", *command],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    return proc, proc.stdout.readline()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_scheduler_runs_serves_metrics_and_exits_0_on_a_signal(
    sqlite_url: str, signum: signal.Signals
) -> None:
    port = free_port()
    command = ["scheduler", "--store", sqlite_url, "--every", "1h", "--metrics-port", str(port)]
    proc, started = start_cli(*command)
    try:
        assert "scheduler started" in started, started
        assert "every 1h" in started
        first_run = proc.stdout.readline()  # the first cleanup runs at start
        assert "cleanup removed 2 in" in first_run, first_run
        with urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            metrics = response.read().decode()
        assert "failover_cleanup_removed_total 2.0" in metrics
        assert "failover_cleanup_seconds_count 1.0" in metrics
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert f"scheduler stopped ({signum.name})" in out
    assert "Traceback" not in err
