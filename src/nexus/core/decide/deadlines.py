"""Deadlines: when a live plan must be over, and the gateway's own abort once it is not.

| situation                                                      | decision                             |
|----------------------------------------------------------------|--------------------------------------|
| a plan's first step (or its REPLAN) applies                    | deadline set (1)                     |
| a step arrives while `now` is past a live plan's deadline      | timeout abort first (2), then the step (DISCARD) |
| the sweeper's timeout abort while the plan is overdue          | APPLY                                |
| the sweeper's timeout abort otherwise (not, or no longer, due) | DUPLICATE                            |
| the order reaches a terminal state, or a saga's pivot completes | deadline cleared                    |
| the sweeper's timeout abort of a plan with no step, past (3)  | TOMBSTONE (no notification)          |

(1) the envelope's `deadline`, clipped to the process's `deadline.max_s` from now, else now +
`deadline.default_s`; the answer says it and whether it was clipped. (2) the gateway's ABORT_PLAN,
abort_code `timeout`, one id per order and plan, so any number of sweepers abort a plan once.
(3) `POST /v1/plans` or MCP `start_plan` and no step since: its start plus NEXUS_PLAN_START_TIMEOUT_S, or
its own deadline if sooner (read under the lock by the sweeper's batch only: a step arriving first starts
the plan as usual). A saga past its pivot is committed: no deadline is set or enforced. `now` None:
deadlines are neither set nor enforced. Pure: the clock is passed in.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Collection

from nexus.core.envelope import EventEnvelope
from nexus.core.order_state import OrderState
from nexus.core.process_model import ABORTED, CompiledProcess
from nexus_wire.codes import ABORT_STEP, AbortCode

_DEADLINE_ABORT_NAMESPACE = uuid.UUID("5c1d7e0a-3b8f-4d52-a1e6-646561646c6e")


def deadline_abort_id(order_id: str, plan_id: str) -> uuid.UUID:
    """The one id of the timeout abort of a plan of an order: two sweepers write the same step."""
    return uuid.uuid5(_DEADLINE_ABORT_NAMESPACE, f"{order_id}\x00{plan_id}")


def gateway_abort(
    state: OrderState,
    tenant_id: str,
    event_id: uuid.UUID,
    code: AbortCode,
    reason: str,
    now: dt.datetime,
    correlation_id: str | None = None,
) -> EventEnvelope:
    """An ABORT_PLAN the gateway itself writes for the order's plan (a deadline passed, a saga's compensation
    is over, the plan reached `max_rejections`): `code` and `reason` in its data, at the order's last
    position."""
    assert state.plan_id is not None
    return EventEnvelope(
        event_id=event_id,
        event_type=ABORT_STEP,
        plan_id=state.plan_id,
        order_id=state.order_id,
        timestamp=now,
        tenant_id=tenant_id,
        correlation_id=correlation_id,
        data={"reason": reason, "abort_code": code.value, "aborted_at_seq": state.last_seq},
    )


def deadline_abort(state: OrderState, tenant_id: str, now: dt.datetime) -> EventEnvelope:
    """The ABORT_PLAN the gateway writes when a live plan's deadline passed (abort_code timeout)."""
    assert state.plan_id is not None
    event_id = deadline_abort_id(state.order_id, state.plan_id)
    return gateway_abort(state, tenant_id, event_id, AbortCode.TIMEOUT, "the plan's deadline passed", now)


def is_deadline_abort(event: EventEnvelope) -> bool:
    return event.is_abort and event.event_id == deadline_abort_id(event.order_id, event.plan_id)


def overdue(state: OrderState, now: dt.datetime | None, terminal: Collection[str]) -> bool:
    """Whether `state`'s live plan is past its deadline at `now`."""
    return (
        now is not None
        and state.deadline_at is not None
        and state.deadline_at <= now
        and state.status is not None
        and state.status != ABORTED
        and state.status not in terminal
        and not state.past_pivot
    )


def unstarted_overdue(state: OrderState, now: dt.datetime | None) -> bool:
    """Whether `state` is a plan started with no step yet (no order, no tombstone) past its implicit deadline."""
    return (
        now is not None
        and state.status is None
        and not state.tombstone
        and state.deadline_at is not None
        and state.deadline_at <= now
    )


def deadline_for(
    event: EventEnvelope, process: CompiledProcess | None, now: dt.datetime | None, past_pivot: bool
) -> tuple[dt.datetime, bool] | None:
    """The deadline a plan-starting step sets, and whether it was clipped; None: no deadline."""
    if now is None or past_pivot:
        return None
    limits = process.definition.deadline if process is not None else None
    wanted = event.deadline
    if wanted is None and limits is not None and limits.default_s is not None:
        wanted = now + dt.timedelta(seconds=limits.default_s)
    if wanted is None:
        return None
    if limits is not None and limits.max_s is not None:
        latest = now + dt.timedelta(seconds=limits.max_s)
        if wanted > latest:
            return latest, True
    return wanted, False
