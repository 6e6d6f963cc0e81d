"""The three packages keep their layers: the contracts name every gateway module, the gateway names no
other package, and the `nexus` command fails aloud when a subcommand cannot load."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from nexus.cli import CommandUnavailable, main

ROOT = Path(__file__).resolve().parents[2]
GATEWAY = ROOT / "src" / "nexus"


def _contract(contract_id: str) -> dict[str, object]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    [contract] = [c for c in config["tool"]["importlinter"]["contracts"] if c["id"] == contract_id]
    return dict(contract)


def _gateway_modules() -> set[str]:
    names = {p.stem for p in GATEWAY.glob("*.py") if p.stem != "__init__"}
    names |= {p.name for p in GATEWAY.iterdir() if (p / "__init__.py").exists()}
    return {f"nexus.{n}" for n in names}


@pytest.mark.parametrize("contract_id", ["core-alone", "sdk-on-core", "agent-through-sdk"])
def test_contracts_name_every_gateway_module(contract_id: str) -> None:
    """A module added to the gateway must be added to the contracts that keep the core, the SDK and the agent off it."""
    forbidden = set(_contract(contract_id)["forbidden_modules"])  # type: ignore[arg-type]
    allowed = {"nexus.core", "nexus.errors"}
    assert _gateway_modules() - allowed - forbidden == set()


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
