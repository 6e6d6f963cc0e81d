"""What a batch is made of: the items handed to `Gateway.submit`, and the ingress kind they came by. Pure."""

from __future__ import annotations

import dataclasses
import enum
import json
from collections.abc import Mapping
from typing import Any

from nexus.core import strict_json
from nexus.core.decide.plan_end import PlanEnd
from nexus.core.envelope import EventEnvelope, parse_envelope
from nexus.core.numbering import Proposal
from nexus.core.saga import StepStatus
from nexus.core.strict_json import InputLimits
from nexus.errors import InvalidEventError


@dataclasses.dataclass(frozen=True, slots=True)
class Incoming:
    """One item handed to the gateway: a parsed envelope, or the raw input and why it failed to parse."""

    raw: str | Mapping[str, Any]
    """The input as it came: its text, or the JSON object it was decoded to (`text` encodes it, which only
    a dead letter needs)."""
    envelope: EventEnvelope | None = None
    error: InvalidEventError | None = None
    traceparent: str | None = None
    tenant_id: str = "default"
    """The tenant the caller's key (or the Kafka topic) speaks for; see nexus.ingress.tenants."""
    actor: str | None = None
    """Who proposed it, as the decision log names it (`key:<id>`, `kafka:<topic>`, `system:...`); None:
    not recorded (the log's `actor` stays null, as for records written before actors)."""
    actor_name: str | None = None
    """The name of the key `actor` stands for, stored beside the log's records (outside their hash)."""
    proposal: Proposal | None = None
    """A step proposed without a number (`POST /v1/orders/{id}/steps`, MCP): numbered under its order's
    lock, in the fold (`core/decide/numbering.py`)."""
    ending: PlanEnd | None = None
    """An ABORT_PLAN or REPLAN ending the order's plan (the steps API, MCP): its plan id and position are filled
    under its order's lock, in the fold (`core/decide/plan_end.py`)."""
    refused: EventEnvelope | None = None
    """An item the database refused alone (`core/decide/isolation.py`): the envelope it had, so that its dead
    letter keeps the order, plan and tenant."""
    weight: int = 0
    """Its share of a transaction's work (`nexus.fold_thread.weight_of`) when its parser weighed it (a large
    body's, in a worker thread); 0: weighed when asked."""

    @classmethod
    def parse(
        cls, raw: bytes | str | dict[str, Any], traceparent: str | None = None, limits: InputLimits | None = None
    ) -> Incoming:
        text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
        try:
            return cls(text, parse_envelope(raw, limits), None, traceparent)
        except InvalidEventError as exc:
            return cls(text, None, exc, traceparent)

    @classmethod
    def of(cls, envelope: EventEnvelope, traceparent: str | None = None, actor: str | None = None) -> Incoming:
        return cls(envelope.model_dump_json(), envelope, None, traceparent, tenant_id=envelope.tenant_id, actor=actor)

    @property
    def text(self) -> str:
        """The input as text (a decoded object encoded again, as `json.dumps` does)."""
        raw = self.raw
        return raw if isinstance(raw, str) else json.dumps(raw, default=str)

    @property
    def event_id(self) -> str | None:
        if self.envelope is not None:
            return str(self.envelope.event_id)
        try:
            obj = self.raw if not isinstance(self.raw, str) else strict_json.loads(self.raw)
        except InvalidEventError:
            return None
        value = obj.get("event_id") if isinstance(obj, dict) else None
        return str(value) if value is not None else None


@dataclasses.dataclass(frozen=True, slots=True)
class EffectOutcome:
    """One saga call's outcome handed to the gateway (`Gateway.fold_effects`): folded under its order's lock
    with the other outcomes of a batch (one per saga, of different orders) by `plan_batch`."""

    tenant_id: str
    order_id: str
    seq: int
    step_name: str
    service: str
    forward: bool
    """The call's direction: the effect itself (True) or its compensation."""
    result: EffectResult
    step_status: StepStatus
    """The saga step's status the call leaves (written as it is)."""
    envelope: EventEnvelope | None = None
    """The step's envelope (a DONE forward call's, to apply it); None otherwise."""
    response: Any = None
    error: str | None = None
    traceparent: str | None = None
    uncertain: bool = False
    retry_s: float | None = None
    """The same call is retried after this many seconds; None: not retried."""
    keep: bool = True
    """The writer's process goes on with the saga if it is due again at once (else its lease is cleared)."""

    @property
    def key(self) -> tuple[str, str]:
        return (self.tenant_id, self.order_id)


def order_key(envelope: EventEnvelope) -> tuple[str, str]:
    """An order's identity: (tenant, order_id)."""
    return (envelope.tenant_id, envelope.order_id)


class IngressKind(enum.StrEnum):
    """How a batch reached the gateway: its dead letters' `source`, its log lines' `source`, and whether its
    decisions are also written for the `nexus.decisions` topic (Kafka)."""

    HTTP = "http"
    KAFKA = "kafka"
    APPROVAL = "approval"
    """A person's answer to a held step (nexus.lifecycle.approvals)."""
    DEADLINE = "deadline"
    """The deadline sweeper's timeout aborts."""
    BUFFER = "buffer"
    """The buffer sweeper's expiries (dead letters BUFFER_TIMEOUT)."""
    SAGA = "saga"
    """The saga executors' effect outcomes (`EffectOutcome`, `Gateway.fold_effects`)."""


class EffectResult(enum.StrEnum):
    """What a saga call's outcome is, as a command of the fold (`core/decide/outcomes.py`)."""

    DONE = "done"
    """The effect succeeded: its step applies for good (unless stale), its successors drain."""
    FAILED = "failed"
    """The call failed: retried after `retry_s`, else the saga compensates (a compensation: the saga fails)."""
    COMPENSATED = "compensated"
    """The compensation succeeded: its notification, at the order's next position."""
    ESCALATED = "escalated"
    """The effect failed past its pivot: the saga waits for a person (`nexus saga redrive`)."""
