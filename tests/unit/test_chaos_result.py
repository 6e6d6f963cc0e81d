"""ScenarioResult.summary_lines: how both chaos runners end a scenario's output."""

from __future__ import annotations

from nexus_lab.chaos.result import ScenarioResult


def test_a_held_scenario_ends_with_one_ok_line() -> None:
    """All invariants held and no error: one line, ok, with the counts."""
    result = ScenarioResult("s", 3, {"gateway SIGKILLed": 2}, 5, 5, 1.25, "gateway SIGKILLed")
    assert result.summary_lines() == ["ok: invariants 5/5, faults {'gateway SIGKILLed': 2}, 1.2s"]


def test_a_broken_scenario_names_at_most_ten_failures_and_its_error() -> None:
    """FAILED, then the first ten broken lines, then the error."""
    result = ScenarioResult("s", 3, {}, 4, 5, 2.0, "faults", failures=[f"f{i}" for i in range(12)], error="E: x")
    lines = result.summary_lines()
    assert lines[0].startswith("FAILED: invariants 4/5")
    assert lines[1:11] == [f"  broke: f{i}" for i in range(10)]
    assert lines[11:] == ["  error: E: x"]
