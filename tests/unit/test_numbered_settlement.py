"""No numbered client waits for a number nobody can send: the pure fold (plan_batch numbering proposals with
core/numbering) driven in memory by any sequence of proposals, approvals, denials, expiries, aborts and
replans."""

from __future__ import annotations

import dataclasses
import datetime as dt
import uuid
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from nexus.core.decide.items import Incoming, IngressKind
from nexus.core.decide.numbering import NumberingReads, StartedPlan
from nexus.core.decide.plan import BatchPlan, BatchReads, Parts, plan_batch
from nexus.core.envelope import EventEnvelope
from nexus.core.numbering import Proposal, data_digest, event_id_for
from nexus.core.order_state import OrderState
from nexus.core.process_model import Verdict
from nexus.errors import ErrorCode
from nexus.processes import builtin_catalog
from nexus_wire.codes import Decision
from tests.factories import abort_json, replan_json

NOW = dt.datetime(2026, 6, 1, tzinfo=dt.UTC)
KEY = ("default", "o-1")
PARTS = Parts(catalog=builtin_catalog(), default_limits={"max_order_amount": 100000})
CREATED = {"items": [{"product_id": "p", "quantity": 1, "unit_price": 1500}], "total_amount": 1500, "currency": "USD"}
DATA: dict[str, dict[str, Any]] = {
    "OrderCreated": CREATED,
    "InventoryValidated": {},
    "PaymentProcessed": {"payment_id": "pay", "amount": 1500, "currency": "USD"},
    "SmallPayment": {"payment_id": "pay", "amount": 900, "currency": "USD"},
    "OrderShipped": {"carrier": "ups"},
    "OrderCompleted": {},
}
DENIED = Verdict(ErrorCode.APPROVAL_DENIED, "denied by a person")
EXPIRED = Verdict(ErrorCode.APPROVAL_DENIED, "expired unanswered")
SETTLED = {Decision.APPLY.value, Decision.REJECTED.value, Decision.DISCARD.value}

MAIN = ("OrderCreated", "InventoryValidated", "PaymentProcessed", "OrderShipped", "OrderCompleted")
commands = st.lists(
    st.one_of(
        st.tuples(st.just("propose"), st.just("")),  # the plan's step at the next free number
        st.tuples(st.just("propose"), st.just("")),
        st.tuples(st.just("propose"), st.sampled_from(sorted(DATA))),
        st.tuples(st.sampled_from(["approve", "deny", "expire", "abort", "replan"]), st.just("")),
    ),
    max_size=30,
)


@dataclasses.dataclass
class Order:
    """One order as the store would hold it between transactions, and what the decision log recorded."""

    state: OrderState = dataclasses.field(default_factory=lambda: OrderState(KEY[1]))
    pending: dict[int, EventEnvelope] = dataclasses.field(default_factory=dict)
    numbered: set[uuid.UUID] = dataclasses.field(default_factory=set)
    envelopes: dict[uuid.UUID, EventEnvelope] = dataclasses.field(default_factory=dict)
    log: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    plans: int = 1

    @property
    def plan_id(self) -> str:
        return self.state.plan_id or "p-1"

    def submit(self, item: Incoming, kind: IngressKind, answers: dict[uuid.UUID, Verdict | None] | None = None) -> Any:
        """Lock, read, plan, write: the gateway's transaction, in memory."""
        numbered = frozenset(e.event_id for e in self.pending.values() if e.event_id in self.numbered)
        reads = BatchReads(
            {KEY: self.state}, {KEY: dict(self.pending)}, numbered={KEY: numbered},
            numbering={KEY: NumberingReads(StartedPlan("p-1", "order_reviewed"))},
        )  # fmt: skip
        plan: BatchPlan = plan_batch([item], reads, PARTS, kind=kind, now=NOW, approvals=answers)
        [resolution] = plan.resolutions
        self.envelopes.update({event.event_id: event for event, _, _ in resolution.decisions})
        self.state = resolution.after
        for seq in resolution.unbuffered:
            del self.pending[seq]
        self.pending.update({e.seq_id or 0: e for e in resolution.buffered})
        self.log += [(str(entry.event_id), entry.decision) for entry in plan.log]
        return plan.answers[0]

    def propose(self, name: str) -> Decision:
        if not name:  # the step a straight plan has at the next free number
            taken = max([self.state.last_seq + (self.state.held is not None), *self.pending])
            name = MAIN[min(taken, len(MAIN) - 1)]
        step = "PaymentProcessed" if name == "SmallPayment" else name
        event_id = event_id_for(KEY[0], KEY[1], str(uuid.uuid4()))
        envelope = EventEnvelope.model_validate(
            {
                "event_id": str(event_id), "event_type": step, "plan_id": self.plan_id, "order_id": KEY[1],
                "seq_id": 1, "timestamp": NOW.isoformat(), "schema_version": "1.0", "data": DATA[name],
                "process": "order_reviewed",
            }
        )  # fmt: skip
        self.numbered.add(event_id)
        proposal = Proposal(event_id, data_digest(step, DATA[name]), keyed=True)
        item = dataclasses.replace(Incoming.of(envelope), proposal=proposal)
        decision: Decision = self.submit(item, IngressKind.HTTP).decision
        return decision

    def answer(self, verdict: Verdict | None) -> None:
        if self.state.held is not None:
            held = self.envelopes[self.state.held]
            self.submit(Incoming.of(held), IngressKind.APPROVAL, {held.event_id: verdict})

    def end(self, command: str) -> None:
        if command == "abort":
            self.submit(Incoming.of(EventEnvelope.model_validate(abort_json(KEY[1], self.plan_id))), IngressKind.HTTP)
        elif self.state.plan_id is not None:
            self.plans += 1
            replan = EventEnvelope.model_validate(replan_json(KEY[1], self.plan_id, f"p-{self.plans}"))
            self.submit(Incoming.of(replan), IngressKind.HTTP)

    def buffered_numbered(self) -> list[int]:
        return [seq for seq, e in self.pending.items() if e.event_id in self.numbered]


@settings(max_examples=300, deadline=None)
@given(commands=commands, finals=st.lists(st.booleans(), min_size=6, max_size=6))
def test_a_numbered_order_never_waits_for_a_number_nobody_can_send(
    commands: list[tuple[str, str]], finals: list[bool]
) -> None:
    """With no approval pending, a numbered proposal is never BUFFERed and no numbered step stays buffered;
    once every approval is answered, each BUFFERed numbered step was applied, rejected or discarded."""
    order = Order()
    for command, name in commands:
        if command == "propose":
            pending_approval = order.state.held is not None
            decision = order.propose(name)
            assert pending_approval or decision is not Decision.BUFFER
        elif command in ("approve", "deny", "expire"):
            order.answer({"approve": None, "deny": DENIED, "expire": EXPIRED}[command])
        else:
            order.end(command)
        if order.state.held is None:
            assert order.buffered_numbered() == []
    for approve in finals:  # every approval answered (a drained step may be held in turn)
        order.answer(None if approve else DENIED)
    if order.state.held is None:
        assert order.buffered_numbered() == []
        last: dict[str, str] = {}
        for event_id, decision in order.log:
            last[event_id] = decision
        buffered = {event_id for event_id, decision in order.log if decision == Decision.BUFFER.value}
        assert all(last[event_id] in SETTLED for event_id in buffered)
