"""CPU of the gateway's pure decision step per event: what `Gateway.submit` computes between its read and its
write, without the database, so machine noise matters less than under wrk.

Run with a tree's sources first on the path; it uses that tree's API: `plan_batch` (the decision pipeline
of core/decide) when there is one, else the older `resolve` + `plan_writes` + `resolution_entries` +
answers that `Gateway._submit_once` ran inline. Workload: `--orders` orders of the built-in `order`
process, five steps each, in batches of `--batch` items of different orders (as the group commit makes
them under wrk), each order's state carried from batch to batch. Prints microseconds of process CPU per
event, best and median of `--rounds`.

Usage: ``PYTHONPATH=<tree>/src .venv/bin/python benchmarks/decision_fold.py [--orders 1000] [--batch 16]``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import time
import uuid
from typing import Any

from nexus.processes import builtin_catalog

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
STEPS = ("OrderCreated", "InventoryValidated", "PaymentProcessed", "OrderShipped", "OrderCompleted")


def body(order: str, seq: int) -> str:
    data: dict[str, Any] = {}
    if seq == 1:
        data = {"user_id": "u", "items": [{"product_id": "p", "quantity": 1, "unit_price": 10}], "total_amount": 10}
    elif seq == 3:
        data = {"payment_id": "pay", "amount": 10, "currency": "USD"}
    return json.dumps({
        "event_id": str(uuid.uuid4()), "event_type": STEPS[seq - 1], "plan_id": "p-" + order, "order_id": order,
        "seq_id": seq, "timestamp": T0.isoformat(), "schema_version": "1.0", "data": data,
    })  # fmt: skip


def batches(orders: int, size: int) -> list[list[Any]]:
    from nexus.core.decide.items import Incoming

    out = []
    for seq in range(1, 6):
        items = [Incoming.parse(body(f"o-{n}", seq)) for n in range(orders)]
        out += [items[i : i + size] for i in range(0, len(items), size)]
    return out


def run_new(work: list[list[Any]], now: dt.datetime) -> float:
    from nexus.core.decide.items import IngressKind
    from nexus.core.decide.plan import BatchReads, Parts, plan_batch

    parts = Parts(catalog=builtin_catalog(), default_limits={"max_order_amount": 100000})
    states: dict[Any, Any] = {}
    started = time.process_time()
    for items in work:
        plan = plan_batch(items, BatchReads(states=states), parts, kind=IngressKind.HTTP, now=now)
        for resolution in plan.resolutions:
            states[(resolution.after.order_id and "default", resolution.after.order_id)] = resolution.after
    return time.process_time() - started


def run_old(work: list[list[Any]], now: dt.datetime) -> float:
    from nexus.batch_rows import Writes, plan_writes  # type: ignore[attr-defined]
    from nexus.core.decide.answers import Outcome
    from nexus.core.decide.log import resolution_entries
    from nexus.core.decide.replan import code_of
    from nexus.core.order_state import OrderState
    from nexus.core.sequencing import resolve
    from nexus.store import lifecycle
    from nexus_wire.codes import Decision

    catalog = builtin_catalog()
    limits = {"max_order_amount": 100000}
    states: dict[Any, Any] = {}
    started = time.process_time()
    for items in work:
        writes = Writes()
        by_order: dict[Any, list[int]] = {}
        for i, item in enumerate(items):
            by_order.setdefault((item.envelope.tenant_id, item.envelope.order_id), []).append(i)
        entries: list[Any] = []
        outcomes: list[Any] = [None] * len(items)
        for key in sorted(by_order):
            indexes = by_order[key]
            state = states.get(key) or OrderState(key[1])
            resolution = resolve(state, [items[i].envelope for i in indexes], {}, catalog=catalog, limits=limits,
                                 rejected=None, now=now, approvals=None)  # fmt: skip
            traces = {items[i].envelope.event_id: items[i].traceparent for i in indexes}
            plan_writes(resolution, traces, writes)
            lifecycle.approval_rows(resolution, catalog, traces, {})  # type: ignore[attr-defined]
            entries += resolution_entries(resolution, {}, actor=None)
            for i, (event, decision, after) in zip(indexes, resolution.decisions, strict=True):
                verdict = resolution.verdict_of(event.event_id) if decision is Decision.REJECTED else None
                outcomes[i] = Outcome(
                    str(event.event_id), decision, verdict.code if verdict else code_of(decision, event, after),
                    status=after.status, last_seq=after.last_seq, effect=after.effect,
                    deadline=resolution.deadlines.get(event.event_id),
                )  # fmt: skip
            states[key] = resolution.after
    return time.process_time() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--orders", type=int, default=1000)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    try:
        import nexus.core.decide.plan  # noqa: F401

        run, api = run_new, "plan_batch"
    except ImportError:
        run, api = run_old, "resolve+plan_writes"
    now = dt.datetime.now(dt.UTC)
    events = args.orders * 5
    run(batches(100, args.batch), now)  # warm-up: CEL programs, caches
    per_event = [run(batches(args.orders, args.batch), now) / events * 1e6 for _ in range(args.rounds)]
    print(json.dumps({"api": api, "events": events, "batch": args.batch, "us_per_event_best": round(min(per_event), 2),
                      "us_per_event_median": round(statistics.median(per_event), 2)}))  # fmt: skip


if __name__ == "__main__":
    main()
