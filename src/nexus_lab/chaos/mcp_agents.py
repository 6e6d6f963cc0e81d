"""MCP agents in a chaos run: orders whose steps are proposed through the gateways' `/mcp` tools (the
official `mcp` client, protocol 2026-07-28, streamable HTTP) while gateways are SIGKILLed, and what must hold
afterwards.

An agent never counts: `start_plan`, then the order's five steps through `propose_step`, each with its own
idempotency key, one of them sent twice on purpose (it must be answered DUPLICATE). A call lost to a dying
gateway (connection refused or reset mid-call) is made again with the same arguments on the next gateway,
as a framework's retry would: the gateway answers DUPLICATE with the first verdict if the lost call had been
decided, so nothing applies twice. Proven from PostgreSQL and the sink's log once deliveries settle: every
order completed with five notifications in seq order, five first verdicts (APPLY, seq 1..5) and five APPLY
rows in the decision log, each notification accepted by the sink in position order.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from nexus.store.database import Database
from nexus.store.queries import query
from nexus_lab.checker import check_sink, read_sink_log
from nexus_lab.llm.behaviours import MCP_STEPS, correct_data
from nexus_lab.mcp_client import answer_of, mcp_client

RETRYABLE_CODES = frozenset({"DATABASE_UNAVAILABLE", "SERVER_BUSY", "RATE_LIMITED"})


@dataclasses.dataclass
class McpAgents:
    """The MCP agents' orders and what their calls met."""

    order_ids: list[str] = dataclasses.field(default_factory=list)
    retried: int = 0
    """Calls made again after a lost answer (a killed gateway)."""
    problems: list[str] = dataclasses.field(default_factory=list)
    """Answers an agent could not accept (neither APPLY nor the DUPLICATE of an APPLY)."""


async def call_tool(
    urls: Sequence[str], key: str, first: int, tool: str, arguments: dict[str, Any], run: McpAgents, deadline_s: float
) -> tuple[dict[str, Any], bool]:
    """One tool call, made again on the next gateway until one answers: (structuredContent, isError)."""
    attempt = 0
    stop = time.monotonic() + deadline_s
    while True:
        url = urls[(first + attempt) % len(urls)]
        try:
            async with mcp_client(url, key, timeout_s=10) as session:
                content, _, is_error = answer_of(await session.call_tool(tool, arguments))
            if not (is_error and content.get("code") in RETRYABLE_CODES):
                return content, is_error
        except Exception:  # noqa: BLE001, S110 - a gateway killed mid-call: the next one is asked
            pass
        if time.monotonic() > stop:
            raise TimeoutError(f"{tool} on {arguments.get('order_id')}: no gateway answered in {deadline_s:g}s")
        attempt += 1
        run.retried += 1
        await asyncio.sleep(0.2)


async def drive_order(
    urls: Sequence[str], key: str, index: int, order_id: str, run: McpAgents, step_delay_s: float
) -> None:
    order = {"order_id": order_id, "user_id": "u-mcp", "currency": "USD", "total_amount": 20}
    order["items"] = [{"product_id": "p-mcp", "quantity": 2, "unit_price": 10}]
    started, error = await call_tool(urls, key, index, "start_plan", {"order_id": order_id}, run, 60)
    if error and started.get("code") != "ORDER_EXISTS":  # ORDER_EXISTS: a retry of a start that was done
        run.problems.append(f"{order_id}: start_plan answered {started.get('code')}")
        return
    for step in MCP_STEPS:
        await asyncio.sleep(step_delay_s)
        arguments = {
            "order_id": order_id,
            "step": step,
            "data": correct_data(step, order),
            "idempotency_key": f"{order_id}:{step}",
        }
        answer, _ = await call_tool(urls, key, index, "propose_step", arguments, run, 60)
        first = answer.get("first") or {}
        if answer.get("decision") != "APPLY" and first.get("decision") != "APPLY":
            run.problems.append(f"{order_id}: {step} answered {answer.get('decision')} {answer.get('code')}")
            return
        if step == MCP_STEPS[1]:  # the same call again on purpose, as a framework's retry: a DUPLICATE
            again, _ = await call_tool(urls, key, index + 1, "propose_step", arguments, run, 60)
            if (again.get("decision"), (again.get("first") or {}).get("decision")) != ("DUPLICATE", "APPLY"):
                run.problems.append(f"{order_id}: {step} repeated answered {again.get('decision')} {again.get('code')}")
                return


async def run_mcp_agents(
    urls: Sequence[str], key: str, orders: int, prefix: str, step_delay_s: float = 0.25
) -> McpAgents:
    """`orders` orders driven through /mcp at once, spread over the gateways."""
    run = McpAgents([f"{prefix}-mcp-{i}" for i in range(orders)])
    await asyncio.gather(*(drive_order(urls, key, i, oid, run, step_delay_s) for i, oid in enumerate(run.order_ids)))
    return run


async def check_mcp_orders(
    db: Database, sink_log: Path, run: McpAgents, *, wait_s: float, allow_duplicates: bool
) -> tuple[int, int, list[str]]:
    """(invariants held, checked, what broke) for the MCP agents' orders."""
    ids = run.order_ids
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:  # settled: every notification exists and none is pending
        row = await db.fetchrow(query("checker.sql", "settled"), ids)
        outbox = await db.fetch(query("checker.sql", "outbox"), ids)
        if row is not None and row["pending"] == 0 and row["notifications"] == len(outbox):
            break
        await asyncio.sleep(0.2)
    orders = {r["order_id"]: r for r in await db.fetch(query("checker.sql", "orders"), ids)}
    outbox_by = collections.defaultdict(list)
    for r in await db.fetch(query("checker.sql", "outbox"), ids):
        outbox_by[r["order_id"]].append(dict(r))
    numbered = collections.defaultdict(list)
    for r in await db.fetch(query("mcp_check.sql", "numbered_steps"), ids):
        numbered[r["order_id"]].append((r["seq_id"], r["decision"]))
    logged = {
        (r["order_id"], r["decision"]): r["n"] for r in await db.fetch(query("mcp_check.sql", "logged_decisions"), ids)
    }
    sink = collections.defaultdict(list)
    for record in read_sink_log(sink_log):
        if record.get("order_id") in orders:
            sink[record["order_id"]].append(record)
    checks: dict[str, list[str]] = {
        "mcp answers": list(run.problems),
        "mcp orders": [],
        "mcp outbox": [],
        "mcp first verdicts": [],
        "mcp decision log": [],
        "mcp sink": [],
    }
    expected = [(seq, "APPLY") for seq in range(1, len(MCP_STEPS) + 1)]
    for oid in ids:
        order = orders.get(oid)
        if order is None or (order["status"], order["last_seq"]) != ("completed", len(MCP_STEPS)):
            checks["mcp orders"].append(f"{oid}: {dict(order) if order else 'missing'}")
        rows = outbox_by.get(oid, [])
        if [(r["position"], r["event_type"]) for r in rows] != list(enumerate(MCP_STEPS, start=1)):
            checks["mcp outbox"].append(f"{oid}: outbox {[(r['position'], r['event_type']) for r in rows]}")
        if numbered.get(oid) != expected:
            checks["mcp first verdicts"].append(f"{oid}: {numbered.get(oid)}")
        if logged.get((oid, "APPLY")) != len(MCP_STEPS):
            checks["mcp decision log"].append(f"{oid}: {logged.get((oid, 'APPLY'))} APPLY rows")
        checks["mcp sink"] += [
            f"{oid}: {p}" for p in check_sink(rows, sink.get(oid, []), allow_duplicates=allow_duplicates)
        ]
    broke = [f"{name}: {p}" for name, problems in checks.items() for p in problems]
    held = sum(1 for problems in checks.values() if not problems)
    return held, len(checks), broke
