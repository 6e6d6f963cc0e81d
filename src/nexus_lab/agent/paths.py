"""Plans of the processes other than the order, generated from their definitions: a plan is a path through
the definition's steps (`LabProcess.plans()`), sent one step after the other as the order's graph does.

Which path a plan takes depends on its seed only, through the same two rolls as the order's simulation
(`random.Random(seed)`, both drawn, in order): the first below `inventory_failure_rate` withdraws the plan
after its first step (ABORT_PLAN, abort_code manual), the second below `payment_rejection_rate` takes a path
ending in another terminal state than the main plan's (for a refund: reviewed and rejected); otherwise the
plan completes. The data come from `Random(f"{seed}/<process>")`.

What a definition's checks demand of the data is the process's own: a refund is approved automatically up
to 100.00 (check `under_auto_threshold`) and reviewed above (`above_auto_threshold`), so the amount drawn
decides which of refund's two paid paths a completing plan takes.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import random
import uuid
from collections.abc import Awaitable, Callable
from decimal import Decimal
from typing import Any

from nexus.core.envelope import EventEnvelope
from nexus.core.process_model import ABORTED
from nexus_lab.agent.processes import REFUND, LabProcess
from nexus_wire.codes import ABORT_STEP, AbortCode

REFUND_AUTO_LIMIT = Decimal(100)
"""refund.yaml's automatic approval threshold, in major units (its checks say 10000 in minor units)."""
AUTO_STEP = "RefundAutoApproved"
WITHDRAWN, COMPLETED = "withdrawn", "completed"
INVENTORY_FAILED, PAYMENT_REJECTED = "inventory_failed", "payment_rejected"


@dataclasses.dataclass(frozen=True, slots=True)
class PathPlan:
    """One plan of a process: the honest steps it sends (ABORT_PLAN last if it gives up), their data, and
    what the gateway must end with."""

    process: LabProcess
    outcome: str
    shape: tuple[str, ...]
    data: tuple[dict[str, Any], ...]
    expected: Expected
    failure: str | None = None
    """The simulated failure the plan took, named as the order's (`inventory_failed`: the first roll, here a
    withdrawal; `payment_rejected`: the second, here a rejection), so a run's failure rates are checkable."""


@dataclasses.dataclass(frozen=True, slots=True)
class Expected:
    """What the gateway must end up with for a plan: order status, last_seq and notifications."""

    status: str
    last_seq: int
    notifications: int


def refund_plan(seed: str, inventory_failure_rate: float = 0.0, payment_rejection_rate: float = 0.0) -> PathPlan:
    """A refund's plan from its seed (see the module's docstring)."""
    rng = random.Random(seed)
    withdraw_roll, reject_roll = rng.random(), rng.random()
    sample = random.Random(f"{seed}/{REFUND.name}")
    amount = Decimal(sample.randint(100, 25_000)) / 100
    currency = sample.choice(["BRL", "USD", "EUR"])
    main_end = REFUND.status_after(REFUND.steps)
    other_ends = [p for p in REFUND.plans() if REFUND.status_after(p) != main_end]
    if withdraw_roll < inventory_failure_rate:
        shape: tuple[str, ...] = (REFUND.steps[0], ABORT_STEP)
        outcome = WITHDRAWN
    elif reject_roll < payment_rejection_rate and other_ends:
        amount = max(amount, REFUND_AUTO_LIMIT + 1)  # only a reviewed refund can be rejected
        shape, outcome = other_ends[0], str(REFUND.status_after(other_ends[0]))
    else:
        auto = amount <= REFUND_AUTO_LIMIT
        paid = [p for p in REFUND.plans() if REFUND.status_after(p) == main_end and (AUTO_STEP in p) == auto]
        shape, outcome = paid[0], COMPLETED
    facts = {"amount": str(amount), "currency": currency}
    data = tuple(_refund_data(name, facts) for name in shape)
    steps = sum(1 for name in shape if name != ABORT_STEP)
    if shape[-1] == ABORT_STEP:
        return PathPlan(REFUND, outcome, shape, data, Expected(ABORTED, steps, len(shape)), INVENTORY_FAILED)
    failure = None if outcome == COMPLETED else PAYMENT_REJECTED
    end = Expected(str(REFUND.status_after(shape)), steps, steps)
    return PathPlan(REFUND, outcome, shape, data, end, failure)


def _refund_data(step: str, facts: dict[str, str]) -> dict[str, Any]:
    if step == REFUND.steps[0]:
        return {**facts, "reason": "arrived damaged"}
    if step == REFUND.money_step:
        return {**facts, "payout_id": f"po_{uuid.uuid4().hex[:12]}"}
    if step.startswith("RefundReview") and step != "RefundReviewStarted":
        return {"reviewer": "rev_lab"}
    if step == ABORT_STEP:
        return {
            "reason": "the customer withdrew the request",
            "abort_code": AbortCode.MANUAL.value,
            "aborted_at_seq": 1,
        }
    return {}


PLANNERS: dict[str, Callable[[str, float, float], PathPlan]] = {REFUND.name: refund_plan}


async def run_path(
    plan: PathPlan,
    *,
    order_id: str,
    plan_id: str,
    publish: Callable[[EventEnvelope], Awaitable[None]],
    step_delay_s: float = 0.0,
) -> list[EventEnvelope]:
    """Send the plan's steps in order, each once the previous one was acknowledged; return them."""
    sent: list[EventEnvelope] = []
    for i, (name, data) in enumerate(zip(plan.shape, plan.data, strict=True)):
        if step_delay_s > 0 and sent:
            await asyncio.sleep(step_delay_s)
        envelope = EventEnvelope(
            event_id=uuid.uuid4(),
            event_type=name,
            plan_id=plan_id,
            order_id=order_id,
            seq_id=None if name == ABORT_STEP else i + 1,
            timestamp=dt.datetime.now(dt.UTC),
            data=data,
            correlation_id=plan_id,
        )
        await publish(envelope)
        sent.append(envelope)
    return sent
