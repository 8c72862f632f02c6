"""Instructions per decorated call, counted by valgrind's callgrind: repeatable on a loaded
machine, where timings are not (the same count whatever else runs).

    python bench/instructions.py [--calls 5000] [--tree PATH ...]

Each path runs in a process of its own under ``valgrind --tool=callgrind``, which collects only
inside the timed loop (the calls run as the key function of one ``sorted``, and callgrind counts
what runs within ``builtin_sorted``): import and warm-up are left out, and one process per path is
enough (two runs of a path agree within about a hundred instructions per call). ``--tree``
compares checkouts (each put first on ``PYTHONPATH``), e.g. the current tree against
``git archive <commit> | tar -x -C /tmp/base``.

Paths: ``plain`` (the undecorated function), ``cachetools miss`` (``cachetools.cached(TTLCache)``
with a new key every call, the issue's yardstick), ``success`` (repeated keys, metrics off),
``metrics`` (the same, Prometheus metrics on), ``recover`` (the upstream raises, the entry is
found), ``breaker`` (the success path with ``breaker=True``), ``bulkhead`` (with
``max_concurrency=8``). The upstream returns a small dict holding a short list, as in
``bench/run.py``. ``--path`` picks some (all by default). When a bar's two paths were counted,
a second table gives its ratio per tree beside the bar (issue 33's, as ``bench/run.py`` prints
them timed).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

PATHS = ("plain", "cachetools miss", "success", "metrics", "recover", "breaker", "bulkhead")
BARS = (  # (ratio, numerator path, denominator path, bar), as `bench/run.py`'s table has them
    ("sync success / cachetools miss", "success", "cachetools miss", 0.5),
    ("sync recover / cachetools miss", "recover", "cachetools miss", 1.0),
    ("breaker success / basic success", "breaker", "success", 1.1),
    ("bulkhead success / basic success", "bulkhead", "success", 1.1),
    ("metrics on / off", "metrics", "success", 1.05),
)

_ONE = """
import sys
import failover

path, n = sys.argv[1], int(sys.argv[2])
engine = failover.Failover(metrics=path == "metrics")
down = []


guards = {"breaker": {"breaker": True}, "bulkhead": {"max_concurrency": 8}}.get(path, {})


def upstream(code: str) -> dict:
    if down:
        raise ConnectionError("down")
    return {"code": code, "name": "France", "currencies": ["EUR"]}


keys = [f"K{i:04d}" for i in range(1000)]
if path == "plain":
    country = upstream
elif path == "cachetools miss":  # a new key every call: more keys than the cache holds
    import cachetools

    keys = [f"K{i:05d}" for i in range(20_000)]
    country = cachetools.cached(cachetools.TTLCache(maxsize=10_000, ttl=3600))(upstream)
else:
    country = failover.failover("country", engine=engine, **guards)(upstream)
for k in keys:
    country(k)
if path == "recover":
    down.append(1)
size = len(keys)


def one(i: int) -> int:
    try:
        country(keys[i % size])
    except Exception:
        pass
    return 0


# Warm: the specialised bytecode in place; from the end of the keys, so that the counted calls
# (from the start) still miss in cachetools, whose cache kept the last 10,000 keys of the fill.
for i in range(2000):
    one(size - 1 - i)
sorted(range(n), key=one)  # the counted loop: callgrind collects inside builtin_sorted only
engine.close()
"""


def instructions(tree: Path, path: str, calls: int, script: Path) -> int:
    """Instructions counted inside the loop of ``calls`` calls of ``path`` on ``tree``'s package."""
    with tempfile.TemporaryDirectory() as out:
        env = {**os.environ, "PYTHONPATH": str(tree)}
        done = subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                "--collect-atstart=no",
                "--toggle-collect=builtin_sorted",
                f"--callgrind-out-file={out}/cg.out",
                sys.executable,
                str(script),
                path,
                str(calls),
            ],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
    found = re.search(r"Collected : (\d+)", done.stderr)
    if found is None:
        raise SystemExit(f"callgrind said nothing countable:\n{done.stderr[-2000:]}")
    return int(found.group(1))


def command_line(
    doc: str, paths: tuple[str, ...], calls: int
) -> tuple[argparse.Namespace, list[Path]]:
    """The options of a counting script (``--calls``, ``--tree``, ``--path``), and the trees
    to count (this checkout by default); valgrind must be there."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--calls", type=int, default=calls)
    parser.add_argument("--tree", action="append", type=Path, default=[])
    parser.add_argument("--path", action="append", choices=paths, default=[], help="(all)")
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (Debian: apt-get install valgrind)")
    return args, args.tree or [Path(__file__).resolve().parent.parent]


def main() -> None:
    args, trees = command_line(__doc__ or "", PATHS, 3000)
    with tempfile.TemporaryDirectory() as work:
        script = Path(work) / "one.py"
        script.write_text(_ONE)
        print("| path | " + " | ".join(str(t) for t in trees) + " |")
        print("|---|" + "---:|" * len(trees))
        counts: dict[str, list[int]] = {}
        for path in args.path or PATHS:
            counts[path] = [instructions(t, path, args.calls, script) // args.calls for t in trees]
            print(f"| {path} | " + " | ".join(f"{n:,}" for n in counts[path]) + " |")
        ratios = [(label, a, b, bar) for label, a, b, bar in BARS if a in counts and b in counts]
        if ratios:  # issue 33's bars, in instructions: what load cannot move
            print("\n| ratio | " + " | ".join(str(t) for t in trees) + " | bar |")
            print("|---|" + "---:|" * len(trees) + "---:|")
            for label, a, b, bar in ratios:
                row = " | ".join(f"{x / y:.3f}" for x, y in zip(counts[a], counts[b], strict=True))
                print(f"| {label} | {row} | ≤ {bar} |")


if __name__ == "__main__":
    main()
