"""The shipped Prometheus alert rules are valid, fire in promtool's unit tests, and read exported series."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from nexus import metrics

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
# Exported by the saga work ; every other series must be in nexus.metrics.
FOREIGN = {"nexus_sagas"}


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([_promtool(), *args], cwd=cwd, capture_output=True, text=True, check=False)


def _promtool() -> str:
    path = shutil.which("promtool")
    assert path is not None, "promtool missing: `make test` installs Debian's prometheus package"
    return path


@pytest.mark.processes
def test_promtool_check_rules_passes() -> None:
    """`promtool check rules` accepts deploy/alerts.yml and finds the seven rules."""
    done = _run("check", "rules", "alerts.yml", cwd=DEPLOY)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "7 rules found" in done.stdout


@pytest.mark.processes
def test_promtool_rule_unit_tests_pass() -> None:
    """Each alert fires in deploy/alerts.test.yml on the series that should trigger it, and only then."""
    done = _run("test", "rules", "alerts.test.yml", cwd=DEPLOY)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.processes
def test_a_wrong_expectation_fails_promtool(tmp_path: Path) -> None:
    """The rule tests can fail: expecting no cascade alert when three breakers are open is caught."""
    shutil.copy(DEPLOY / "alerts.yml", tmp_path / "alerts.yml")
    tests = yaml.safe_load((DEPLOY / "alerts.test.yml").read_text(encoding="utf-8"))
    for case in tests["tests"]:
        for check in case["alert_rule_test"]:
            if check["alertname"] == "NexusCircuitBreakersCascade" and check["exp_alerts"]:
                check["exp_alerts"] = []
    (tmp_path / "alerts.test.yml").write_text(yaml.safe_dump(tests), encoding="utf-8")
    done = _run("test", "rules", "alerts.test.yml", cwd=tmp_path)
    assert done.returncode != 0
    assert "NexusCircuitBreakersCascade" in done.stdout + done.stderr


def test_every_alert_reads_an_exported_metric() -> None:
    """Each nexus_* series an alert expression reads is registered by the gateway (or is the sagas gauge)."""
    exported = {m.name for m in metrics.REGISTRY.collect()}
    exported |= {f"{name}_total" for name in exported} | FOREIGN
    groups = yaml.safe_load((DEPLOY / "alerts.yml").read_text(encoding="utf-8"))["groups"]
    used = {n for g in groups for r in g["rules"] for n in re.findall(r"nexus_[a-z_]+", r["expr"])}
    assert len(used) >= 5
    assert used - exported == set()
