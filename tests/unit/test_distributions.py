"""The distributions match the layers: the gateway runs without the lab's dependencies (its commands say which
extra they need), and neither the gateway nor the SDK imports what it does not depend on."""

from __future__ import annotations

import subprocess
import sys
import tomllib

import pytest

import nexus_cli
from tests.conftest import ROOT

LAB_ONLY = ("langgraph", "openai", "standardwebhooks")
LAB_COMMANDS = sorted(name for name, (module, _) in nexus_cli.COMMANDS.items() if module.startswith("nexus_lab."))


def test_the_lab_commands_are_the_ones_the_issue_names() -> None:
    """Every command the lab provides is routed through the lab guard (the list is read from the table)."""
    assert {"demo", "agent", "chaos", "bench", "fake-llm", "services", "sink", "soak"} <= set(LAB_COMMANDS)


@pytest.mark.parametrize("command", LAB_COMMANDS)
@pytest.mark.parametrize("absent", LAB_ONLY)
def test_a_lab_command_without_the_lab_names_the_extra_and_exits_2(
    command: str, absent: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """With one of the lab extra's packages not installed, `nexus <lab command>` prints one line with the pip
    command of the `lab` extra and exits 2, before importing anything of the lab."""
    monkeypatch.setitem(sys.modules, absent, None)  # what find_spec and import see for a missing package
    code = nexus_cli.main(["--data-dir", "/nonexistent", command, "--help"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1, err
    assert f"nexus {command}:" in err
    assert "pip install 'nexus-event-gateway[lab]'" in err
    assert absent in err


def test_a_gateway_command_does_not_need_the_lab(monkeypatch: pytest.MonkeyPatch) -> None:
    """The gateway's own commands ignore the lab guard: `nexus keys --help` parses with no lab package."""
    for name in LAB_ONLY:
        monkeypatch.setitem(sys.modules, name, None)
    with pytest.raises(SystemExit) as done:
        nexus_cli.main(["keys", "--help"])
    assert done.value.code == 0


def test_the_lab_packages_are_an_extra_of_the_gateway() -> None:
    """langgraph, openai and standardwebhooks are in the `lab` extra, not in the gateway's dependencies; the
    gateway depends on the shared nexus-wire and not on the SDK."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    base = " ".join(project["dependencies"])
    lab = " ".join(project["optional-dependencies"]["lab"])
    for name in LAB_ONLY:
        assert name not in base
        assert name in lab
    assert "nexus-wire" in base
    assert "nexus-client" not in base
    assert "nexus-client" in lab


def _modules_after(statement: str) -> set[str]:
    code = f"import sys\n{statement}\nprint(' '.join(sorted({{m.split('.')[0] for m in sys.modules}})))"
    done = subprocess.run(
        [sys.executable, "-c", code],
        env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return set(done.stdout.split())


@pytest.mark.processes
def test_importing_the_gateway_pulls_no_lab_package() -> None:
    """`import nexus` with the app, the gateway, the workers and the command router loads none of langgraph,
    openai, standardwebhooks, nor the lab or the SDK."""
    loaded = _modules_after("import nexus, nexus.app, nexus.gateway, nexus.workers, nexus.commands, nexus_cli")
    assert "nexus" in loaded and "nexus_wire" in loaded
    assert loaded.isdisjoint({*LAB_ONLY, "nexus_lab", "nexus_client"}), loaded & {*LAB_ONLY, "nexus_lab"}


@pytest.mark.processes
def test_importing_the_sdk_pulls_nothing_of_the_gateway() -> None:
    """`import nexus_client` (and its Kafka module) loads nothing of the gateway and no CEL, JSON Schema or
    YAML library: only the shared nexus_wire."""
    loaded = _modules_after("import nexus_client, nexus_client.kafka")
    assert "nexus_wire" in loaded
    assert loaded.isdisjoint({"nexus", "nexus_lab", "nexus_cli", "cel", "celpy", "jsonschema", "jsonschema_rs", "yaml"})
