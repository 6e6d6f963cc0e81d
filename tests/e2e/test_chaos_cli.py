"""`nexus chaos` at the command line, where no process is killed."""

from __future__ import annotations

import subprocess

import pytest

from nexus_lab.chaos.scenarios import SCENARIOS
from nexus_lab.procs import NEXUS_CMD
from tests.conftest import ROOT, free_port


def test_chaos_without_a_broker_says_how_to_start_one() -> None:
    """A Kafka scenario with no broker listening exits 2 naming `make kafka-up`, not with a connection error."""
    done = subprocess.run(
        [*NEXUS_CMD, "chaos", "kafka-restart", "--kafka-bootstrap", f"127.0.0.1:{free_port()}"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert "make kafka-up" in done.stderr
    assert "Traceback" not in done.stderr


def test_list_names_every_scenario(capsys: pytest.CaptureFixture[str]) -> None:
    """`nexus chaos --list` prints one line per scenario and exits 0."""
    from nexus_cli import main

    assert main(["chaos", "--list"]) == 0
    out = capsys.readouterr().out
    assert [line.split()[0] for line in out.splitlines()] == list(SCENARIOS)


def test_unknown_scenario_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    """An unknown scenario name exits 2 before anything starts."""
    from nexus_cli import main

    assert main(["chaos", "no-such-scenario"]) == 2
    assert "unknown scenario" in capsys.readouterr().err


def test_a_scenario_with_a_cluster_of_its_own_needs_no_shared_broker() -> None:
    """`broker-kill` starts its own three brokers, so `nexus chaos` asks for the shared broker only for the others."""
    from nexus_lab.chaos import needs_kafka

    assert needs_kafka(["broker-kill", "kafka-restart", "reordering"]) == ["kafka-restart"]
