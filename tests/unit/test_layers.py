"""The packages keep their layers (the import contracts in pyproject.toml, run by `lint-imports`): the
gateway names no other package even in a string, and the `nexus` command fails aloud when a subcommand
cannot load."""

from __future__ import annotations

from pathlib import Path

import pytest

from nexus.cli import CommandUnavailable, main

ROOT = Path(__file__).resolve().parents[2]
GATEWAY = ROOT / "src" / "nexus"


def test_gateway_source_names_no_other_package() -> None:
    """No file of the gateway names the lab, the SDK or the command assembly, not even in a string."""
    offenders = [
        f"{path.relative_to(ROOT)}: {word}"
        for path in GATEWAY.rglob("*.py")
        for word in ("nexus_lab", "nexus_client", "nexus_cli")
        if word in path.read_text(encoding="utf-8")
    ]
    assert offenders == []


def test_unimportable_subcommand_fails_naming_its_module() -> None:
    """A subcommand whose module does not import stops the command with an error naming the module."""
    commands = {"broken": ("nexus_no_such_module.sub", "a command whose module is missing")}
    with pytest.raises(CommandUnavailable, match=r"nexus broken: cannot import module nexus_no_such_module\.sub"):
        main(["broken"], commands)


def test_subcommand_without_run_fails_naming_its_module() -> None:
    """A module without configure()/run() is an error too, not a command that silently vanishes."""
    commands = {"errors": ("nexus.errors", "not a command module")}
    with pytest.raises(CommandUnavailable, match=r"module nexus.errors has no configure\(\)/run\(\)"):
        main(["errors"], commands)
