"""docs/settings.md is the rendering of settings.py, and every `NEXUS_*` name the tree uses is known to the
unknown-variable warning of `nexus serve`."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

from nexus.settings import Settings, known_variables, unknown_variables

ROOT = Path(__file__).resolve().parents[2]
# A variable's name in text; not a prefix written before `{`, `*` or `_` (NEXUS_LLM_*, f"NEXUS_SERVICE_{n}").
NAME = re.compile(r"\bNEXUS_[A-Z0-9_]*[A-Z0-9](?![A-Za-z0-9_{*])")
PYTHON_NAMES = {"NEXUS_CMD"}  # a constant of nexus_lab.procs, not a variable


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("settings_doc", ROOT / "scripts" / "settings_doc.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_docs_settings_md_is_the_rendering_of_settings_py() -> None:
    """The committed page equals what `make settings-doc` writes now (run it after adding a setting)."""
    page = (ROOT / "docs" / "settings.md").read_text(encoding="utf-8")
    assert page == _generator().render(), "docs/settings.md is stale: run `make settings-doc`"


def test_every_setting_has_a_row_with_a_meaning() -> None:
    """Each setting's variable is a row of the page, with its default and a meaning (its docstring)."""
    page = (ROOT / "docs" / "settings.md").read_text(encoding="utf-8")
    rows = [line for line in page.splitlines() if line.startswith("| `NEXUS_")]
    assert len(rows) == len(Settings.model_fields)
    assert all(Settings.model_fields[name].description for name in Settings.model_fields)


def test_every_nexus_name_of_the_tree_is_known() -> None:
    """Each `NEXUS_*` name written in the code, scripts and tests is a setting, a service URL or one of the
    documented other tools' names: a new one must join `OTHER_VARIABLES` or `nexus serve` would warn."""
    known = known_variables() | PYTHON_NAMES
    places = [ROOT / "Makefile", *(ROOT / "scripts").rglob("*")]
    for folder in ("src", "tests", "benchmarks", "examples"):
        places += [p for p in (ROOT / folder).rglob("*") if p.suffix in {".py", ".sh", ".lua", ".yml", ".yaml"}]
    found = {
        (name, path.relative_to(ROOT).as_posix())
        for path in places
        if path.is_file()
        for name in NAME.findall(path.read_text(encoding="utf-8", errors="replace"))
    }
    stray = sorted((n, p) for n, p in found if n not in known and not re.fullmatch(r"NEXUS_SERVICE_\w+_URL", n))
    assert stray == []


def test_unknown_variables_are_named_with_the_nearest_known_name() -> None:
    """A misspelt setting is reported with the name it was meant to be; settings, service URLs, the SDK's,
    the lab's and other prefixes are not reported."""
    typo = "NEXUS_" + "DATABSE_URL"  # built here so the tree scan above does not find it
    other = "NEXUS_" + "HTTP_PROT"
    env = {
        typo: "postgresql://db/nexus",
        other: "8080",
        "NEXUS_HTTP_PORT": "8081",
        "NEXUS_SERVICE_PAYMENT_URL": "http://pay",
        "NEXUS_LLM_MODEL": "m",
        "NEXUS_API_KEY": "nxk_x",
        "OTEL_SERVICE_NAME": "x",
        "PATH": "/bin",
    }
    assert unknown_variables(env) == [(typo, "NEXUS_DATABASE_URL"), (other, "NEXUS_HTTP_PORT")]
