"""Item 3 in one process: the checks of the wrk bench's OrderCreated and InventoryValidated with their lists'
maps pruned to the fields the rules read (`CompiledStep.elements`) against whole (elements={}), interleaved:
variables, CEL context, every rule. Run with this branch's sources first on the path."""

import statistics
import timeit
from typing import Any

from nexus.core import process_checks as pc
from nexus.core.checks import build_context
from nexus.processes import builtin_catalog

proc = builtin_catalog().get("order")
assert proc is not None
LIM = {"max_order_amount": 100000}
ITEMS = [
    {"product_id": "prod_a", "quantity": 2, "unit_price": "3.50"},
    {"product_id": "prod_b", "quantity": 1, "unit_price": "3.00"},
]  # wrk_orders.lua's
created = {"user_id": "u1", "items": ITEMS, "total_amount": "10.00", "currency": "USD"}
facts = proc.facts_after({}, "OrderCreated", created)
inv = {"warehouse_id": "wh", "reserved_items": ITEMS}


def run(step: str, data: dict[str, Any], known: dict[str, Any], seq: int, whole: bool) -> None:
    c = proc.steps[step]
    elements = {} if whole else c.elements
    v = pc._variables(proc, c, c.fields, elements, known, step, seq, c.with_defaults(data), LIM)
    ctx = build_context(v, with_sum=c.uses_sum)
    for _, rule in c.rules:
        assert rule.passes(ctx)


for case in [("OrderCreated", created, {}, 1), ("InventoryValidated", inv, facts, 2)]:
    step = case[0]
    whole, pruned = [], []
    for _ in range(15):
        whole.append(min(timeit.repeat(lambda c=case: run(*c, True), number=1000, repeat=3)) * 1000)
        pruned.append(min(timeit.repeat(lambda c=case: run(*c, False), number=1000, repeat=3)) * 1000)
    w, p = statistics.median(whole), statistics.median(pruned)
    print(f"{step}: whole {w:.1f} us, pruned {p:.1f} us (medians of 15), pruned/whole {p / w:.2f}")
