"""`nexus agent --processes refund`: refund plans, paths through refund.yaml, misbehave as the order's do."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nexus.settings import Settings
from tests.conftest import NexusProcess
from tests.e2e.test_agent_e2e import ALL_MODES, run_agent, run_check, start_stack


async def test_refund_plans_with_every_mode_pass_the_checker(
    settings: Settings, start_gateway: Any, nexus_procs: list[NexusProcess], tmp_path: Path
) -> None:
    """24 refund plans (paid automatically or after review, rejected, withdrawn) with every hostile mode over
    HTTP: each message answered as expected, the hallucinations REJECTED with their codes, all invariants hold."""
    stack = start_stack(settings, start_gateway, nexus_procs, tmp_path)
    report_path = tmp_path / "report.json"
    report = run_agent(stack, report_path, 24, *ALL_MODES, "--processes", "refund")
    assert report["complete"] and {p["process"] for p in report["plans"]} == {"refund"}
    assert report["summary"]["unexpected_decisions"] == 0
    assert set(report["summary"]["outcomes"]) == {"completed", "rejected", "withdrawn"}
    assert {p["expected"]["last_seq"] for p in report["plans"] if p["outcome"] == "completed"} == {3, 4}
    rejected = {(e["mode"], e["code"]) for p in report["plans"] for e in p["events"] if e["decision"] == "REJECTED"}
    assert {m for m, _ in rejected} == {
        "skipped_step",
        "wrong_amount",
        "wrong_currency",
        "invented_step",
        "after_completion",
    }
    paid = [e for p in report["plans"] for e in p["events"] if e["mode"] in ("wrong_amount", "wrong_currency")]
    assert {e["event_type"] for e in paid} == {"RefundPaid"}
    done = run_check(stack, report_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "all invariants held" in done.stdout
