"""Hostile-agent modes: pure functions over the sequence of events a plan sends.

The honest plan is the graph's events in order (e_0 .. e_{n-1}). A hostile mode adds or moves messages
around them, and each message carries the decision the gateway must answer, so a plan's expected outcome
stays computable from the report alone: whatever the modes did, the order ends as the honest plan says
(status, last_seq, one notification per honest event) and every hostile message is absorbed.

| mode          | what the agent does                                   | expected decision           |
|---------------|-------------------------------------------------------|-----------------------------|
| duplicate     | resends a step right after sending it (same event_id) | DUPLICATE                   |
| out_of_order  | sends steps i+1 then i (two consecutive steps)        | BUFFER, then APPLY (drains) |
| restart       | "restarts" mid-plan and resends 1..k with new ids     | DUPLICATE each              |
| zombie        | sends the next step after its own ABORT_PLAN          | DISCARD                     |
| other_plan    | sends a step with another plan_id, once the order     | PLAN_MISMATCH (dead letter) |
|               | exists (before it would create it under that plan)    |                             |
| malformed     | sends a message that is not a valid envelope          | DEAD_LETTER                 |

Extras (restart, other_plan, malformed, zombie) go at a boundary: a point where every honest event before
it was sent and none after it, never inside an out-of-order pair, so the gateway's state there is exactly
"the first b honest events applied". Which modes a plan uses, and where, depends only on its seed
(`random.Random(f"{seed}/hostile")`, two draws per mode in a fixed order, used or not).
"""

from __future__ import annotations

import dataclasses
import enum
import json
import random
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from nexus.core.envelope import EventEnvelope
from nexus.core.process import STEPS, EventType
from nexus.core.sequencing import Decision


class Mode(enum.StrEnum):
    DUPLICATE = "duplicate"
    OUT_OF_ORDER = "out_of_order"
    RESTART = "restart"
    ZOMBIE = "zombie"
    OTHER_PLAN = "other_plan"
    MALFORMED = "malformed"


# The order modes are drawn in: out_of_order first, since it decides which boundaries exist.
DRAW_ORDER: tuple[Mode, ...] = (
    Mode.OUT_OF_ORDER,
    Mode.DUPLICATE,
    Mode.RESTART,
    Mode.OTHER_PLAN,
    Mode.MALFORMED,
    Mode.ZOMBIE,
)
# The order extras take at one boundary.
BOUNDARY_ORDER: tuple[Mode, ...] = (Mode.RESTART, Mode.OTHER_PLAN, Mode.MALFORMED, Mode.ZOMBIE)

MALFORMED_VARIANTS: dict[str, str] = {
    # variant -> the error code the gateway gives it
    "not_json": "PARSE_ERROR",
    "missing_plan_id": "INVALID_EVENT",
    "wrong_seq_id": "INVALID_EVENT",
    "negative_quantity": "INVALID_EVENT",
}
OTHER_PLAN_SUFFIX = "-impostor"


@dataclasses.dataclass(frozen=True, slots=True)
class Action:
    """One hostile move: `at` is an honest index (duplicate, out_of_order) or a boundary (the others)."""

    mode: Mode
    at: int
    variant: str | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class SendSpec:
    """One message to send, described by reference to the honest event it is built from.

    `ref` is the honest index it derives from (None: needs none). `mutation` says how it is built:
    "as_is" (the honest event itself, or its exact resend), "new_id", "other_plan", "zombie", "malformed".
    """

    ref: int | None
    mutation: str
    mode: Mode | None
    honest: bool
    expected: Decision
    expected_code: str | None = None
    variant: str | None = None

    @property
    def needs(self) -> int:
        """How many honest events must exist before this message can be built."""
        return 0 if self.ref is None else self.ref + 1


def _is_step(event_type: EventType) -> bool:
    return event_type is not EventType.ABORT_PLAN


def candidates(mode: Mode, shape: Sequence[EventType], swap_at: int | None) -> list[int]:
    """Where `mode` may act in a plan of this shape (honest event types), given the out-of-order pair."""
    n = len(shape)
    boundaries = [b for b in range(n + 1) if swap_at is None or b != swap_at + 1]
    if mode is Mode.OUT_OF_ORDER:
        return [i for i in range(n - 1) if _is_step(shape[i]) and _is_step(shape[i + 1])]
    if mode is Mode.DUPLICATE:
        return list(range(n))
    if mode is Mode.RESTART:
        # Mid-plan: something was sent, nothing terminal yet.
        return [b for b in boundaries if 1 <= b < n and all(_is_step(t) for t in shape[:b])]
    if mode is Mode.OTHER_PLAN:
        # Only once the order exists (a step was sent), else the impostor would create it.
        return [b for b in boundaries if b >= 1 and any(_is_step(t) for t in shape[:b])]
    if mode is Mode.MALFORMED:
        return boundaries
    if mode is Mode.ZOMBIE:
        aborted = n >= 1 and shape[-1] is EventType.ABORT_PLAN and n - 1 < len(STEPS)
        return [n] if aborted else []
    raise AssertionError(mode)


def choose(seed: str, rates: Mapping[Mode, float], shape: Sequence[EventType]) -> tuple[Action, ...]:
    """The hostile actions of one plan, from its seed only (a mode whose rate is 0 never acts)."""
    rng = random.Random(f"{seed}/hostile")
    actions: list[Action] = []
    swap_at: int | None = None
    for mode in DRAW_ORDER:
        roll, pick, variant_pick = rng.random(), rng.random(), rng.random()
        if roll >= rates.get(mode, 0.0):
            continue
        where = candidates(mode, shape, swap_at)
        if not where:
            continue
        at = where[int(pick * len(where))]
        variant = None
        if mode is Mode.MALFORMED:
            names = sorted(MALFORMED_VARIANTS)
            variant = names[int(variant_pick * len(names))]
        if mode is Mode.OUT_OF_ORDER:
            swap_at = at
        actions.append(Action(mode, at, variant))
    return tuple(actions)


def schedule(shape: Sequence[EventType], actions: Sequence[Action]) -> list[SendSpec]:
    """The messages of one plan, in sending order, each with the decision the gateway must give it."""
    n = len(shape)
    swap_at = next((a.at for a in actions if a.mode is Mode.OUT_OF_ORDER), None)
    duplicated = {a.at for a in actions if a.mode is Mode.DUPLICATE}
    specs: list[SendSpec] = []

    def honest(i: int, expected: Decision, mode: Mode | None) -> None:
        if i == 0 and shape[0] is EventType.ABORT_PLAN:
            expected = Decision.TOMBSTONE
        specs.append(SendSpec(i, "as_is", mode, True, expected))
        if i in duplicated:
            specs.append(SendSpec(i, "as_is", Mode.DUPLICATE, False, Decision.DUPLICATE))

    def boundary(b: int) -> None:
        for mode in BOUNDARY_ORDER:
            for action in actions:
                if action.mode is not mode or action.at != b:
                    continue
                if mode is Mode.RESTART:
                    specs.extend(SendSpec(j, "new_id", mode, False, Decision.DUPLICATE) for j in range(b))
                elif mode is Mode.OTHER_PLAN:
                    ref = max(j for j in range(b) if _is_step(shape[j]))
                    specs.append(SendSpec(ref, "other_plan", mode, False, Decision.PLAN_MISMATCH, "PLAN_MISMATCH"))
                elif mode is Mode.MALFORMED:
                    assert action.variant is not None
                    specs.append(
                        SendSpec(
                            b - 1 if b else None,
                            "malformed",
                            mode,
                            False,
                            Decision.DEAD_LETTER,
                            MALFORMED_VARIANTS[action.variant],
                            action.variant,
                        )
                    )
                elif mode is Mode.ZOMBIE:
                    specs.append(SendSpec(b - 1, "zombie", mode, False, Decision.DISCARD))

    i = 0
    boundary(0)
    while i < n:
        if i == swap_at:
            honest(i + 1, Decision.BUFFER, Mode.OUT_OF_ORDER)
            honest(i, Decision.APPLY, Mode.OUT_OF_ORDER)
            i += 2
        else:
            honest(i, Decision.APPLY, None)
            i += 1
        boundary(i)
    return specs


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
        body=envelope.model_dump_json().encode(),
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
    )


def malformed_body(variant: str, base: dict[str, Any]) -> bytes:
    """A message the gateway cannot accept, built from a valid envelope `base` (JSON-ready dict)."""
    obj = dict(base)
    if variant == "not_json":
        text = json.dumps(obj)
        return text[: len(text) // 2].encode()
    if variant == "missing_plan_id":
        obj.pop("plan_id", None)
    elif variant == "wrong_seq_id":
        # A step out of turn is the process's business now (REJECTED); a seq_id below 1 is still malformed.
        obj["event_type"] = EventType.ORDER_SHIPPED.value
        obj["seq_id"] = 0
        obj["data"] = {}
    elif variant == "negative_quantity":
        obj["event_type"] = EventType.ORDER_CREATED.value
        obj["seq_id"] = 1
        obj["data"] = {"items": [{"product_id": "prod_x", "quantity": -1, "unit_price": "1.00"}]}
    else:
        raise ValueError(f"unknown malformed variant {variant!r}")
    return json.dumps(obj).encode()


def materialize(
    spec: SendSpec,
    honest: Sequence[EventEnvelope],
    *,
    order_id: str,
    plan_id: str,
    new_id: Callable[[], uuid.UUID] = uuid.uuid4,
) -> Message:
    """Build the message `spec` describes from the honest events produced so far."""
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
    if spec.mutation == "zombie":
        assert ref is not None
        aborted_at = int(ref.data["aborted_at_seq"])
        step = STEPS[aborted_at]
        zombie = EventEnvelope(
            event_id=new_id(),
            event_type=step,
            plan_id=ref.plan_id,
            order_id=ref.order_id,
            seq_id=aborted_at + 1,
            timestamp=ref.timestamp,
            data={"note": "sent after the plan was aborted"},
            correlation_id=ref.correlation_id,
        )
        return _message(spec, zombie)
    if spec.mutation == "malformed":
        assert spec.variant is not None
        event_id = new_id()
        base: dict[str, Any] = {
            "event_id": str(event_id),
            "event_type": EventType.INVENTORY_VALIDATED.value,
            "plan_id": plan_id,
            "order_id": order_id,
            "seq_id": 2,
            "timestamp": (ref.timestamp.isoformat() if ref else "2026-01-01T00:00:00+00:00"),
            "schema_version": "1.0",
            "data": {},
        }
        body = malformed_body(spec.variant, base)
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
    raise ValueError(f"unknown mutation {spec.mutation!r}")


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
    ) -> None:
        self.specs = list(specs)
        self.order_id = order_id
        self.plan_id = plan_id
        self.new_id = new_id
        self.honest: list[EventEnvelope] = []
        self.next = 0

    def ready(self) -> list[Message]:
        out: list[Message] = []
        while self.next < len(self.specs) and self.specs[self.next].needs <= len(self.honest):
            spec = self.specs[self.next]
            out.append(materialize(spec, self.honest, order_id=self.order_id, plan_id=self.plan_id, new_id=self.new_id))
            self.next += 1
        return out

    def push(self, event: EventEnvelope) -> list[Message]:
        self.honest.append(event)
        return self.ready()

    @property
    def done(self) -> bool:
        return self.next >= len(self.specs)
