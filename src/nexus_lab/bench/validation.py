"""The `validation` suite: batched `Gateway.submit` with process definitions and checks on
against the same with them off, in the same run and interleaved; check evaluation latency per step; and
the CEL engine micro-bench that chose `common-expression-language` over `cel-python`."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from nexus.core.process_checks import validate_step
from nexus.processes import builtin_catalog
from nexus.store.database import Database
from nexus_lab.bench.scenarios import Row, bench_submit, make_plans, percentile

LIMITS = {"max_order_amount": 100000}


async def bench_validation(db: Database, plans: int, conc: int, rounds: int = 4) -> tuple[list[Row], dict[str, Any]]:
    """Interleaved off/on rounds of batches of 200, so drift of the machine hits both alike."""
    rows: list[Row] = []
    await bench_submit(db, plans // 4, conc, 200, validate=True)  # warm-up: pool, caches, CEL programs
    for i in range(rounds):
        # Alternate which goes first: the first run of a pair pays for the previous one's checkpoint.
        for validate in (False, True) if i % 2 == 0 else (True, False):
            cpu = time.process_time()
            r = await bench_submit(db, plans, conc, 200, validate=validate)
            # The gateway process's own CPU per event: what validation adds, whatever else the machine runs.
            r["gateway_cpu_us_per_event"] = round((time.process_time() - cpu) / r["events"] * 1e6, 1)
            rows.append(r)
    off = [r for r in rows if "off" in r["scenario"]]
    on = [r for r in rows if "off" not in r["scenario"]]
    summary = check_latency(plans)
    summary["on_vs_off_throughput"] = round(sum(r["events_per_s"] for r in on) / sum(r["events_per_s"] for r in off), 3)
    cpu_on = sum(r["gateway_cpu_us_per_event"] for r in on) / len(on)
    cpu_off = sum(r["gateway_cpu_us_per_event"] for r in off) / len(off)
    summary["gateway_cpu_us_per_event"] = {"on": round(cpu_on, 1), "off": round(cpu_off, 1)}
    return rows, summary


def check_latency(plans: int) -> Row:
    """Per step: the process's whole verdict (transition, defaults, money, every CEL check), timed alone."""
    order = builtin_catalog().latest["order"]
    samples: list[float] = []
    cpu: list[float] = []
    for plan in make_plans("chk", plans):
        status: str | None = None
        facts: dict[str, Any] = {}
        for event in plan:
            start, start_cpu = time.perf_counter(), time.thread_time()
            verdict = validate_step(order, status, facts, event.event_type, event.seq_id, event.data, LIMITS)
            cpu.append(time.thread_time() - start_cpu)
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
        # CPU time of this thread: the check's own cost, without the time the OS ran other processes.
        "cpu_p50_us": round(sorted(cpu)[len(cpu) // 2] * 1e6, 1),
        "cpu_p99_us": round(percentile(sorted(cpu), 0.99) * 1e6, 1),
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
