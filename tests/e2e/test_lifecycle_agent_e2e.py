"""The lab: `nexus agent` replanning mid-order, stalling before its last step and placing orders
that need approval, against a real `nexus serve` (dispatcher, faulty sink), and `nexus check` accounting for
superseded, timed-out, approved and denied plans."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from nexus.settings import Settings
from nexus.store.database import Database
from tests.conftest import NexusProcess
from tests.e2e.test_agent_e2e import run_agent, run_check, start_stack
from tests.integration.kafka_helpers import kafka_settings

__all__ = ["kafka_settings"]  # the fixture, imported for pytest

MODES = [
    "--inventory-failure-rate", "0.25",
    "--payment-rejection-rate", "0.3",
    "--hostile-rate", "0.3",
    "--replan-rate", "0.5",
    "--stall-rate", "0.5",
    "--stall-deadline-s", "8",  # from each plan's start: room to send all but the last step on a loaded machine
]  # fmt: skip


async def test_replanning_and_stalling_agents_pass_the_checker(
    settings: Settings, start_gateway: Any, nexus_procs: list[NexusProcess], tmp_path: Path, db: Database
) -> None:
    """24 plans, about half replanned (REPLAN, the new plan goes on, an old-plan straggler DISCARD
    PLAN_SUPERSEDED) and a third stalled (the gateway's deadline sweep aborts them, abort_code timeout),
    with the other hostile modes: every ack as expected and every invariant of the checker holds."""
    stack = start_stack(settings.replace(deadline_sweep_s=0.2), start_gateway, nexus_procs, tmp_path)
    report_path = tmp_path / "report.json"
    report = run_agent(stack, report_path, 24, *MODES)
    assert report["complete"] and report["summary"]["unexpected_decisions"] == 0
    used = report["summary"]["hostile"]
    assert used["replan"] > 0 and used["stall"] > 0
    replanned = [p for p in report["plans"] if "replan" in p["hostile"]]
    stalled = [p for p in report["plans"] if "stall" in p["hostile"]]
    assert all(p["final_plan_id"] == p["plan_id"] + "-r" for p in replanned)
    stragglers = [e for p in replanned for e in p["events"] if e["mode"] == "replan" and not e["honest"]]
    assert stragglers and all((e["decision"], e["code"]) == ("DISCARD", "PLAN_SUPERSEDED") for e in stragglers)
    done = run_check(stack, report_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "all invariants held" in done.stdout
    order_ids = [p["order_id"] for p in report["plans"]]
    superseded = await db.fetchval(
        "SELECT count(*) FROM orders WHERE order_id = ANY($1::text[]) AND cardinality(superseded_plans) > 0", order_ids
    )
    timed_out = await db.fetch(
        "SELECT order_id FROM outbox WHERE order_id = ANY($1::text[]) AND event_type = 'ABORT_PLAN'"
        " AND payload->'event'->'data'->>'abort_code' = 'timeout'",
        order_ids,
    )
    assert superseded == len(replanned)
    assert sorted(r["order_id"] for r in timed_out) == sorted(p["order_id"] for p in stalled)


async def test_approval_plans_held_answered_and_checked(
    settings: Settings, start_gateway: Any, nexus_procs: list[NexusProcess], tmp_path: Path, db: Database
) -> None:
    """16 plans, most of the completed ones in `order_reviewed` above 1000.00: each payment answered 202 HELD,
    its successors BUFFER, then the agent's approver (the test key, approver role) approves or denies it by
    seed: approved orders complete, denied ones end REJECTED APPROVAL_DENIED and aborted by the agent with
    the successors never applied; every invariant of the checker holds."""
    stack = start_stack(settings, start_gateway, nexus_procs, tmp_path)
    report_path = tmp_path / "report.json"
    report = run_agent(stack, report_path, 16, "--inventory-failure-rate", "0.2", "--duplicate-rate", "0.3",
                       "--malformed-rate", "0.3", "--other-plan-rate", "0.3", "--restart-rate", "0.3",
                       "--wrong-amount-rate", "0.3", "--approval-rate", "0.7")  # fmt: skip
    assert report["complete"] and report["summary"]["unexpected_decisions"] == 0
    held = [p for p in report["plans"] if p["approval"]]
    answers = {p["approval"]["answer"] for p in held}
    assert answers == {"approve", "deny"}, answers
    for p in held:
        mine = [e for e in p["events"] if e["mode"] == "approval" and e["seq_id"]]
        assert [(e["event_type"], e["decision"], e["http_status"]) for e in mine] == [
            ("PaymentProcessed", "HELD", 202), ("OrderShipped", "BUFFER", 200), ("OrderCompleted", "BUFFER", 200)
        ]  # fmt: skip
    done = run_check(stack, report_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "all invariants held" in done.stdout
    await assert_approvals_settled(db, report["plans"], held)


@pytest.mark.kafka
async def test_approval_plans_over_kafka_are_found_answered_and_checked(
    kafka_settings: Settings, start_gateway: Any, nexus_procs: list[NexusProcess], tmp_path: Path, db: Database
) -> None:
    """The approval mode over Kafka (`nexus serve --kafka`), where the agent hears no decision: its approver
    finds each held payment among the tenant's approvals and answers it over HTTP; approved orders complete,
    denied ones are aborted with nothing after the payment applied, and every invariant of the checker holds."""
    s = kafka_settings
    stack = start_stack(s, start_gateway, nexus_procs, tmp_path, "--kafka")
    report_path = tmp_path / "report.json"
    extra = ["--transport", "kafka", "--kafka-bootstrap", s.kafka_bootstrap, "--kafka-topic", s.kafka_topic]
    report = run_agent(stack, report_path, 12, "--approval-rate", "0.8", *extra)
    assert report["complete"] and report["config"]["transport"] == "kafka"
    held = [p for p in report["plans"] if p["approval"]]
    assert {p["approval"]["answer"] for p in held} == {"approve", "deny"}
    done = run_check(stack, report_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "all invariants held" in done.stdout
    await assert_approvals_settled(db, report["plans"], held)


async def assert_approvals_settled(db: Database, plans: list[dict[str, Any]], held: list[dict[str, Any]]) -> None:
    """Exactly the held plans have an approval, each answered by someone as the approver did: approved
    orders completed (last_seq 5), denied ones aborted after the payment (last_seq 2)."""
    rows = await db.fetch(
        "SELECT a.order_id, a.status, a.decided_by, o.status AS order_status, o.last_seq FROM approvals a"
        " JOIN orders o USING (tenant_id, order_id) WHERE a.order_id = ANY($1::text[])",
        [p["order_id"] for p in plans],
    )
    by_order = {r["order_id"]: r for r in rows}
    assert set(by_order) == {p["order_id"] for p in held}
    for p in held:
        row = by_order[p["order_id"]]
        want = ("approved", "completed", 5) if p["approval"]["answer"] == "approve" else ("denied", "aborted", 2)
        assert (row["status"], row["order_status"], row["last_seq"]) == want
        assert row["decided_by"]
