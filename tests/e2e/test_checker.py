"""`nexus check` fails when it should: a doctored database row, sink log or report makes it exit 1."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import shutil
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import asyncpg
import pytest

from tests.conftest import NexusProcess, PostgresForTests, fast_settings, gateway_starter
from tests.e2e.test_agent_e2e import ALL_MODES, Stack, run_agent, run_check, start_stack


@dataclasses.dataclass(frozen=True)
class CheckedRun:
    """A finished run the checker passed: its processes stopped, its database and files left to copy."""

    stack: Stack
    database: str
    report_path: Path


@pytest.fixture(scope="module")
async def checked_run(pg: PostgresForTests, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[CheckedRun]:
    """A small clean run (12 plans, all modes, a sink without faults) that the checker passes, made once for
    the module; each test doctors its own copy of it (`doctorable`), so no test sees another's changes."""
    tmp = tmp_path_factory.mktemp("checked-run")
    url = await pg.new_database()
    settings = fast_settings(url)
    procs: list[NexusProcess] = []
    try:
        stack = start_stack(settings, gateway_starter(settings, procs, tmp), procs, tmp, fail_rate=0.0)
        report_path = tmp / "report.json"
        run_agent(stack, report_path, 12, *ALL_MODES)
        done = run_check(stack, report_path)
        assert done.returncode == 0, done.stdout + done.stderr
    finally:
        for proc in procs:
            proc.kill()
    database = urlsplit(url).path.lstrip("/")
    await _until_unused(pg, database)
    yield CheckedRun(stack, database, report_path)


async def _until_unused(pg: PostgresForTests, database: str, timeout_s: float = 10.0) -> None:
    """Wait until the sessions of the killed processes have left `database` (a template must have none)."""
    conn = await asyncpg.connect(pg.admin_url)
    try:
        deadline = time.monotonic() + timeout_s
        query = "SELECT count(*) FROM pg_stat_activity WHERE datname = $1"
        while await conn.fetchval(query, database) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
    finally:
        await conn.close()


@pytest.fixture
async def doctorable(
    checked_run: CheckedRun, pg: PostgresForTests, tmp_path: Path
) -> tuple[Stack, Path, dict[str, Any]]:
    """This test's own copy of the checked run: a database cloned from the run's, its sink log and report
    copied; (stack, report path, report) as the run left them."""
    url = await pg.new_database(template=checked_run.database)
    sink_log = Path(shutil.copy(checked_run.stack.sink_log, tmp_path / "sink.log"))
    report_path = Path(shutil.copy(checked_run.report_path, tmp_path / "report.json"))
    settings = checked_run.stack.settings.replace(database_url=url)
    stack = dataclasses.replace(checked_run.stack, settings=settings, sink_log=sink_log, tmp=tmp_path)
    return stack, report_path, json.loads(report_path.read_text())


async def test_doctored_order_row_fails_naming_the_plan(doctorable: tuple[Stack, Path, dict[str, Any]]) -> None:
    """An order whose last_seq was changed behind the gateway's back fails the check, naming its plan."""
    stack, report_path, report = doctorable
    victim = report["plans"][3]
    assert stack.settings.database_url is not None
    conn = await asyncpg.connect(stack.settings.database_url)
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


async def test_doctored_sink_log_fails_naming_the_plan(doctorable: tuple[Stack, Path, dict[str, Any]]) -> None:
    """A notification accepted twice, or accepted out of order, in the sink's log fails the check for its plan."""
    stack, report_path, report = doctorable
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


async def test_a_mode_that_never_happened_fails_the_run(doctorable: tuple[Stack, Path, dict[str, Any]]) -> None:
    """A report whose rate for a mode is > 0 but where no plan used it fails the run-wide check."""
    stack, report_path, report = doctorable
    report["config"]["inventory_failure_rate"] = 0.25
    for plan in report["plans"]:
        if plan["outcome"] == "inventory_failed":
            plan["outcome"] = "completed_somehow"
    report_path.write_text(json.dumps(report))
    done = run_check(stack, report_path, "--wait", "2")
    assert done.returncode == 1
    assert any(line.startswith("inventory_failed") and " no " in line for line in done.stdout.splitlines())
