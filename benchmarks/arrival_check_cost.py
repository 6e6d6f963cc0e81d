"""CPU of a step's data check on arrival (`data_verdict`, core/decide/validation.py) for wrk's three steps with
data (OrderCreated, InventoryValidated, PaymentProcessed of the built-in `order` process, the data
bench/wrk_orders.lua sends), and of `money_problem` alone on OrderCreated's data: microseconds per call, the
minimum of `--rounds` rounds of 20,000 calls; and the fold's check of the same steps when they apply
(`validate_step`, told that the data passed on arrival where the tree's has `data_checked`, as the fold tells it; an
older tree's checks the schema there, and has no arrival check to time), rounds of 2,000. Pure: no database;
alternate two trees to compare them.

Usage: ``PYTHONPATH=<tree>/src .venv/bin/python benchmarks/arrival_check_cost.py [--rounds 15]``.
"""

from __future__ import annotations

import argparse
import json
import timeit
from collections.abc import Callable
from typing import Any

from nexus.core.envelope import parse_envelope
from nexus.core.process_checks import validate_step
from nexus.processes import builtin_catalog

ITEMS = [
    {"product_id": "prod_a", "quantity": 2, "unit_price": "3.50"},
    {"product_id": "prod_b", "quantity": 1, "unit_price": "3.00"},
]
DATA = {
    1: ("OrderCreated", {"user_id": "u1", "items": ITEMS, "total_amount": "10.00", "currency": "USD"}),
    2: ("InventoryValidated", {"warehouse_id": "wh", "reserved_items": ITEMS}),
    3: ("PaymentProcessed", {"payment_id": "pay", "amount": "10.00", "currency": "USD"}),
}
CALLS = 20_000
STATES = {1: None, 2: "created", 3: "inventory_validated"}
FACTS = {"items": ITEMS, "total_amount": 1000, "currency": "USD"}
LIMITS = {"max_order_amount": 100000}


def _envelope(seq: int, step: str, data: dict[str, object]) -> dict[str, object]:
    return {
        "event_id": f"00000000-0000-4000-8000-00000000000{seq}", "event_type": step, "plan_id": "p", "order_id": "o",
        "seq_id": seq, "timestamp": "2026-12-01T10:00:00Z", "schema_version": "1.0", "data": data,
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    process = builtin_catalog().get("order", 2)
    assert process is not None
    figures = _arrival(process, args.rounds)
    fold_s = min(timeit.repeat(_fold_checks(process), number=CALLS // 10, repeat=args.rounds))
    figures["validate_step_3_steps_us"] = round(fold_s / (CALLS // 10) * 1e6, 3)
    print(json.dumps(figures))


def _arrival(process: Any, rounds: int) -> dict[str, float]:
    """The arrival check's figures (none for a tree without one)."""
    try:
        from nexus.core.checks import money_problem
        from nexus.core.decide.validation import data_verdict
    except ImportError:
        return {}
    events = [parse_envelope(_envelope(seq, step, data)) for seq, (step, data) in DATA.items()]
    created = process.steps["OrderCreated"]
    data = created.with_defaults(DATA[1][1])

    def verdicts() -> None:
        for event in events:
            assert data_verdict(process, event) is None

    verdict_s = min(timeit.repeat(verdicts, number=CALLS, repeat=rounds))
    money_s = min(timeit.repeat(lambda: money_problem(data, created.step.money, 3), number=CALLS, repeat=rounds))
    return {"data_verdict_3_steps_us": round(verdict_s / CALLS * 1e6, 3),
            "money_problem_order_created_us": round(money_s / CALLS * 1e6, 3)}  # fmt: skip


def _fold_checks(process: Any) -> Callable[[], None]:
    """The fold's checks of the three steps, each applying (a failed check would stop the benchmark)."""
    try:
        validate_step(process, None, {}, "OrderCreated", 1, DATA[1][1], LIMITS, data_checked=True)
        told: dict[str, bool] = {"data_checked": True}
    except TypeError:  # a tree from before the arrival check
        told = {}

    def checks() -> None:
        for seq, (step, data) in DATA.items():
            facts = {} if seq == 1 else FACTS
            assert validate_step(process, STATES[seq], facts, step, seq, data, LIMITS, **told) is None

    return checks


if __name__ == "__main__":
    main()
