"""`nexus check` fails when it should: a doctored database row, sink log or report makes it exit 1."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import asyncpg

from nexus.settings import Settings
from tests.conftest import NexusProcess
from tests.e2e.test_agent_e2e import ALL_MODES, Stack, run_agent, run_check, start_stack


async def checked_run(
    settings: Settings, start_gateway: Any, nexus_procs: list[NexusProcess], tmp_path: Path
) -> tuple[Stack, Path, dict[str, Any]]:
    """A small clean run (12 plans, all modes, a sink without faults) that the checker passes."""
    stack = start_stack(settings, start_gateway, nexus_procs, tmp_path, fail_rate=0.0)
    report_path = tmp_path / "report.json"
    report = run_agent(stack, report_path, 12, *ALL_MODES)
    done = run_check(stack, report_path)
    assert done.returncode == 0, done.stdout + done.stderr
    return stack, report_path, report


async def test_doctored_order_row_fails_naming_the_plan(
    settings: Settings, start_gateway: Any, nexus_procs: list[NexusProcess], tmp_path: Path
) -> None:
    """An order whose last_seq was changed behind the gateway's back fails the check, naming its plan."""
    stack, report_path, report = await checked_run(settings, start_gateway, nexus_procs, tmp_path)
    victim = report["plans"][3]
    assert settings.database_url is not None
    conn = await asyncpg.connect(settings.database_url)
    try:
        await conn.execute("UPDATE orders SET last_seq = last_seq - 1 WHERE order_id = $1", victim["order_id"])
    finally:
        await conn.close()
    done = run_check(stack, report_path, "--wait", "2")
    assert done.returncode == 1, done.stdout + done.stderr
    failures = [line for line in done.stdout.splitlines() if "order:" in line]
    assert len(failures) == 1, done.stdout
    assert victim["plan_id"] in failures[0] and "last_seq" in failures[0], done.stdout
    assert "some invariants did NOT hold" in done.stdout


async def test_doctored_sink_log_fails_naming_the_plan(
    settings: Settings, start_gateway: Any, nexus_procs: list[NexusProcess], tmp_path: Path
) -> None:
    """A notification accepted twice, or accepted out of order, in the sink's log fails the check for its plan."""
    stack, report_path, report = await checked_run(settings, start_gateway, nexus_procs, tmp_path)
    lines = stack.sink_log.read_text().splitlines()
    records = [json.loads(line) for line in lines]
    complete = next(p for p in report["plans"] if p["outcome"] == "completed")

    def at(position: int) -> int:
        return next(
            i for i, r in enumerate(records)
            if r["order_id"] == complete["order_id"] and r["position"] == position and r["status"] == 200
        )  # fmt: skip

    twice = stack.sink_log
    twice.write_text("\n".join([*lines, lines[at(2)]]) + "\n")
    done = run_check(stack, report_path, "--wait", "2")
    assert done.returncode == 1, done.stdout + done.stderr
    assert any(complete["plan_id"] in f and "more than once" in f for f in done.stdout.splitlines()), done.stdout

    swapped = list(lines)
    swapped[at(2)], swapped[at(4)] = lines[at(4)], lines[at(2)]
    stack.sink_log.write_text("\n".join(swapped) + "\n")
    done = run_check(stack, report_path, "--wait", "2")
    assert done.returncode == 1, done.stdout + done.stderr
    assert any(complete["plan_id"] in f and "out of order" in f for f in done.stdout.splitlines()), done.stdout


async def test_a_mode_that_never_happened_fails_the_run(
    settings: Settings, start_gateway: Any, nexus_procs: list[NexusProcess], tmp_path: Path
) -> None:
    """A report whose rate for a mode is > 0 but where no plan used it fails the run-wide check."""
    stack, report_path, report = await checked_run(settings, start_gateway, nexus_procs, tmp_path)
    report["config"]["inventory_failure_rate"] = 0.25
    for plan in report["plans"]:
        if plan["outcome"] == "inventory_failed":
            plan["outcome"] = "completed_somehow"
    report_path.write_text(json.dumps(report))
    done = run_check(stack, report_path, "--wait", "2")
    assert done.returncode == 1
    assert any(line.startswith("inventory_failed") and " no " in line for line in done.stdout.splitlines())
