"""Builders of envelopes for tests."""

from __future__ import annotations

import dataclasses
import datetime as dt
import uuid
from typing import Any

from nexus.core import definitions
from nexus.core.envelope import EventEnvelope, parse_envelope
from nexus.core.order_state import OrderState
from nexus.core.process_model import Verdict
from nexus.core.sequencing import resolve
from nexus.errors import InvalidEventError
from nexus.processes import shipped
from nexus_wire.codes import Decision

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
# The order process's steps (processes/order.yaml), in order.
STEPS = definitions.main_plan(shipped("order"))


def step_json(order_id: str, plan_id: str, seq: int, **overrides: Any) -> dict[str, Any]:
    """One step of the order process as wire JSON."""
    event_type = STEPS[seq - 1] if seq <= len(STEPS) else "OrderCompleted"
    data: dict[str, Any] = {}
    if event_type == "OrderCreated":
        data = {
            "user_id": "u1",
            "items": [{"product_id": "p", "quantity": 1, "unit_price": 10}],
            "total_amount": 10,
            "currency": "USD",
        }
    elif event_type == "PaymentProcessed":
        data = {"payment_id": "pay-1", "amount": 10, "currency": "USD"}
    body: dict[str, Any] = {
        "event_id": str(uuid.uuid4()),
        "event_type": event_type,
        "plan_id": plan_id,
        "order_id": order_id,
        "seq_id": seq,
        "timestamp": (T0 + dt.timedelta(seconds=seq)).isoformat(),
        "schema_version": "1.0",
        "data": data,
    }
    body.update(overrides)
    return body


def abort_json(order_id: str, plan_id: str, at_seq: int = 0, **overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "event_id": str(uuid.uuid4()),
        "event_type": "ABORT_PLAN",
        "plan_id": plan_id,
        "order_id": order_id,
        "timestamp": T0.isoformat(),
        "schema_version": "1.0",
        "data": {"reason": "test", "abort_code": "manual", "aborted_at_seq": at_seq},
    }
    body.update(overrides)
    return body


def step(order_id: str, plan_id: str, seq: int, **overrides: Any) -> EventEnvelope:
    return EventEnvelope.model_validate(step_json(order_id, plan_id, seq, **overrides))


def abort(order_id: str, plan_id: str, at_seq: int = 0) -> EventEnvelope:
    return EventEnvelope.model_validate(abort_json(order_id, plan_id, at_seq))


def plan_json(order_id: str, plan_id: str, steps: int = 5) -> list[dict[str, Any]]:
    return [step_json(order_id, plan_id, s) for s in range(1, steps + 1)]


@dataclasses.dataclass(frozen=True)
class Answer:
    """A person's answer to a held step, folded among the messages (None approves)."""

    event: EventEnvelope
    verdict: Verdict | None

    @property
    def expected(self) -> Decision:
        return Decision.APPLY if self.verdict is None else Decision.REJECTED

    @property
    def expected_code(self) -> str | None:
        return None if self.verdict is None else self.verdict.code.value


def fold_messages(order_id: str, messages: Any) -> tuple[list[Decision], OrderState]:
    """What the pure core decides for each agent message (`.body`, `.expected_code`), in sending order,
    and the order's final state: the gateway without the database (the built-in processes, default limit).
    An `Answer` among them answers its held step."""
    from nexus.core.decide.data_check import invalid_data
    from nexus.processes import builtin_catalog

    state = OrderState(order_id)
    pending: dict[int, EventEnvelope] = {}
    rejected: dict[Any, Any] = {}
    decisions = []
    for message in messages:
        answers = {message.event.event_id: message.verdict} if isinstance(message, Answer) else None
        try:
            envelope = message.event if isinstance(message, Answer) else parse_envelope(message.body)
        except InvalidEventError as exc:
            assert exc.code.value == message.expected_code
            decisions.append(Decision.DEAD_LETTER)
            continue
        refused = invalid_data(builtin_catalog(), state, [envelope]).get(0)  # the batch fold's arrival check
        if refused is not None:
            assert refused.code.value == message.expected_code
            decisions.append(Decision.DEAD_LETTER)
            continue
        resolution = resolve(
            state,
            [envelope],
            pending,
            catalog=builtin_catalog(),
            limits={"max_order_amount": 100000},
            rejected=rejected,
            approvals=answers,
        )
        for seq in resolution.unbuffered:
            pending.pop(seq, None)
        for event in resolution.buffered:
            assert event.seq_id is not None
            pending[event.seq_id] = event
        for rejection in resolution.rejections:
            rejected[rejection.event.event_id] = rejection.verdict
            if not rejection.drained:
                assert rejection.verdict.code.value == message.expected_code
        decisions.append(resolution.decisions[0][1])
        state = resolution.after
    return decisions, state


def replan_json(order_id: str, plan_id: str, new_plan_id: str, **overrides: Any) -> dict[str, Any]:
    """The built-in REPLAN step, replacing `plan_id` with `new_plan_id`."""
    body: dict[str, Any] = {
        "event_id": str(uuid.uuid4()),
        "event_type": "REPLAN",
        "plan_id": plan_id,
        "order_id": order_id,
        "timestamp": T0.isoformat(),
        "schema_version": "1.0",
        "data": {"new_plan_id": new_plan_id, "reason": "the agent changed its mind"},
    }
    body.update(overrides)
    return body


def replan(order_id: str, plan_id: str, new_plan_id: str) -> EventEnvelope:
    return EventEnvelope.model_validate(replan_json(order_id, plan_id, new_plan_id))
