"""Rejections and `max_rejections`: what a REJECTED step does to its order.

| situation                                            | effect                                            |
|------------------------------------------------------|---------------------------------------------------|
| a step is REJECTED (arriving, or drained)            | nothing changes; the order waits at the same seq (1) |
| the same event_id sent again                         | REJECTED again, same verdict, recorded once       |
| a live plan reaches its process's `max_rejections`   | the gateway's ABORT_PLAN (`policy_violation`) (2) |

(1) for a corrected step (a new event_id); a drained one leaves the buffer and its successors wait.
(2) applies with one notification; the buffer is dropped. Pure: no I/O.
"""

from __future__ import annotations

import uuid

from nexus.core.decide.deadlines import gateway_abort
from nexus.core.envelope import EventEnvelope
from nexus.core.order_state import OrderState
from nexus.core.process_model import CompiledProcess
from nexus_wire.codes import AbortCode

_POLICY_ABORT_NAMESPACE = uuid.UUID("0b6f2a4e-7c59-4e8e-9a3d-706f6c696379")


def policy_abort_id(order_id: str, plan_id: str) -> uuid.UUID:
    """The one event_id of a plan's `max_rejections` abort."""
    return uuid.uuid5(_POLICY_ABORT_NAMESPACE, f"{order_id}\x00{plan_id}")


def is_policy_abort(event: EventEnvelope) -> bool:
    """Whether `event` is the gateway's `max_rejections` abort (not an agent's ABORT_PLAN)."""
    return event.is_abort and event.event_id == policy_abort_id(event.order_id, event.plan_id)


def policy_abort(event: EventEnvelope, last_seq: int, limit: int) -> EventEnvelope:
    """The ABORT_PLAN the gateway writes when a plan reaches its process's `max_rejections`."""
    event_id = policy_abort_id(event.order_id, event.plan_id)
    state = OrderState(event.order_id, plan_id=event.plan_id, last_seq=last_seq)
    reason = f"{limit} steps of this plan were rejected (max_rejections)"
    code = AbortCode.POLICY_VIOLATION
    return gateway_abort(state, event.tenant_id, event_id, code, reason, event.timestamp, event.correlation_id)


def limit_reached(process: CompiledProcess | None, rejections: int) -> int | None:
    """The process's `max_rejections` when `rejections` reached it, else None."""
    limit = process.definition.max_rejections if process is not None else None
    return limit if limit is not None and rejections >= limit else None
