"""The agent end to end: `nexus agent` -> gateway (HTTP or Kafka) -> dispatcher -> `nexus sink` -> `nexus check`."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from nexus.delivery.signing import generate_secret
from nexus.settings import Settings
from nexus_lab.agent.hostile import LIFECYCLE_MODES
from tests.conftest import ROOT, TEST_API_KEY, NexusProcess, free_port, settings_env, wait_http
from tests.integration.kafka_helpers import kafka_settings

__all__ = ["kafka_settings"]  # the fixture, imported for pytest

ALL_MODES = [
    "--inventory-failure-rate", "0.25",
    "--payment-rejection-rate", "0.3",
    "--hostile-rate", "0.3",
]  # fmt: skip


@dataclasses.dataclass
class Stack:
    """A sink and a gateway (with its dispatcher) delivering to it, both real processes."""

    settings: Settings
    gateway_url: str
    sink_log: Path
    tmp: Path

    def env(self) -> dict[str, str]:
        return settings_env(self.settings)


def start_stack(
    settings: Settings,
    start_gateway: Any,
    nexus_procs: list[NexusProcess],
    tmp_path: Path,
    *serve_args: str,
    fail_rate: float = 0.2,
) -> Stack:
    """Start `nexus sink` (failing `fail_rate` of attempts with 500/503) and `nexus serve` delivering to it."""
    secret = generate_secret()
    port = free_port()
    sink_log = tmp_path / "sink.log"
    args = ["sink", "--port", str(port), "--log", str(sink_log), "--secret", secret, "--seed", "7"]
    args += ["--fail-rate", str(fail_rate), "--fail-status", "500,503"]
    sink = NexusProcess(args, settings_env(settings), tmp_path / "sink.out").start()
    nexus_procs.append(sink)
    wait_http(f"http://127.0.0.1:{port}/healthz", proc=sink)
    s = settings.replace(webhook_url=f"http://127.0.0.1:{port}/hook", webhook_secret=secret)
    _, base = start_gateway(*serve_args, settings_=s)
    return Stack(s, base, sink_log, tmp_path)


def nexus(args: list[str], env: dict[str, str], timeout: float = 180) -> subprocess.CompletedProcess[str]:
    """Run `nexus ...` to completion, capturing its output."""
    return subprocess.run(
        [sys.executable, "-m", "nexus_cli", *args],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def run_agent(stack: Stack, report: Path, orders: int, *extra: str) -> dict[str, Any]:
    """`nexus agent` over HTTP (unless `extra` says otherwise); returns the report it wrote."""
    args = ["agent", "--orders", str(orders), "--seed", "e2e", "--report", str(report)]
    args += ["--gateway-url", stack.gateway_url, "--concurrency", "8", *extra]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NEXUS_", "SIM_"))}
    done = nexus(args, {**env, "NEXUS_API_KEY": TEST_API_KEY})
    assert done.returncode == 0, done.stdout + done.stderr
    loaded: dict[str, Any] = json.loads(report.read_text())
    return loaded


def run_check(
    stack: Stack, report: Path, *extra: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return nexus(["check", str(report), "--sink-log", str(stack.sink_log), "--wait", "60", *extra], env or stack.env())


async def test_agent_over_http_with_every_mode_passes_the_checker(
    settings: Settings, start_gateway: Any, nexus_procs: list[NexusProcess], tmp_path: Path
) -> None:
    """40 plans with both failures and all six hostile modes, over HTTP, through a faulty sink: all invariants hold."""
    stack = start_stack(settings, start_gateway, nexus_procs, tmp_path)
    report_path = tmp_path / "report.json"
    report = run_agent(stack, report_path, 40, *ALL_MODES)
    assert report["complete"] and len(report["plans"]) == 40
    assert report["summary"]["unexpected_decisions"] == 0
    assert set(report["summary"]["outcomes"]) == {"completed", "inventory_failed", "payment_rejected"}
    lifecycle = {m.value for m in LIFECYCLE_MODES}  # Only explicit rates turn them on
    assert all(n > 0 for m, n in report["summary"]["hostile"].items() if m not in lifecycle)
    done = run_check(stack, report_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "all invariants held" in done.stdout
    sink_faults = sum(1 for line in stack.sink_log.read_text().splitlines() if json.loads(line)["fault"])
    assert sink_faults > 0  # the sink did misbehave, and delivery still held


@pytest.mark.kafka
async def test_agent_over_kafka_with_every_mode_passes_the_checker(
    kafka_settings: Settings, start_gateway: Any, nexus_procs: list[NexusProcess], tmp_path: Path
) -> None:
    """The same 40 plans over Kafka (`nexus serve --kafka`) pass the same checker."""
    s = kafka_settings
    stack = start_stack(s, start_gateway, nexus_procs, tmp_path, "--kafka")
    report_path = tmp_path / "report.json"
    extra = ["--transport", "kafka", "--kafka-bootstrap", s.kafka_bootstrap, "--kafka-topic", s.kafka_topic]
    report = run_agent(stack, report_path, 40, *ALL_MODES, *extra)
    assert report["complete"] and report["config"]["transport"] == "kafka"
    assert all(e["decision"] is None for p in report["plans"] for e in p["events"])
    done = run_check(stack, report_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "all invariants held" in done.stdout and "not checked: Kafka acks" in done.stdout
    assert "DLQ topic could not be read" not in done.stdout  # dead letters were checked on the topic
