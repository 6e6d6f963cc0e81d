"""The messages of a hostile plan: each `SendSpec` of `hostile.schedule` built from the honest events produced so
far (`HostileStream`), with the decision the gateway must give it (the modes: `nexus_lab.agent.hostile`)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import uuid
from collections.abc import Callable, Sequence
from decimal import Decimal
from typing import Any

from nexus.core.envelope import EventEnvelope
from nexus_client import envelope_json
from nexus_lab.agent.hostile import (
    DENY,
    HELD_AT,
    INVENTED_TYPE,
    OTHER_PLAN_SUFFIX,
    REJECTED_MODES,
    REPLAN_SUFFIX,
    Mode,
    SendSpec,
)
from nexus_lab.agent.processes import ORDER, LabProcess
from nexus_wire.codes import ABORT_STEP, Decision


@dataclasses.dataclass(frozen=True, slots=True)
class Message:
    """One message on the wire, and what the gateway must decide for it."""

    body: bytes
    key: str
    envelope: EventEnvelope | None
    mode: Mode | None
    honest: bool
    expected: Decision
    expected_code: str | None
    event_id: str | None
    event_type: str | None
    seq_id: int | None
    plan_id: str | None
    variant: str | None = None


def _message(spec: SendSpec, envelope: EventEnvelope) -> Message:
    return Message(
        body=envelope_json(envelope),
        key=envelope.order_id,
        envelope=envelope,
        mode=spec.mode,
        honest=spec.honest,
        expected=spec.expected,
        expected_code=spec.expected_code,
        event_id=str(envelope.event_id),
        event_type=str(envelope.event_type),
        seq_id=envelope.seq_id,
        plan_id=envelope.plan_id,
        variant=spec.variant,
    )


def denied_abort(
    honest: Sequence[EventEnvelope], *, order_id: str, plan_id: str, new_id: Callable[[], uuid.UUID] = uuid.uuid4
) -> Message:
    """What an agent whose held payment was denied sends: ABORT_PLAN at the seq before it (it
    applies, drops the waiting successors, and the order ends aborted)."""
    first = honest[0]
    abort = EventEnvelope(
        event_id=new_id(),
        event_type=ABORT_STEP,
        plan_id=plan_id,
        order_id=order_id,
        timestamp=honest[-1].timestamp,
        correlation_id=first.correlation_id,
        data={
            "reason": "the payment's approval was denied",
            "abort_code": "payment_rejected",
            "aborted_at_seq": HELD_AT,
        },
    )
    spec = SendSpec(HELD_AT - 1, "as_is", Mode.APPROVAL, True, Decision.APPLY, variant=DENY)
    return _message(spec, abort)


def malformed_body(variant: str, base: dict[str, Any], lab: LabProcess = ORDER) -> bytes:
    """A message the gateway cannot accept, built from a valid envelope `base` (JSON-ready dict); its data
    (`negative_quantity`) is refused by the schema of `lab`'s first step, the process that judges it."""
    obj = dict(base)
    if variant == "not_json":
        text = json.dumps(obj)
        return text[: len(text) // 2].encode()
    if variant == "missing_plan_id":
        obj.pop("plan_id", None)
    elif variant == "wrong_seq_id":
        # A step out of turn is the process's business now (REJECTED); a seq_id below 1 is still malformed.
        obj["event_type"] = ORDER.steps[-2]
        obj["seq_id"] = 0
        obj["data"] = {}
    elif variant == "negative_quantity":
        obj["event_type"] = lab.steps[0]
        obj["seq_id"] = 1
        if lab.name == ORDER.name:  # its data schema has items with quantities
            obj["data"] = {"items": [{"product_id": "prod_x", "quantity": -1, "unit_price": "1.00"}]}
        else:  # its first field of a declared type, as an object; a first step names its process
            obj["process"] = lab.name
            fields = lab.definition.steps[lab.steps[0]].step.data.get("properties", {})
            obj["data"] = {next(k for k, v in fields.items() if "type" in v): {"not": "this"}}
    else:
        raise ValueError(f"unknown malformed variant {variant!r}")
    return json.dumps(obj).encode()


@dataclasses.dataclass(frozen=True, slots=True)
class PlanTarget:
    """The plan hostile messages belong to: its order and plan ids, where new event ids come from, the
    process whose steps its hallucinations falsify (`lab`) and the one its first step names (None: `order`)."""

    order_id: str
    plan_id: str
    new_id: Callable[[], uuid.UUID] = uuid.uuid4
    lab: LabProcess = ORDER
    process: str | None = None


def materialize(spec: SendSpec, honest: Sequence[EventEnvelope], target: PlanTarget) -> Message:
    """Build the message `spec` describes from the honest events produced so far (a plan of `target.lab`)."""
    plan_id, new_id = target.plan_id, target.new_id
    ref = honest[spec.ref] if spec.ref is not None else None
    if spec.mutation == "as_is":
        assert ref is not None
        return _message(spec, ref)
    if spec.mutation == "new_id":
        assert ref is not None
        return _message(spec, ref.model_copy(update={"event_id": new_id()}))
    if spec.mutation == "other_plan":
        assert ref is not None
        return _message(spec, ref.model_copy(update={"event_id": new_id(), "plan_id": ref.plan_id + OTHER_PLAN_SUFFIX}))
    if spec.mutation == "replan":
        assert ref is not None
        return _message(spec, _replan(ref, target))
    if spec.mutation == "straggler":
        assert ref is not None
        return _message(spec, ref.model_copy(update={"event_id": new_id(), "plan_id": plan_id}))
    if spec.mutation == "zombie":
        assert ref is not None
        return _message(spec, _zombie(ref, target))
    if spec.mode in REJECTED_MODES:
        made = hallucination(spec.mode, honest, target)
        return _message(spec, made)
    if spec.mutation == "malformed":
        return _malformed(spec, ref, target)
    raise ValueError(f"unknown mutation {spec.mutation!r}")


def _replan(ref: EventEnvelope, target: PlanTarget) -> EventEnvelope:
    """The REPLAN that moves the order to the plan `<plan>-r`."""
    return EventEnvelope(
        event_id=target.new_id(),
        event_type="REPLAN",
        plan_id=target.plan_id,
        order_id=target.order_id,
        timestamp=ref.timestamp,
        correlation_id=ref.correlation_id,
        data={"new_plan_id": target.plan_id + REPLAN_SUFFIX, "reason": "the agent changed its mind"},
    )


def _zombie(ref: EventEnvelope, target: PlanTarget) -> EventEnvelope:
    """The next step after the plan's own ABORT_PLAN `ref`."""
    aborted_at = int(ref.data["aborted_at_seq"])
    step = target.lab.steps[aborted_at]
    return EventEnvelope(
        event_id=target.new_id(),
        event_type=step,
        plan_id=ref.plan_id,
        order_id=ref.order_id,
        seq_id=aborted_at + 1,
        timestamp=ref.timestamp,
        data={"note": "sent after the plan was aborted"},
        correlation_id=ref.correlation_id,
    )


def _malformed(spec: SendSpec, ref: EventEnvelope | None, target: PlanTarget) -> Message:
    """A message that is no valid envelope, of `spec.variant`, built on a valid one of the plan."""
    order_id, plan_id = target.order_id, target.plan_id
    assert spec.variant is not None
    event_id = target.new_id()
    base: dict[str, Any] = {
        "event_id": str(event_id),
        "event_type": ORDER.steps[1],
        "plan_id": plan_id,
        "order_id": order_id,
        "seq_id": 2,
        "timestamp": (ref.timestamp.isoformat() if ref else "2026-01-01T00:00:00+00:00"),
        "schema_version": "1.0",
        "data": {},
    }
    body = malformed_body(spec.variant, base, target.lab)
    return Message(
        body=body,
        key=order_id,
        envelope=None,
        mode=spec.mode,
        honest=False,
        expected=spec.expected,
        expected_code=spec.expected_code,
        event_id=str(event_id),
        event_type=None,
        seq_id=None,
        plan_id=plan_id,
        variant=spec.variant,
    )


def hallucination(mode: Mode, honest: Sequence[EventEnvelope], target: PlanTarget) -> EventEnvelope:
    """The step a hallucinating agent sends at the boundary after the honest events so far (before any, it
    names the plan's `process`, as a first step does: the order's process is its first step's)."""
    lab, process = target.lab, target.process
    b = len(honest)
    first = honest[0] if honest else None
    timestamp = honest[-1].timestamp if honest else dt.datetime.now(dt.UTC)
    common: dict[str, Any] = {
        "event_id": target.new_id(),
        "plan_id": target.plan_id,
        "order_id": target.order_id,
        "timestamp": timestamp,
        "correlation_id": first.correlation_id if first else None,
    }
    if first is None and process is not None:
        common["process"] = process
    if mode is Mode.SKIPPED_STEP:
        skipped = lab.steps[b + 1]
        return EventEnvelope(event_type=skipped, seq_id=b + 1, data=_data_for(lab, skipped, first), **common)
    if mode is Mode.INVENTED_STEP:
        return EventEnvelope(event_type=INVENTED_TYPE, seq_id=b + 1, data={"note": "a step no process has"}, **common)
    if mode is Mode.AFTER_COMPLETION:
        again = str(honest[-2].event_type)
        data = {**_required_data(lab, again), "note": "again, after completion"}
        return EventEnvelope(event_type=again, seq_id=b + 1, data=data, **common)
    assert first is not None
    data = _data_for(lab, lab.money_step, first)
    if mode is Mode.WRONG_AMOUNT:
        data[lab.amount_field] = str(Decimal(str(data[lab.amount_field])) + 1)
    else:
        data[lab.currency_field] = "JPY" if data[lab.currency_field] != "JPY" else "USD"
    return EventEnvelope(event_type=lab.money_step, seq_id=b + 1, data=data, **common)


def _data_for(lab: LabProcess, event_type: str, first: EventEnvelope | None) -> dict[str, Any]:
    created = first.data if first is not None else {}
    if event_type == lab.money_step:
        return {
            "payment_id": "pay_hallucinated",
            lab.amount_field: str(created.get(lab.source_amount_field, "0")),
            lab.currency_field: created.get(lab.currency_field, "USD"),
        }
    return _required_data(lab, event_type)


def _required_data(lab: LabProcess, event_type: str) -> dict[str, Any]:
    """The fields the step's schema requires, as strings: a hallucination is a step's turn, not its data."""
    schema = lab.definition.steps[event_type].step.data
    return {name: "hallucinated" for name in schema.get("required", ())}


class HostileStream:
    """Turns honest events, as the graph produces them, into the messages to send now.

    `push(event)` returns the messages whose ingredients exist: usually the event itself and any extras
    after it; nothing while it holds the first of an out-of-order pair.
    """

    def __init__(
        self,
        specs: Sequence[SendSpec],
        *,
        order_id: str,
        plan_id: str,
        new_id: Callable[[], uuid.UUID] = uuid.uuid4,
        deadline: dt.datetime | None = None,
        process: str | None = None,
        lab: LabProcess = ORDER,
    ) -> None:
        self.specs = list(specs)
        self.target = PlanTarget(order_id, plan_id, new_id, lab, process)
        self.plan_id = plan_id
        self.honest: list[EventEnvelope] = []
        self.next = 0
        self.deadline = deadline
        """Set on the plan's first step (a stalling plan: the gateway aborts it then)."""
        self.process = process
        """The process the plan's first step names (None: `order`)."""
        replan = next((s for s in self.specs if s.mutation == "replan"), None)
        self.replanned_at = None if replan is None or replan.ref is None else replan.ref + 1
        """Honest events from this index on go under the new plan."""

    def ready(self) -> list[Message]:
        out: list[Message] = []
        while self.next < len(self.specs) and self.specs[self.next].needs <= len(self.honest):
            spec = self.specs[self.next]
            out.append(materialize(spec, self.honest, self.target))
            self.next += 1
        return out

    def push(self, event: EventEnvelope) -> list[Message]:
        if not self.honest and self.deadline is not None:
            event = event.model_copy(update={"deadline": self.deadline})
        if not self.honest and self.process is not None:
            event = event.model_copy(update={"process": self.process})
        if self.replanned_at is not None and len(self.honest) >= self.replanned_at:
            event = event.model_copy(update={"plan_id": self.plan_id + REPLAN_SUFFIX})
        self.honest.append(event)
        return self.ready()

    @property
    def final_plan_id(self) -> str:
        return self.plan_id + REPLAN_SUFFIX if self.replanned_at is not None else self.plan_id

    @property
    def done(self) -> bool:
        return self.next >= len(self.specs)
