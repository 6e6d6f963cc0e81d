"""The shipped Prometheus alert rules are valid, fire in promtool's unit tests, and read exported series with
the label values the exporter itself uses."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from nexus import metrics

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
RULES = 14
# A series selector of an expression: its name and its `{...}` matchers, if any.
SELECTOR = re.compile(r"\b(nexus_[a-z_]+|up)\b(\{[^}]*\})?")
MATCHER = re.compile(r'([a-z_]+)\s*=\s*"([^"]*)"')


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([_promtool(), *args], cwd=cwd, capture_output=True, text=True, check=False)


def _promtool() -> str:
    path = shutil.which("promtool")
    assert path is not None, "promtool missing: `make test` installs Debian's prometheus package"
    return path


def alert_rules(path: Path = DEPLOY / "alerts.yml") -> list[dict[str, str]]:
    """Every rule of an alerts file, in order."""
    groups = yaml.safe_load(path.read_text(encoding="utf-8"))["groups"]
    return [rule for group in groups for rule in group["rules"]]


def selectors(expr: str) -> list[tuple[str, dict[str, str]]]:
    """The series an expression reads: (name, its equality matchers)."""
    return [(name, dict(MATCHER.findall(braces or ""))) for name, braces in SELECTOR.findall(expr)]


def _exported_labels() -> dict[str, set[tuple[str, str]]]:
    """Each sample name the gateway exports, with every (label, value) its born series carry."""
    found: dict[str, set[tuple[str, str]]] = {}
    for family in metrics.REGISTRY.collect():
        found.setdefault(family.name, set())
        for sample in family.samples:
            found.setdefault(sample.name, set()).update(sample.labels.items())
    return found


@pytest.mark.processes
def test_promtool_check_rules_passes() -> None:
    """`promtool check rules` accepts deploy/alerts.yml and finds every rule."""
    done = _run("check", "rules", "alerts.yml", cwd=DEPLOY)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{RULES} rules found" in done.stdout


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


def test_every_alert_reads_an_exported_series_with_its_label_values() -> None:
    """Each nexus_* series an alert reads is registered by the gateway, and each label value it matches is one
    the exporter's own series carry (so `status="escalated"` against `ESCALATED` fails here)."""
    exported = _exported_labels()
    wrong = []
    for rule in alert_rules():
        for name, matchers in selectors(rule["expr"]):
            if name == "up":
                continue
            labels = exported.get(name)
            if labels is None:
                wrong.append(f"{rule['alert']}: {name} is not exported")
            wrong += [f"{rule['alert']}: {name}{{{k}={v!r}}} has no such series" for k, v in matchers.items()
                      if labels is not None and (k, v) not in labels]  # fmt: skip
    assert wrong == []


def test_every_rule_names_its_series_and_the_promised_alerts_exist() -> None:
    """Every rule reads at least one named series, and the alerts the deployment guide lists are all there."""
    rules = alert_rules()
    assert all(selectors(rule["expr"]) for rule in rules)
    names = {rule["alert"] for rule in rules}
    assert {
        "NexusSagasEscalated",
        "NexusSagasFailed",
        "NexusGatewayDown",
        "NexusGatewayNotReady",
        "NexusDatabaseUnavailable",
        "NexusNotificationsStuck",
        "NexusBufferedStepsGrowing",
    } <= names
    assert len(names) == len(rules) == RULES
