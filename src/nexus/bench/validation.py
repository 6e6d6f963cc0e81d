"""The `validation` suite (issue 12): batched `Gateway.submit` with process definitions and checks on
against the same with them off, in the same run and interleaved; check evaluation latency per step; and
the CEL engine micro-bench that chose `common-expression-language` over `cel-python`."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from nexus.bench.scenarios import Row, bench_submit, make_plans, percentile
from nexus.core.process import validate_step
from nexus.processes import builtin_catalog
from nexus.store.database import Database

LIMITS = {"max_order_amount": 100000}


async def bench_validation(db: Database, plans: int, conc: int, rounds: int = 2) -> tuple[list[Row], dict[str, Any]]:
    """Interleaved off/on rounds of batches of 200, so drift of the machine hits both alike."""
    rows: list[Row] = []
    for _ in range(rounds):
        rows.append(await bench_submit(db, plans, conc, 200, validate=False))
        rows.append(await bench_submit(db, plans, conc, 200, validate=True))
    off = [r["events_per_s"] for r in rows if "off" in r["scenario"]]
    on = [r["events_per_s"] for r in rows if "off" not in r["scenario"]]
    summary = check_latency(plans)
    summary["on_vs_off"] = round(sum(on) / sum(off), 3)
    return rows, summary


def check_latency(plans: int) -> Row:
    """Per step: the process's whole verdict (transition, defaults, money, every CEL check), timed alone."""
    order = builtin_catalog().latest["order"]
    samples: list[float] = []
    for plan in make_plans("chk", plans):
        status: str | None = None
        facts: dict[str, Any] = {}
        for event in plan:
            start = time.perf_counter()
            verdict = validate_step(order, status, facts, event.event_type, event.seq_id, event.data, LIMITS)
            samples.append(time.perf_counter() - start)
            assert verdict is None, verdict
            facts = order.facts_after(facts, event.event_type, event.data)
            status = order.status_after(event.event_type)
    return {
        "suite": "validation",
        "scenario": "validate_step per step (order process)",
        "events": len(samples),
        "p50_us": round(sorted(samples)[len(samples) // 2] * 1e6, 1),
        "p99_us": round(percentile(sorted(samples), 0.99) * 1e6, 1),
    }


def cel_engines(n: int = 2000) -> dict[str, Any]:
    """One order-process check in both engines, compiled once, evaluated n times: mean and p99 in us."""
    import cel

    rule = "data.total_amount == sum(data.items.map(i, i.quantity * i.unit_price))"
    simple = "data.amount <= limits.max_order_amount"
    data = {"total_amount": 1000, "items": [{"quantity": 2, "unit_price": 350}, {"quantity": 1, "unit_price": 300}]}
    out: dict[str, Any] = {}
    rust_sum = cel.compile(rule)
    rust_simple = cel.compile(simple)

    def rust_ctx() -> Any:
        c = cel.Context()
        c.add_function("sum", lambda xs: sum(xs))
        c.add_variable("data", data)
        return c

    out["rust_sum"] = _time(lambda: rust_sum.execute(rust_ctx()), n)
    out["rust_simple"] = _time(
        lambda: rust_simple.execute({"data": {"amount": 5}, "limits": {"max_order_amount": 9}}), n
    )
    try:
        import celpy
    except ImportError:
        return out
    env = celpy.Environment()
    prog = env.program(env.compile(simple))
    from celpy.adapter import json_to_cel

    act = {"data": json_to_cel({"amount": 5}), "limits": json_to_cel({"max_order_amount": 9})}
    out["celpy_simple"] = _time(lambda: prog.evaluate(act), n)
    return out


def _time(fn: Callable[[], Any], n: int) -> dict[str, float]:
    samples = []
    for _ in range(n):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return {"mean_us": round(sum(samples) / n * 1e6, 1), "p99_us": round(percentile(sorted(samples), 0.99) * 1e6, 1)}
