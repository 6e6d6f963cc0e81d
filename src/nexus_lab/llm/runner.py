"""Runs N plans through the LLM planner, C at a time, and writes the run report.

Plan i of seed S has order_id uuid5(S:i), plan_id `plan_<uuid5(S:i) hex>` and the order content of the
scripted planner's `sample_order(S:i)`, so a run restarted with the same seed continues the same orders
(the gateway answers the steps already applied DUPLICATE).

Report (JSON, version 1, `"kind": "llm"`)::

    {"version": 1, "kind": "llm", "complete": true, "error": null, "started_at", "finished_at",
     "elapsed_s": 1.2,
     "config": {"orders", "seed", "concurrency", "target", "llm": {...no secrets...}},
     "summary": {"plans", "completed", "aborted", "other", "proposals", "applied", "duplicates",
                 "rejections": {"CHECK_FAILED": n, ...},          # the gateway's REJECTED, by code
                 "planner_rejections": {"MALFORMED_PROPOSAL": n, ...},  # refused before publishing
                 "corrections", "give_ups", "requests", "tokens", "retries", "rate_limited",
                 "server_errors", "timeouts", "steps_per_s", "tokens_per_applied_step"},
     "plans": [{"index", "plan_seed", "order_id", "plan_id", "status", "last_seq", "proposals",
                "applied", "duplicates", "rejections": {...}, "planner_rejections": {...},
                "corrections", "gave_up", "give_up_reason", "requests", "tokens", "finished",
                "steps": [{"n", "event_id", "event_type", "seq_id", "decision", "code", "check",
                           "source": "gateway" | "planner"}, ...]}]}
"""

from __future__ import annotations

import asyncio
import collections
import datetime as dt
import logging
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from nexus_client import ApiError, AsyncNexusClient, ClientConfig, ClientError, GatewayUnreachable
from nexus_lab.agent.graph import sample_order
from nexus_lab.llm.client import LlmClient, RunStopped
from nexus_lab.llm.planner import PlannerContext, graph, new_counts
from nexus_lab.llm.settings import LlmSettings

log = logging.getLogger(__name__)

REPORT_VERSION = 1
_ORDER_NS = uuid.UUID("7a3c9b1e-4d2f-4a6b-8e5c-6f7264657273")
# Each turn is two graph steps; 4 corrections of 5 steps and more stay far below this.
RECURSION_LIMIT = 500


def plan_ids(seed: str, index: int) -> tuple[str, str]:
    """(order_id, plan_id) of plan `index` of a run seeded `seed`."""
    key = uuid.uuid5(_ORDER_NS, f"{seed}:{index}")
    return str(key), f"plan_{key.hex[:16]}"


def plan_input(seed: str, index: int) -> dict[str, Any]:
    order_id, plan_id = plan_ids(seed, index)
    order = {"order_id": order_id, **sample_order(f"{seed}:{index}")}
    return {"order_id": order_id, "plan_id": plan_id, "order": order}


async def run_plan(ctx: PlannerContext, seed: str, index: int) -> dict[str, Any]:
    """One plan through the graph; its report entry."""
    start = plan_input(seed, index)
    entry: dict[str, Any] = {
        "index": index,
        "plan_seed": f"{seed}:{index}",
        "order_id": start["order_id"],
        "plan_id": start["plan_id"],
        "status": None,
        "last_seq": 0,
        **new_counts(),
        "give_up_reason": None,
        "finished": False,
        "steps": [],
    }
    final = await graph.ainvoke(start, context=ctx, config={"recursion_limit": RECURSION_LIMIT})
    entry.update(final["counts"])
    entry.update(
        status=final.get("status"),
        last_seq=final.get("last_seq", 0),
        give_up_reason=final.get("give_up"),
        finished=True,
        steps=final.get("steps", []),
    )
    return entry


def stopped_cause(failures: Sequence[BaseException], gateway_url: str) -> str:
    """One line saying why the run stopped (the first cause; concurrent plans fail alike)."""
    exc = failures[0]
    if isinstance(exc, GatewayUnreachable):
        return f"cannot reach the gateway at {gateway_url}: {exc} (check NEXUS_GATEWAY_URL, or start `nexus serve`)"
    if isinstance(exc, ApiError):
        hint = {401: " (check NEXUS_API_KEY)", 403: " (the key's role or tenant)"}.get(exc.status, "")
        return f"the gateway at {gateway_url} answered HTTP {exc.status} {exc.code}: {exc.message}{hint}"
    return str(exc)


def summarize(plans: list[dict[str, Any]], llm: LlmClient, elapsed_s: float) -> dict[str, Any]:
    rejections: collections.Counter[str] = collections.Counter()
    local: collections.Counter[str] = collections.Counter()
    for p in plans:
        rejections.update(p["rejections"])
        local.update(p["planner_rejections"])
    applied = sum(p["applied"] for p in plans)
    budget = llm.budget
    return {
        "plans": len(plans),
        "completed": sum(1 for p in plans if p["status"] == "completed"),
        "aborted": sum(1 for p in plans if p["status"] == "aborted"),
        "other": sum(1 for p in plans if p["status"] not in ("completed", "aborted")),
        "proposals": sum(p["proposals"] for p in plans),
        "applied": applied,
        "duplicates": sum(p["duplicates"] for p in plans),
        "rejections": dict(sorted(rejections.items())),
        "planner_rejections": dict(sorted(local.items())),
        "corrections": sum(p["corrections"] for p in plans),
        "give_ups": sum(p["gave_up"] for p in plans),
        "requests": budget.requests,
        "tokens": budget.tokens,
        "retries": budget.retries,
        "rate_limited": budget.rate_limited,
        "server_errors": budget.server_errors,
        "timeouts": budget.timeouts,
        "json_mode": llm.json_mode,
        "steps_per_s": round(applied / elapsed_s, 2) if elapsed_s > 0 else None,
        "tokens_per_applied_step": round(budget.tokens / applied, 1) if applied else None,
    }


async def run_llm_agent(
    settings: LlmSettings,
    *,
    orders: int,
    seed: str,
    concurrency: int,
    gateway: ClientConfig,
    start_index: int = 0,
) -> dict[str, Any]:
    """Run plans start_index .. start_index + orders - 1; return the report (partial, with `error`)."""
    started, t0 = dt.datetime.now(dt.UTC).isoformat(), time.monotonic()
    llm = LlmClient(settings)
    client = AsyncNexusClient(gateway)
    entries: list[dict[str, Any]] = []
    error: str | None = None
    try:
        process = (await client.process(settings.process)).model_dump()
        ctx = PlannerContext(llm=llm, gateway=client, process=process, settings=settings)
        await _run_plans(ctx, seed, range(start_index, start_index + orders), concurrency, entries)
    except* (RunStopped, ClientError) as stopped:
        # Expected: a refused key, a wrong URL, nothing listening. Every plan would fail the same way: the
        # run stops at once, its cause one line (no traceback); the report still says how far it got.
        error = stopped_cause(stopped.exceptions, gateway.gateway_url)
        log.info("llm agent stopped: %s", error, extra={"action": "llm_agent_stopped"})
    except* Exception as failures:  # a bug: the traceback is worth having
        error = "; ".join(f"{type(e).__name__}: {e}" for e in failures.exceptions)
        log.exception("llm agent stopped", extra={"action": "llm_agent_failed"})
    finally:
        await llm.aclose()
        await client.aclose()
    elapsed = time.monotonic() - t0
    plans = sorted(entries, key=lambda p: p["index"])
    return {
        "version": REPORT_VERSION,
        "kind": "llm",
        "complete": error is None and len(plans) == orders,
        "error": error,
        "started_at": started,
        "finished_at": dt.datetime.now(dt.UTC).isoformat(),
        "elapsed_s": round(elapsed, 3),
        "config": {
            "orders": orders,
            "seed": seed,
            "start_index": start_index,
            "concurrency": concurrency,
            "transport": "http",
            "target": gateway.gateway_url,
            "llm": settings.public(),
        },
        "summary": summarize(plans, llm, elapsed),
        "plans": plans,
    }


async def _run_plans(
    ctx: PlannerContext, seed: str, indexes: range, concurrency: int, entries: list[dict[str, Any]]
) -> None:
    """Plans `indexes`, `concurrency` at a time, each one's entry appended as it ends."""
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in indexes:
        queue.put_nowait(i)

    async def worker() -> None:
        while not queue.empty():
            entries.append(await run_plan(ctx, seed, queue.get_nowait()))

    async with asyncio.TaskGroup() as group:
        for _ in range(max(1, min(concurrency, len(indexes)))):
            group.create_task(worker())


def blocked_table(report: Mapping[str, Any]) -> str:
    """The blocked-actions table of a run: the gateway's REJECTED by code, then the planner's own refusals."""
    from nexus_lab.tables import text_table

    summary = report["summary"]
    by_plan: dict[str, int] = collections.Counter()
    for p in report["plans"]:
        for code in p["rejections"]:
            by_plan[code] += 1
    rows = [(code, n, by_plan[code]) for code, n in sorted(summary["rejections"].items(), key=lambda kv: -kv[1])]
    rows.append(("total", sum(summary["rejections"].values()), sum(1 for p in report["plans"] if p["rejections"])))
    parts = [text_table("Blocked actions (gateway REJECTED, by code)", ["code", "rejected", "plans"], rows)]
    local = summary["planner_rejections"]
    if local:
        parts.append(
            text_table(
                "Refused by the planner before publishing",
                ["code", "proposals"],
                sorted(local.items(), key=lambda kv: -kv[1]),
            )
        )
    return "\n\n".join(parts)
