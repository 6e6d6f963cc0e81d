"""Server-numbered steps in the fold: each proposal is numbered when the fold reaches it, from the state the
order's earlier steps of the batch left (the rules: `nexus.core.numbering`).

| proposal (in arrival order)                        | what happens                                       |
|----------------------------------------------------|----------------------------------------------------|
| NEW                                                 | numbered (the next free seq, the order's live       |
|                                                     | plan), then decided by the fold like any step       |
| REPEAT of a stored first verdict                    | DUPLICATE with it under `first`; one log record     |
| SAME_AS an earlier proposal of the batch (same key) | DUPLICATE with that one's verdict under `first`     |

So an order's second new proposal in a batch is decided in the same fold, after the first: held or applied,
the first keeps its number and the second takes the next; REJECTED, the first frees its number for the
second. Each NEW proposal's first verdict is a `FirstVerdictRow` of the plan (`plan_steps`, migration 0016).
Pure: no I/O.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import uuid
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from nexus.core.audit_chain import Entry
from nexus.core.decide.answers import Outcome
from nexus.core.decide.order import OrderContext, OrderFold
from nexus.core.envelope import EventEnvelope
from nexus.core.numbering import DEFAULT_REPEAT_WINDOW_S, FirstVerdict, Kind, Proposal, next_seq
from nexus.core.numbering import number_one as assign
from nexus.core.order_state import OrderState, Resolution
from nexus_wire.codes import Decision


@dataclasses.dataclass(frozen=True, slots=True)
class StartedPlan:
    """A plan started before its first step (`POST /v1/plans`): its first step takes its plan, process
    and deadline."""

    plan_id: str
    process: str
    deadline_at: dt.datetime | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class NumberingReads:
    """What the gateway read of one order's numbered steps under its lock: its started plan, the stored
    first verdicts of the batch's keyed proposals (by event id), and its last applied numbered step."""

    plan: StartedPlan | None = None
    known: Mapping[uuid.UUID, FirstVerdict] = dataclasses.field(default_factory=dict)
    last_applied: FirstVerdict | None = None


class FirstVerdictRow(NamedTuple):
    """The first verdict on a newly numbered step, as `plan_steps` stores it (its columns in order: written as
    a row of the batch's write, `batch_rows.write_rows`)."""

    tenant_id: str
    order_id: str
    event_id: uuid.UUID
    seq_id: int | None
    keyed: bool
    digest: str
    decision: str
    code: str | None
    check: str | None
    message: str | None
    decided_at: dt.datetime


@dataclasses.dataclass(frozen=True, slots=True)
class Step:
    """One item of an order's batch as the fold takes it: its index in the batch, its envelope, and its
    proposal when the server numbers it."""

    index: int
    envelope: EventEnvelope
    proposal: Proposal | None = None


class OrderNumbering:
    """Numbers one order's proposals as the fold reaches them; lives for one order of one batch."""

    def __init__(self, reads: NumberingReads, now: dt.datetime, window_s: float = DEFAULT_REPEAT_WINDOW_S) -> None:
        self.reads, self.now, self.window_s = reads, now, window_s
        self.last_applied = reads.last_applied
        self.seen: dict[uuid.UUID, int] = {}
        self.repeats: dict[int, tuple[EventEnvelope, FirstVerdict, OrderState]] = {}
        self.same_as: dict[int, int] = {}
        self.new: dict[int, tuple[EventEnvelope, Proposal]] = {}

    def number(self, step: Step, state: OrderState, buffered: frozenset[int]) -> EventEnvelope | None:
        """The proposal as the step it is (NEW), or None when it is answered as a repeat."""
        assert step.proposal is not None
        seq = next_seq(state.last_seq, buffered, held=state.held is not None)
        assignment = assign(
            step.proposal, seq, last_seq=state.last_seq, known=self.reads.known, seen=self.seen,
            last_applied=self.last_applied, now=self.now, window_s=self.window_s,
        )  # fmt: skip
        if assignment.kind is Kind.SAME_AS:
            assert assignment.same_as is not None
            self.same_as[step.index] = assignment.same_as
            return None
        if assignment.kind is Kind.REPEAT:
            assert assignment.first is not None
            self.repeats[step.index] = (step.envelope, assignment.first, state)
            return None
        self.seen[step.proposal.event_id] = step.index
        numbered = numbered_envelope(step.envelope, assignment.seq_id, state, self.reads.plan)
        self.new[step.index] = (numbered, step.proposal)
        return numbered

    def decided(self, index: int, decision: Decision) -> None:
        """The fold's decision on a NEW proposal: applied, it is the order's last applied numbered step."""
        envelope, proposal = self.new[index]
        if decision is Decision.APPLY:
            self.last_applied = FirstVerdict(
                envelope.event_id, envelope.seq_id, proposal.digest, decision.value, decided_at=self.now
            )

    def answer(self, answers: list[Outcome | None]) -> None:
        """Fill in the repeats' answers: DUPLICATE, with the first verdict under `first`."""
        for i, (_, first, state) in self.repeats.items():
            answers[i] = Outcome(
                str(first.event_id), Decision.DUPLICATE, status=state.status, last_seq=state.last_seq,
                seq_id=first.seq_id, first=first.as_json(),
            )  # fmt: skip
        for i, j in self.same_as.items():
            earlier = answers[j]
            assert earlier is not None
            answers[i] = dataclasses.replace(
                earlier, decision=Decision.DUPLICATE, code=None, first=_first_of(earlier), approval_id=None
            )

    def entries(self, actors: Mapping[int, tuple[str | None, str | None]]) -> list[Entry]:
        """The decision log's records of the repeats of stored verdicts (`actors`: by index, who and the
        name of their key)."""
        return [
            duplicate_entry(envelope, first, state, *actors.get(i, (None, None)))
            for i, (envelope, first, state) in self.repeats.items()
        ]

    def first_verdicts(self, answers: Sequence[Outcome | None]) -> list[FirstVerdictRow]:
        rows = []
        for i, (envelope, proposal) in self.new.items():
            outcome = answers[i]
            assert outcome is not None
            rows.append(
                FirstVerdictRow(
                    envelope.tenant_id, envelope.order_id, envelope.event_id, envelope.seq_id, proposal.keyed,
                    proposal.digest, outcome.decision.value, outcome.code.value if outcome.code else None,
                    outcome.check, outcome.message, self.now,
                )
            )  # fmt: skip
        return rows


def resolve_numbered(
    state: OrderState,
    steps: Sequence[Step],
    pending: Mapping[int, EventEnvelope],
    ctx: OrderContext,
    numbering: OrderNumbering,
) -> tuple[Resolution, list[int]]:
    """Fold one order's steps in arrival order, numbering each proposal from the state the steps before it
    left; the resolution and the indexes of the steps folded (all but the repeats)."""
    fold = OrderFold(state, pending, ctx)
    folded: list[int] = []
    for step in steps:
        event: EventEnvelope | None = step.envelope
        if step.proposal is not None:
            event = numbering.number(step, fold.state, fold.buffer.seqs())
        if event is None:
            continue
        fold.step(event)
        folded.append(step.index)
        if step.proposal is not None:
            numbering.decided(step.index, fold.decisions[-1][1])
    return fold.result(), folded


def numbered_envelope(
    envelope: EventEnvelope, seq_id: int | None, state: OrderState, plan: StartedPlan | None
) -> EventEnvelope:
    """The proposal as the step it is: its number, the order's live plan, and on a plan's first step the
    started plan's process and deadline."""
    update: dict[str, Any] = {"seq_id": seq_id}
    if state.plan_id is not None:
        update["plan_id"] = state.plan_id
    elif plan is not None:
        update["plan_id"] = plan.plan_id
    if plan is not None:
        update["process"] = state.process or plan.process
        update["deadline"] = plan.deadline_at if not state.exists else None
    return envelope.model_copy(update=update)


def duplicate_entry(
    envelope: EventEnvelope, first: FirstVerdict, state: OrderState, actor: str | None, actor_name: str | None
) -> Entry:
    """The decision log's record of a repeat of a stored verdict: a DUPLICATE, naming the step it repeats."""
    return Entry(
        tenant_id=envelope.tenant_id,
        order_id=envelope.order_id,
        decision=Decision.DUPLICATE.value,
        event_id=str(first.event_id),
        plan_id=state.plan_id or envelope.plan_id,
        seq=first.seq_id,
        event_type=str(envelope.event_type),
        code=None,
        message=f"repeats the step decided {first.decision}" + (f" ({first.code})" if first.code else ""),
        actor=actor,
        actor_name=actor_name,
    )


def _first_of(outcome: Outcome) -> dict[str, Any]:
    return {
        "decision": outcome.decision.value,
        "code": outcome.code.value if outcome.code else None,
        "check": outcome.check,
        "message": outcome.message,
    }
