"""Plan swap: a `REPLAN` (no seq_id; its `plan_id` the plan replaced, `data.new_plan_id` the next), and the
steps of plans other than the order's.

| situation                                              | decision      | code            |
|--------------------------------------------------------|---------------|-----------------|
| REPLAN naming a new plan on a live order               | APPLY         | (old plan's buffer dropped) |
| REPLAN whose new plan is already the order's (resend)  | DUPLICATE     |                 |
| REPLAN on a terminal order                             | DUPLICATE     |                 |
| REPLAN before the order exists                         | DISCARD       | (nothing to replace) |
| a later step (or REPLAN) of a superseded plan          | DISCARD       | PLAN_SUPERSEDED |
| a step of any other plan                               | PLAN_MISMATCH | PLAN_MISMATCH   |

An applied REPLAN keeps the order's status, last_seq and a running effect; its plan becomes the new one
(which continues at last_seq + 1) and the old plan joins `superseded`. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Collection

from nexus.core.decide.removed import removed_code
from nexus.core.envelope import EventEnvelope
from nexus.core.order_state import OrderState
from nexus.errors import ErrorCode
from nexus_wire.codes import Decision


def foreign_plan(state: OrderState, event: EventEnvelope) -> Decision | None:
    """DISCARD (a superseded plan) or PLAN_MISMATCH for a step of a plan other than the order's; else None."""
    if state.plan_id is not None and event.plan_id != state.plan_id:
        return Decision.DISCARD if event.plan_id in state.superseded else Decision.PLAN_MISMATCH
    return None


def decide_replan(state: OrderState, event: EventEnvelope, terminal: Collection[str]) -> Decision:
    if event.new_plan_id == state.plan_id:
        return Decision.DUPLICATE  # names the current plan: a resend of an applied REPLAN, or a no-op
    foreign = foreign_plan(state, event)
    if foreign is not None:
        return foreign
    if state.status is None:
        return Decision.DISCARD  # nothing to replace yet
    if state.status in terminal:
        return Decision.DUPLICATE
    return Decision.APPLY


def code_of(
    decision: Decision, event: EventEnvelope | None = None, state: OrderState | None = None
) -> ErrorCode | None:
    """The error code a (non-REJECTED) decision carries in API bodies and dead letters, if any.

    `event` and the order's `state` after it tell a superseded plan's straggler (DISCARD PLAN_SUPERSEDED)."""
    if decision is Decision.PLAN_MISMATCH:
        return ErrorCode.PLAN_MISMATCH
    if state is not None and state.removed:
        return removed_code(decision, state)
    if (
        decision is Decision.DISCARD
        and event is not None
        and state is not None
        and event.plan_id in state.superseded
        and event.plan_id != state.plan_id
    ):
        return ErrorCode.PLAN_SUPERSEDED
    return None
