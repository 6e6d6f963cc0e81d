"""CPU of one check of a 1,000-item step, split by phase: issue 34's `rejected` pattern (a 1,000-item
`OrderCreated` with a wrong total, sent again and again) without the HTTP and database around it.

In process, single-threaded: each phase is timed alone `--repeat` times (process CPU), and the median and
90th percentile printed in microseconds. The phases are those of `process_checks.validate_step`: the list
limit, the data schema (checked on arrival, `validation.data_verdict`), the CEL variables (picked, money in
minor units), lists held by handle where the tree has them (core/list_handles.py), the engine's context
(`Context.update` converting the variables), and each rule; then the whole `validate_step` with and without
the schema, the next step's check (`InventoryValidated`: 1,000 reserved items against the order's, by
`same_items`), and the whole fold of the step (`plan_batch`, what the gateway computes between its read and its
write), and its parse (`Incoming.parse` of the JSON body).

Run with a tree's sources first on the path, to compare trees: ``PYTHONPATH=<tree>/src .venv/bin/python
benchmarks/check_cost.py [--items 1000] [--repeat 200] [--json out.json]``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import time
import uuid
from collections.abc import Callable
from typing import Any

from nexus.core import process_checks
from nexus.core.checks import build_context
from nexus.core.list_limits import list_limit_message
from nexus.core.step_data import problem
from nexus.processes import builtin_catalog

LIMITS = {"max_order_amount": 100000}
STEP = "OrderCreated"


def timed(function: Callable[[], object], repeat: int) -> dict[str, float]:
    """Median and 90th percentile of `function`'s process CPU, in microseconds."""
    function()
    samples = []
    for _ in range(repeat):
        started = time.process_time_ns()
        function()
        samples.append((time.process_time_ns() - started) / 1e3)
    samples.sort()
    return {"median_us": round(statistics.median(samples), 1), "p90_us": round(samples[int(0.9 * len(samples))], 1)}


def body(items: int) -> str:
    data = {"items": [{"product_id": f"p{i}", "quantity": 1, "unit_price": 1} for i in range(items)], "total_amount": 1}
    return json.dumps(
        {
            "event_id": str(uuid.uuid4()),
            "event_type": STEP,
            "plan_id": "p",
            "order_id": f"a-rej-{uuid.uuid4().hex[:12]}",
            "seq_id": 1,
            "timestamp": "2026-01-01T00:00:00Z",
            "schema_version": "1.0",
            "data": data,
        }
    )  # fmt: skip  (the total is wrong: REJECTED, as the noisy neighbour's `rejected` pattern sends it)


def phases(items: int, repeat: int) -> dict[str, dict[str, float]]:
    process = builtin_catalog().get("order")
    assert process is not None
    compiled = process.steps[STEP]
    data = compiled.with_defaults(json.loads(body(items))["data"])
    hold = getattr(process_checks, "_hold_lists", None)  # absent before lists were held

    def variables() -> dict[str, Any]:
        return process_checks._variables(
            process, compiled, compiled.fields, compiled.elements, {}, STEP, 1, data, LIMITS
        )

    def prepared() -> tuple[dict[str, Any], Any]:
        values = variables()
        return values, hold(compiled, values) if hold is not None else None

    def context() -> Any:
        values, handles = prepared()
        if handles is None:
            return build_context(values, with_sum=compiled.uses_sum)
        return build_context(values, with_sum=compiled.uses_sum, handles=handles)

    out = {
        "list limit": timed(lambda: list_limit_message(data, process.definition.max_list_items, LIMITS), repeat),
        "data schema": timed(lambda: problem(compiled.data_schema, data), repeat),
        "variables": timed(variables, repeat),
        "variables + held lists": timed(prepared, repeat),
        "variables + held lists + context": timed(context, repeat),
    }
    built = context()
    for check, rule in compiled.rules:
        out[f"rule {check.id}"] = timed(lambda rule=rule: rule.passes(built), repeat)
    out["validate_step (schema checked on arrival)"] = timed(
        lambda: process_checks.validate_step(process, None, {}, STEP, 1, data, LIMITS, data_checked=True), repeat
    )
    out["validate_step (with the schema)"] = timed(
        lambda: process_checks.validate_step(process, None, {}, STEP, 1, data, LIMITS), repeat
    )
    out["validate_step InventoryValidated (same_items of 1,000 against the order's)"] = inventory(process, repeat)
    out.update(fold(items, repeat))
    return out


def inventory(process: Any, repeat: int) -> dict[str, float]:
    """The next step's check: its reserved items (the order's, reversed) compared with the order's items."""
    items = json.loads(body(1000))["data"]["items"]
    facts = process.facts_after({}, STEP, {"items": items, "total_amount": 1000, "currency": "USD"})
    status = process.status_after(STEP)
    data = {"warehouse_id": "w", "reserved_items": items[::-1]}
    step = "InventoryValidated"
    assert process_checks.validate_step(process, status, facts, step, 2, data, LIMITS, data_checked=True) is None
    return timed(
        lambda: process_checks.validate_step(process, status, facts, step, 2, data, LIMITS, data_checked=True), repeat
    )


def fold(items: int, repeat: int) -> dict[str, dict[str, float]]:
    """The gateway's pure work for the step: its parse, and its fold in a batch of its own (REJECTED)."""
    from nexus.core.decide.items import Incoming, IngressKind
    from nexus.core.decide.plan import BatchReads, Parts, plan_batch

    text = body(items)
    parts = Parts(catalog=builtin_catalog(), default_limits=LIMITS)
    now = dt.datetime.now(dt.UTC)
    incoming = Incoming.parse(text)
    decided = plan_batch([incoming], BatchReads(states={}), parts, kind=IngressKind.HTTP, now=now)
    assert "REJECTED" in repr(decided.resolutions[0].decisions)
    return {
        "parse (Incoming.parse)": timed(lambda: Incoming.parse(text), repeat),
        "fold (plan_batch of the step)": timed(
            lambda: plan_batch([incoming], BatchReads(states={}), parts, kind=IngressKind.HTTP, now=now), repeat
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=200)
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()
    import nexus

    figures_by_phase = phases(args.items, args.repeat)
    result = {"tree": nexus.__file__, "items": args.items, "repeat": args.repeat, "phases": figures_by_phase}
    for name, figures in figures_by_phase.items():
        print(f"{name:76} median {figures['median_us']:9.1f} us   p90 {figures['p90_us']:9.1f} us")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump(result, out, indent=2)


if __name__ == "__main__":
    main()
