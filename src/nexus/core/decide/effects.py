"""Effects (saga steps): a step whose definition declares an effect, and the saga's pivot.

| situation                                               | decision | effect                              |
|---------------------------------------------------------|----------|-------------------------------------|
| a step with an effect would apply                       | APPLY    | takes its seq, holds the order (1)  |
| the next step while an effect is open                   | BUFFER   | (position.py)                       |
| the effect succeeded (`order.complete_effect`)          | APPLY    | applied for good, successors drain  |
| an agent's ABORT_PLAN once the saga's pivot completed   | REJECTED | PAST_PIVOT                          |
| a pivot step applies for good                           | -        | the plan's deadline is cleared      |
| an effect's success once the order moved on or aborted  | -        | nothing applied (`effect_outcome_stale`) |
| compensation over, the order live                       | APPLY    | the gateway's `effect_failed` abort |

(1) the order keeps its status and no notification is written yet; its `effect` is {step, seq, status
running, attempts}. The gateway's own `effect_failed` abort never meets PAST_PIVOT: it only follows a
compensated saga, and a saga whose pivot completed is never compensated. Pure: no I/O.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import uuid
from typing import Any

from nexus.core.decide.deadlines import gateway_abort
from nexus.core.envelope import EventEnvelope
from nexus.core.order_state import Applied, OrderState
from nexus.core.process_model import ABORTED, CompiledProcess, Verdict
from nexus.errors import ErrorCode
from nexus_wire.codes import AbortCode, Decision


class EffectStatus(enum.StrEnum):
    """What an order's open effect is doing, as its answers show it (`effect.status`)."""

    RUNNING = "running"
    COMPENSATING = "compensating"
    FAILED = "failed"
    ESCALATED = "escalated"


def effect_view(step: str, seq: int, status: EffectStatus, attempts: int) -> dict[str, Any]:
    """The `effect` of an order's state and answers."""
    return {"step": step, "seq": seq, "status": status, "attempts": attempts}


def defer_for_effect(
    process: CompiledProcess | None, current: OrderState, event: EventEnvelope, drained: bool, effect_done: int | None
) -> tuple[Applied, OrderState] | None:
    """A step with an effect takes its seq but keeps the order's status (and writes no notification) until
    the effect succeeds; None for any other step, or once its effect is done (`effect_done`)."""
    if process is None or event.is_abort or event.seq_id is None or event.seq_id == effect_done:
        return None
    compiled = process.steps.get(event.event_type)
    if compiled is None or compiled.step.effect is None:
        return None
    after = dataclasses.replace(
        current,
        plan_id=event.plan_id,
        last_seq=event.seq_id,
        process=process.name,
        process_version=process.version,
        effect=effect_view(str(event.event_type), event.seq_id, EffectStatus.RUNNING, 0),
    )
    return Applied(event, 0, drained, str(current.status), effect=True), after


def past_pivot(state: OrderState, event: EventEnvelope, decision: Decision) -> Verdict | None:
    """An agent's ABORT_PLAN once the saga's pivot completed: the saga is committed, the abort refused."""
    if not (event.is_abort and state.past_pivot and decision is Decision.APPLY):
        return None
    return Verdict(
        ErrorCode.PAST_PIVOT,
        f"order {state.order_id}: the saga's pivot completed, its effects are committed and cannot be aborted",
    )


def is_pivot(process: CompiledProcess, event: EventEnvelope) -> bool:
    compiled = process.steps.get(event.event_type)
    return compiled is not None and compiled.step.pivot


_EFFECT_ABORT_NAMESPACE = uuid.UUID("5a9a7e0c-3c1b-4f7e-8a51-61626f727421")
MAX_ABORT_REASON = 500


def effect_outcome_stale(state: OrderState, event: EventEnvelope) -> bool:
    """An effect's success that applies nothing: the order was aborted meanwhile (its saga compensates), or
    its step is no longer the order's last (already applied for good)."""
    return state.last_seq != event.seq_id or state.status == ABORTED


def effect_failed_abort(state: OrderState, tenant_id: str, reason: str, now: dt.datetime) -> EventEnvelope | None:
    """The gateway's ABORT_PLAN once a saga's compensation is over (abort_code `effect_failed`, one id per
    order and plan); None when there is nothing to abort (no order, no plan, aborted already)."""
    if state.status is None or state.status == ABORTED or state.plan_id is None:
        return None
    event_id = uuid.uuid5(_EFFECT_ABORT_NAMESPACE, f"{tenant_id}\x1f{state.order_id}\x1f{state.plan_id}")
    return gateway_abort(state, tenant_id, event_id, AbortCode.EFFECT_FAILED, reason[:MAX_ABORT_REASON], now)
