"""The public face: `help(failover.failover)` and IDEs show every setting with its default, read
from the one declaration (`failover.settings.Options`); the typed overloads take the same
settings; `docs/api.md` names every public name; the ``[otel]`` extra needs the API only."""

from __future__ import annotations

import ast
import inspect
import os
import pydoc
import re
import subprocess
import sys
import textwrap
import tomllib
import typing
from datetime import timedelta
from pathlib import Path

import pytest

import failover
import failover.decorator
from failover.settings import DEFAULTS, Options, described

ROOT = Path(__file__).resolve().parent.parent
OPTIONS = list(Options.__annotations__)


def test_signature_lists_name_and_every_setting_with_its_default() -> None:
    parameters = inspect.signature(failover.failover).parameters
    assert list(parameters) == ["name", *OPTIONS]
    name = parameters["name"]
    assert (name.kind, name.default) == (inspect.Parameter.POSITIONAL_OR_KEYWORD, None)
    for option in OPTIONS:
        parameter = parameters[option]
        assert parameter.kind is inspect.Parameter.KEYWORD_ONLY, option
        assert parameter.default == DEFAULTS[option], option
        # The type an IDE shows, without `Setting` (the check is the library's business).
        assert typing.get_origin(parameter.annotation) is not typing.Annotated, option
    # The defaults of the contract (DESIGN.md, "The decorator"), spelled out.
    spelled = {
        "ttl": "1h",
        "exceptions": (Exception,),
        "exclude": (),
        "recover_all": False,
        "weight": 1,
        "acquire_timeout": 0,
        "single_flight": False,
        "label": False,
        "engine": None,
        "timeout": None,
    }
    assert {option: parameters[option].default for option in spelled} == spelled


def test_the_signature_binds_as_the_decorator_is_called() -> None:
    signature = inspect.signature(failover.failover)
    assert signature.bind("rates", ttl=timedelta(minutes=15)).arguments == {
        "name": "rates",
        "ttl": timedelta(minutes=15),
    }
    assert signature.bind(name="rates").arguments == {"name": "rates"}
    with pytest.raises(TypeError):
        signature.bind("rates", "15m")  # settings are keywords only, as the decorator says

    # And the decorator takes each spelling the signature shows.
    engine = failover.Failover()
    try:
        for decorator in (
            failover.failover("a", engine=engine, ttl="15m"),
            failover.failover(name="b", engine=engine, ttl="15m"),
        ):
            assert decorator(lambda: 1).definition.ttl == timedelta(minutes=15)
    finally:
        engine.close()


def test_help_shows_every_setting_with_its_default_on_one_line() -> None:
    text = pydoc.plain(pydoc.render_doc(failover.failover))
    head = text.split("\n")[2]  # the signature line, as help() prints it
    assert head.startswith("failover(name: str | None = None, *, ttl: ")
    for option in OPTIONS:
        assert re.search(rf"\b{option}: .*? = ", head), option
        line = re.search(rf"^ +{option}=(\S.*?): (.+)$", text, re.MULTILINE)
        assert line is not None, option
        assert line[2].strip(), option
    assert "    exceptions=(Exception,): exception types" in text


def test_every_setting_is_described_in_options() -> None:
    """The one-line help of each setting is the first sentence of its entry under
    ``Attributes:`` in `Options`'s docstring: a setting added without one fails here."""
    said = described()
    assert list(said) == OPTIONS
    assert all(said.values())


def test_an_option_added_to_options_shows_with_no_other_edit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What adding a setting takes: its field (and its line of docs) in `Options`, nothing in
    the decorator: the signature and the help are rebuilt from there."""
    from failover import settings

    hedge = typing.Annotated[str | None, settings.Setting(None)]
    fields = {**Options.__annotations__, "hedge": hedge}
    grown = typing.TypedDict("Options", fields, total=False)  # type: ignore[misc]  # at run time
    grown.__doc__ = (Options.__doc__ or "") + "\n        hedge: ask again after this long. More.\n"
    monkeypatch.setattr(settings, "Options", grown)
    monkeypatch.setattr(
        settings, "SETTINGS", {**settings.SETTINGS, "hedge": settings.Setting(None)}
    )
    try:
        failover.decorator._public_face()
        parameters = inspect.signature(failover.failover).parameters
        assert list(parameters)[-1] == "hedge"
        assert parameters["hedge"].default is None
        assert parameters["hedge"].annotation == str | None
        assert "    hedge=None: ask again after this long." in (failover.failover.__doc__ or "")
    finally:
        monkeypatch.undo()
        failover.decorator._public_face()
    assert "hedge" not in inspect.signature(failover.failover).parameters


def test_the_typed_overloads_take_the_settings_of_options() -> None:
    """mypy and IDEs read the overloads: those taking settings type ``**options`` as
    ``Unpack[Options]``, the same declaration the runtime signature is built from."""
    overloads = typing.get_overloads(failover.failover)
    assert len(overloads) == 4
    with_settings = [
        ov
        for ov in overloads
        if any(
            p.kind is inspect.Parameter.VAR_KEYWORD
            for p in inspect.signature(ov).parameters.values()
        )
    ]
    assert len(with_settings) == 2
    for ov in with_settings:
        hints = typing.get_type_hints(ov, vars(failover.decorator), include_extras=True)
        assert hints["options"] == typing.Unpack[Options]


def test_the_typing_check_spells_every_setting_as_a_keyword() -> None:
    """``tests/typing/check_options.py`` (run by ``mypy --strict``) calls the decorator with each
    setting of `Options` once, as a keyword: a setting mypy would not accept fails the type
    check; one the file leaves out fails here."""
    tree = ast.parse((ROOT / "tests/typing/check_options.py").read_text())
    (call,) = [
        node.value
        for node in tree.body
        if isinstance(node, ast.Assign)
        and isinstance(node.targets[0], ast.Name)
        and node.targets[0].id == "every"
    ]
    assert isinstance(call, ast.Call)
    assert [kw.arg for kw in call.keywords] == OPTIONS


def test_the_otel_extra_depends_on_the_api_only() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    assert [re.split(r"[<>=\[ ]", dep)[0] for dep in extras["otel"]] == ["opentelemetry-api"]
    assert any(dep.startswith("opentelemetry-sdk") for dep in extras["test"])  # tests may
    # And the package imports no SDK (tests/ may).
    for path in (ROOT / "failover").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            assert not any(n.startswith("opentelemetry.sdk") for n in names), path


def test_opentelemetry_works_with_the_api_alone() -> None:
    """`Failover(opentelemetry=True)` in a process where the SDK cannot be imported: the API's
    no-op providers; live and recovered calls answer as usual."""
    script = textwrap.dedent(
        """
        import sys
        sys.modules["opentelemetry.sdk"] = None  # the SDK is not installed
        try:
            import opentelemetry.sdk.trace
        except ImportError:
            pass
        else:
            raise SystemExit("the SDK could still be imported")

        import failover

        engine = failover.Failover(opentelemetry=True, metrics=False)
        up = [True]

        @failover.failover("otel-api-only", engine=engine)
        def price(sku: str) -> int:
            if not up[0]:
                raise ConnectionError("upstream down")
            return 42

        assert price.referential("a").up_to_date
        up[0] = False
        stale = price.referential("a")
        assert (stale.payload, stale.up_to_date) == (42, False)
        engine.close()
        loaded = [m for m in sys.modules if m.startswith("opentelemetry.sdk") and sys.modules[m]]
        assert not loaded, loaded
        assert "opentelemetry.trace" in sys.modules  # the API was used
        print("ok")
        """
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *sys.path])}
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def test_api_page_names_every_public_name_in_its_tables() -> None:
    """``docs/api.md`` reads as a page on GitHub, without the site: each name `import failover`
    exports has a row (what it is for, a link to its guide) above the generated reference."""
    page = (ROOT / "docs/api.md").read_text()
    tables = page.split("The reference follows")[0]
    rows = [line for line in tables.splitlines() if line.startswith("| `")]
    named = {name for row in rows for name in re.findall(r"`(\w+)", row.split(" | ")[0])}
    assert named == set(failover.__all__)
    for row in rows:
        assert re.search(r"\]\([\w-]+\.md\)", row), row  # a link to its page
        assert (ROOT / "docs").joinpath(*re.findall(r"\]\(([\w-]+\.md)\)", row)[:1]).exists()
