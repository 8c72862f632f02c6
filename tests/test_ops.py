"""The shipped operations files: alert rules checked and unit-tested by promtool, and every
metric the Grafana dashboard and the rules query exported by a real registry."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import threading
from importlib.resources import files
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

import failover
from failover import CleanupScheduler, Failover
from failover.cli import main

from .conftest import FakeClock, Upstream
from .test_store_hung import sqlite_locked

OPS = Path(str(files("failover") / "ops"))
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None,
    reason="needs promtool (Debian: apt-get install prometheus; or a Prometheus release)",
)

PROMQL_WORDS = {
    "sum", "max", "min", "count", "avg", "by", "without", "rate", "increase", "irate",
    "histogram_quantile", "time", "vector", "or", "and", "unless", "on", "ignoring",
    "group_left", "group_right", "label_values", "le", "bool", "offset",
}  # fmt: skip


def _promtool(*args: str, cwd: Path) -> str:
    assert PROMTOOL is not None
    done = subprocess.run(
        [PROMTOOL, *args], cwd=cwd, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_ops_path_names_the_shipped_files(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ops", "path"]) == 0
    where = Path(capsys.readouterr().out.strip())
    assert sorted(p.name for p in where.iterdir() if p.suffix in (".yml", ".json")) == [
        "alerts.yml",
        "alerts_test.yml",
        "grafana-dashboard.json",
    ]


@needs_promtool
def test_alert_rules_pass_promtool_check() -> None:
    assert "SUCCESS: 10 rules found" in _promtool("check", "rules", "alerts.yml", cwd=OPS)


@needs_promtool
def test_alert_rules_fire_on_their_series(tmp_path: Path) -> None:
    # Run on copies: promtool writes nothing, but the package directory may be read-only.
    for name in ("alerts.yml", "alerts_test.yml"):
        shutil.copy(OPS / name, tmp_path / name)
    assert "SUCCESS" in _promtool("test", "rules", "alerts_test.yml", cwd=tmp_path)


def _dashboard_exprs() -> list[str]:
    dashboard = json.loads((OPS / "grafana-dashboard.json").read_text())
    exprs = []
    for panel in dashboard["panels"]:
        exprs += [t["expr"] for t in panel.get("targets", [])]
    exprs += [v["definition"] for v in dashboard["templating"]["list"] if "definition" in v]
    return exprs


def _rule_exprs() -> list[str]:
    text = (OPS / "alerts.yml").read_text()
    exprs = []
    for match in re.finditer(r"expr: (>-\n(?:\s{10,}.*\n)+|.*\n)", text):
        exprs.append(
            " ".join(line.strip() for line in match.group(1).splitlines()[1:] or [match.group(1)])
        )
    return exprs


def _metric_names(expr: str) -> set[str]:
    expr = re.sub(r"\{[^}]*\}", "", expr)  # label matchers
    expr = re.sub(r'"[^"]*"', "", expr)
    expr = re.sub(r"\[[^\]]*\]", "", expr)  # ranges
    names = set(re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*", expr))
    return {
        n
        for n in names
        if n not in PROMQL_WORDS
        and not n.startswith("__")
        and n
        not in (
            "name",
            "outcome",
            "exception",
            "instance",
            "result",
            "effective_name",
            "ttl_seconds",
            "policy",
            "execution",
            "store",
            "pool",
            "guard",
            "operation",
            "reason",
        )
    }


def _exported(tmp_path: Path, clock: FakeClock, upstream: Upstream) -> set[str]:
    """The sample names of a real registry after exercising every kind of event."""
    registry = CollectorRegistry()
    engine = Failover(
        f"sqlite:///{tmp_path / 'ops.db'}",
        clock=clock,
        metrics=registry,
        breaker_defaults={"fail_max": 1},
    )

    @failover.failover("countries", engine=engine, policy="never_throw", breaker=True)
    def countries(code: str) -> object:
        return upstream(code)

    entered, release = threading.Event(), threading.Event()

    @failover.failover("narrow", engine=engine, max_concurrency=1, policy="never_throw")
    def narrow(wait: bool) -> int:
        if wait:
            entered.set()
            release.wait(5)
        return 1

    countries("FR")
    assert engine.flush(5)
    upstream.fail()
    countries("FR")  # stale, and the breaker opens
    countries("DE")  # refused by the open breaker, nothing stored
    worker = threading.Thread(target=narrow, args=(True,))
    worker.start()
    assert entered.wait(5)
    narrow(False)  # no permit
    release.set()
    worker.join(5)
    engine.metrics.partial("countries")
    engine.metrics.hook_failed("countries")
    CleanupScheduler(engine, 3600, metrics=engine.metrics).run_once()
    engine.close()
    # A store write past its deadline (SQLite locked by another process): the store series.
    locked = tmp_path / "locked.db"
    hung = Failover(
        f"sqlite:///{locked}", async_writes=False, store_timeout=0.2, clock=clock, metrics=registry
    )

    @failover.failover("hung", engine=hung)
    def answer() -> int:
        return 1

    answer()
    with sqlite_locked(locked):
        answer()  # its write times out
    text = generate_latest(registry).decode()
    hung.close()
    return {s.name for family in text_string_to_metric_families(text) for s in family.samples}


def test_every_metric_queried_is_exported(
    tmp_path: Path, clock: FakeClock, upstream: Upstream
) -> None:
    exported = _exported(tmp_path, clock, upstream)
    queried = set().union(*map(_metric_names, _dashboard_exprs() + _rule_exprs()))
    assert len(queried) >= 15
    assert queried - exported == set()


@needs_promtool
def test_dashboard_queries_parse(tmp_path: Path) -> None:
    # promtool checks PromQL in rule files: each query becomes a recording rule.
    rules = [
        {
            "record": f"failover:dashboard_query_{i}",
            "expr": expr.replace("$__rate_interval", "5m").replace("$name", ".*"),
        }
        for i, expr in enumerate(_dashboard_exprs())
        if not expr.startswith("label_values")
    ]
    path = tmp_path / "dashboard_queries.yml"
    path.write_text(json.dumps({"groups": [{"name": "dashboard", "rules": rules}]}))
    assert f"SUCCESS: {len(rules)} rules found" in _promtool(
        "check", "rules", path.name, cwd=tmp_path
    )


def test_dashboard_has_a_name_variable_and_the_rows() -> None:
    dashboard = json.loads((OPS / "grafana-dashboard.json").read_text())
    variables = {v["name"] for v in dashboard["templating"]["list"]}
    assert {"name", "datasource"} <= variables
    rows = [p["title"] for p in dashboard["panels"] if p["type"] == "row"]
    assert rows == ["Overview", "Per failover", "Store and queue"]
    assert any(p["type"] == "heatmap" and p["title"] == "Stale age" for p in dashboard["panels"])
