"""`nexus demo` (`make demo`): the whole story in under a minute, with nothing installed beforehand.

It starts `nexus serve` (embedded PostgreSQL under a fresh temporary --data-dir, HTTP API, dispatcher)
and a `nexus sink` that fails some deliveries, runs the agent in this process on 20 plans with simulated
failures and every hostile mode on, waits for the notifications to settle, runs the checker, prints what
happened as tables, and stops everything it started.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import sys
import time
from pathlib import Path
from typing import Any

from nexus.auth.roles import Role
from nexus.delivery.signing import generate_secret
from nexus.settings import Settings
from nexus.store.database import Database
from nexus_lab.agent import runner
from nexus_lab.agent.approver import LabApprover
from nexus_lab.agent.hostile import LIFECYCLE_MODES, Mode
from nexus_lab.agent.transport import HttpTransport
from nexus_lab.checker import CheckResult, check_report, render
from nexus_lab.procs import Workspace, free_port, new_keys, nexus, wait_ready
from nexus_lab.tables import text_table

SINK_FAULTS = ["--fail-rate", "0.15", "--fail-status", "500,503,429", "--seed", "7"]


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--orders", type=int, default=20, help="plans the agent runs")
    parser.add_argument("--seed", default="demo", help="decides every plan's path (plan i uses <seed>:<i>)")
    parser.add_argument("--inventory-failure-rate", type=float, default=0.2)
    parser.add_argument("--payment-rejection-rate", type=float, default=0.25)
    parser.add_argument("--hostile-rate", type=float, default=0.35, help="rate of every hostile mode")
    parser.add_argument("--lifecycle-rate", type=float, default=0.2, help="rate of the replan and stall modes")
    parser.add_argument(
        "--approval-rate",
        type=float,
        default=0.6,
        help="rate of completed plans (not replanning, stalling, sending after completion) placing an "
        "order that needs approval; a demo approver answers them",
    )
    parser.add_argument(
        "--stall-deadline-s", type=float, default=10.0, help="a stalling plan's deadline, from its start"
    )
    parser.add_argument("--step-delay-ms", type=float, default=10.0)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--settle-timeout", type=float, default=30.0, help="seconds to wait for deliveries")
    parser.add_argument(
        "--processes",
        default="order,order,order,refund",
        help="the processes plan i follows, in turn (comma-separated; default: every fourth plan a refund)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory (logs, report)")


def _outcome(plan: dict[str, Any]) -> str:
    """How a plan ended, named with its process when it is not the order."""
    process = plan.get("process", "order")
    return plan["outcome"] if process == "order" else f"{process}: {plan['outcome']}"


def summary(report: dict[str, Any], result: CheckResult, elapsed_s: float) -> str:
    """The tables the demo prints: outcomes, hostile modes, decisions, notifications, invariants."""
    plans = report["plans"]
    by_outcome = collections.Counter(_outcome(p) for p in plans)
    expected = {_outcome(p): p["expected"] for p in plans}
    outcome_rows = [
        (o, n, expected[o]["status"], expected[o]["last_seq"], expected[o]["notifications"])
        for o, n in sorted(by_outcome.items())
    ]
    mode_messages = collections.Counter(e["mode"] for p in plans for e in p["events"] if e["mode"])
    mode_plans = report["summary"]["hostile"]
    expected_of: dict[str, list[str]] = collections.defaultdict(list)
    for e in (e for p in plans for e in p["events"] if e["mode"]):
        if e["expected_decision"] not in expected_of[e["mode"]]:
            expected_of[e["mode"]].append(e["expected_decision"])
    mode_rows = [
        (m.value, mode_plans[m.value], mode_messages[m.value], ", then ".join(expected_of[m.value]) or "-")
        for m in Mode
    ]
    decisions = collections.Counter(e["decision"] for p in plans for e in p["events"])
    decision_rows = sorted(decisions.items(), key=lambda kv: -kv[1])
    # The hallucinations the gateway blocked, by the code it answered.
    blocked = collections.Counter(
        (e.get("code") or "?", e["mode"] or "honest") for p in plans for e in p["events"] if e["decision"] == "REJECTED"
    )
    blocked_rows = [(code, mode, n) for (code, mode), n in sorted(blocked.items())] or [("-", "-", 0)]
    st = result.stats
    notification_rows = [
        ("created (outbox rows)", st["notifications"]),
        ("delivered", st["delivered"]),
        ("retried (extra attempts)", st["retried"]),
        ("dead", st["dead"]),
        ("pending", st["pending"]),
        ("sink requests", st["sink_requests"]),
        ("sink faults injected", st["sink_faults"]),
        ("sink duplicates", st["sink_duplicates"]),
    ]
    approval_rows = [  # The approval plans' held payments, as the demo's approver answered them
        ("approved", st.get("approved", 0)),
        ("denied", st.get("denied", 0)),
        ("still pending", st.get("held", 0)),
    ]
    parts = [
        text_table("Plans by outcome", ["outcome", "plans", "status", "last_seq", "notifications"], outcome_rows),
        text_table("Hostile modes", ["mode", "plans", "messages", "gateway must answer"], mode_rows),
        text_table("Gateway decisions (all messages)", ["decision", "messages"], decision_rows),
        text_table("Blocked actions (REJECTED, by code)", ["code", "hostile mode", "messages"], blocked_rows),
        text_table("Notifications", ["", "count"], notification_rows),
        text_table("Held payments (approval mode)", ["", "count"], approval_rows),
        "Invariants (nexus check)\n" + render(result, len(plans)),
        f"{len(plans)} plans, {report['summary']['messages']} messages, checked in {elapsed_s:.1f}s",
    ]
    return "\n\n".join(parts)


async def _main(args: argparse.Namespace) -> int:
    started = time.monotonic()
    work = Workspace("nexus-demo-", keep=args.keep)
    tmp, env, children = work.dir, work.env, work.children
    data_dir = tmp / "data"
    sink_log = tmp / "sink.log"
    secret = generate_secret()
    sink_port, http_port = free_port(), free_port()
    serve_env = {
        **env,
        "NEXUS_WEBHOOK_URL": f"http://127.0.0.1:{sink_port}/hook",
        "NEXUS_WEBHOOK_SECRET": secret,
        "NEXUS_RETRY_BASE_MS": "50",
        "NEXUS_RETRY_MAX_MS": "1000",
        "NEXUS_DISPATCHER_POLL_S": "0.05",
        "NEXUS_LOG_LEVEL": "WARNING",
    }
    print(f"nexus demo: working in {tmp}", flush=True)
    with work:
        sink_args = ["sink", "--port", str(sink_port), "--log", str(sink_log), "--secret", secret, *SINK_FAULTS]
        children.append(nexus("sink", sink_args, env, tmp / "sink.out").start())
        serve_args = ["serve", "--data-dir", str(data_dir), "--http-port", str(http_port)]
        children.append(nexus("gateway", serve_args, serve_env, tmp / "serve.out").start())
        gateway_url = f"http://127.0.0.1:{http_port}"
        await wait_ready(children[0], f"http://127.0.0.1:{sink_port}/healthz", 20)
        print(f"  sink on :{sink_port} (fails ~15% of attempts with 500/503/429)", flush=True)
        # A first run initialises PostgreSQL and compiles a fresh venv's bytecode: over 45 s was seen on a
        # loaded 2-core machine.
        await wait_ready(children[1], gateway_url + "/readyz", 120)
        print(f"  gateway on {gateway_url} (embedded PostgreSQL, dispatcher)", flush=True)

        report = await _run_agent(_agent_config(args), data_dir, gateway_url)
        runner.write_report(report, tmp / "agent-report.json")
        print(f"  agent: {len(report['plans'])} plans, {report['summary']['messages']} messages sent", flush=True)
        if report["error"]:
            print(f"nexus demo: the agent stopped: {report['error']}", file=sys.stderr)
            return 1

        db = await Database(Settings(data_dir=data_dir)).open(migrate=False)
        try:
            result = await check_report(report, db, sink_log, wait_s=args.settle_timeout)
        finally:
            await db.close()
        print()
        print(summary(report, result, time.monotonic() - started))
        if args.keep:
            print(f"\nreport, sink log and process logs kept in {tmp}")
        return 0 if result.ok else 1


def _agent_config(args: argparse.Namespace) -> runner.AgentConfig:
    return runner.AgentConfig(
        orders=args.orders,
        seed=args.seed,
        inventory_failure_rate=args.inventory_failure_rate,
        payment_rejection_rate=args.payment_rejection_rate,
        step_delay_ms=args.step_delay_ms,
        concurrency=args.concurrency,
        hostile={
            **{m: args.lifecycle_rate if m in LIFECYCLE_MODES else args.hostile_rate for m in Mode},
            Mode.APPROVAL: args.approval_rate,
        },
        stall_deadline_s=args.stall_deadline_s,
        processes=tuple(p.strip() for p in args.processes.split(",") if p.strip()),
    )


async def _run_agent(config: runner.AgentConfig, data_dir: Path, gateway_url: str) -> dict[str, Any]:
    """The agent's run over HTTP, and the lab approver answering its held payments."""
    # The keys it needs: an agent key for tenant "default" and an approver's (it answers the
    # approval plans' held payments), made against the database directly.
    agent_key, approver_key = await new_keys(
        data_dir, ("default", Role.AGENT, "demo-agent"), ("default", Role.APPROVER, "demo-approver")
    )
    transport = HttpTransport(gateway_url, api_key=agent_key)
    approver = LabApprover(gateway_url, api_key=approver_key)
    try:
        return await runner.run_agent(config, transport, target=gateway_url, approver=approver)
    finally:
        await transport.close()
        await approver.close()


def run(args: argparse.Namespace) -> int:
    return asyncio.run(_main(args))
