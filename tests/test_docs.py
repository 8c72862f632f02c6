"""Every ```python block of the documentation and the README runs as written."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

import pytest

from failover.stores import schemes

ROOT = Path(__file__).resolve().parent.parent
PAGES = [*sorted(ROOT.glob("docs/*.md")), ROOT / "README.md"]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)
# Blocks that need what a test machine does not have (a PostgreSQL host, a web framework, a
# long-running server) say so on their first line and are only compiled.
ILLUSTRATION = "# illustration"


def blocks() -> list[tuple[str, str]]:
    found = []
    for page in PAGES:
        for i, match in enumerate(BLOCK.finditer(page.read_text())):
            found.append((f"{page.name}#{i + 1}", match.group(1)))
    return found


@pytest.mark.parametrize(("where", "code"), blocks(), ids=[w for w, _ in blocks()])
def test_doc_example_runs(
    where: str, code: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    compiled = compile(code, where, "exec")
    if code.startswith(ILLUSTRATION):
        return
    monkeypatch.chdir(tmp_path)
    # A scheme an example registers (docs/stores.md's kv://) ends with it.
    monkeypatch.setattr(schemes, "_TABLE", dict(schemes._TABLE))
    if "REDIS_URL" in code:  # the session's redis-server (skipped without one), database 1
        from . import redis_server

        url = redis_server.server().url.rsplit("/", 1)[0] + "/1"
        monkeypatch.setenv("REDIS_URL", url)
        client = redis_server.server().client(db=1)
        client.flushdb()
        client.close()
    # A real module, so that dataclasses and pickling can find the example's classes.
    module = types.ModuleType("docs_" + re.sub(r"\W", "_", where))
    monkeypatch.setitem(sys.modules, module.__name__, module)
    exec(compiled, module.__dict__)  # our own documentation, run as a user would
