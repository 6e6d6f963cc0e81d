"""Server-numbered steps inside `Gateway.submit`: number them under their orders' locks, before the decision,
and store each one's first verdict in the same transaction (the rules: nexus.core.numbering).

`number` runs after the batch's orders are locked and read: an order's first new proposal in the batch
takes its next free sequence number and the order's plan (the live plan, which a REPLAN may have changed
since the request was read); a repeat is answered at once as a DUPLICATE of a stored first verdict; a
second new proposal of the same order is deferred to a transaction of its own (its number depends on
whether the first is applied, rejected or held). `record` writes the first verdicts of the newly
numbered steps (`plan_steps`, migration 0016).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import asyncpg

from nexus.batch_rows import columns, pairs
from nexus.core.audit import Entry
from nexus.core.envelope import EventEnvelope
from nexus.core.numbering import Assignment, FirstVerdict, Kind
from nexus.core.numbering import number as assign
from nexus.core.order_state import Decision, OrderState
from nexus.store.queries import query

# The gateway's Incoming and Outcome (nexus.gateway imports this module, never the reverse).
Incoming = Any
Outcome = Any

OrderKey = tuple[str, str]


@dataclasses.dataclass(slots=True)
class Numbered:
    """The batch with its proposals numbered: `items` (same length and order), the repeats of stored
    verdicts (`answered`: index -> the verdict and the order's state), the in-batch repeats (`same_as`:
    index -> index of the first), their decision-log rows, and the indexes of the newly numbered steps."""

    items: list[Incoming]
    answered: dict[int, tuple[FirstVerdict, OrderState]]
    same_as: dict[int, int]
    entries: list[Entry]
    new: list[int]
    deferred: list[int] = dataclasses.field(default_factory=list)
    """Second and later new proposals of one order in this batch: decided in a transaction of their own
    after this one, from the state it leaves (a REJECTED proposal frees its number for the next)."""

    def decided(self, size: int) -> list[int]:
        """The indexes the decision fold decides now: all but the repeats and the deferred proposals."""
        skipped = {*self.answered, *self.same_as, *self.deferred}
        return [i for i in range(size) if i not in skipped]


async def number(
    conn: asyncpg.Connection,
    items: Sequence[Incoming],
    by_order: Mapping[OrderKey, list[int]],
    states: Mapping[OrderKey, OrderState],
    pending: Mapping[OrderKey, Mapping[int, EventEnvelope]],
    now: dt.datetime,
    window_s: float,
) -> Numbered:
    """Number the batch's proposals (called under the orders' locks, with their state just read)."""
    keys = sorted(k for k, indexes in by_order.items() if any(items[i].proposal for i in indexes))
    event_ids = [items[i].proposal.event_id for k in keys for i in by_order[k] if items[i].proposal]
    rows = await conn.fetch(query("steps.sql", "read_numbering"), *pairs(keys), event_ids)
    plans: dict[OrderKey, Any] = {}
    known: dict[OrderKey, dict[uuid.UUID, FirstVerdict]] = {k: {} for k in keys}
    last: dict[OrderKey, FirstVerdict] = {}
    for row in rows:
        key = (row["tenant_id"], row["order_id"])
        if row["kind"] == "plan":
            plans[key] = row
        elif row["kind"] == "known":
            known[key][row["event_id"]] = _verdict(row)
        else:
            last[key] = _verdict(row)
    out = Numbered(list(items), {}, {}, [], [])
    for key in keys:
        state = states.get(key) or OrderState(key[1])
        indexes = [i for i in by_order[key] if items[i].proposal]
        assignments = assign(
            [items[i].proposal for i in indexes],
            last_seq=state.last_seq,
            buffered=pending.get(key, {}).keys(),
            held=state.held is not None,
            known=known[key],
            last_applied=last.get(key),
            now=now,
            window_s=window_s,
        )
        numbered_one = False
        for i, assignment in zip(indexes, assignments, strict=True):
            envelope = items[i].envelope
            assert envelope is not None
            if assignment.kind is Kind.NEW and numbered_one:
                out.deferred.append(i)
            elif assignment.kind is Kind.NEW:
                numbered_one = True
                numbered = _numbered(envelope, assignment, state, plans.get(key))
                out.items[i] = dataclasses.replace(items[i], envelope=numbered, raw=numbered.model_dump_json())
                out.new.append(i)
            elif assignment.kind is Kind.SAME_AS:
                assert assignment.same_as is not None
                out.same_as[i] = indexes[assignment.same_as]
            else:
                first = assignment.first
                assert first is not None
                out.answered[i] = (first, state)
                out.entries.append(_duplicate_entry(envelope, first, state, items[i].actor, items[i].actor_name))
    return out


def finish(numbered: Numbered, outcomes: list[Outcome | None], outcome_type: type[Outcome]) -> None:
    """Answer the repeats (after the decision): DUPLICATE, with the first verdict under `first` (an
    in-batch repeat: its first proposal's outcome)."""
    for i, (first, state) in numbered.answered.items():
        outcomes[i] = outcome_type(
            str(first.event_id),
            Decision.DUPLICATE,
            status=state.status,
            last_seq=state.last_seq,
            seq_id=first.seq_id,
            first=first.as_json(),
        )
    for i, j in numbered.same_as.items():
        earlier = outcomes[j]
        assert earlier is not None
        outcomes[i] = dataclasses.replace(
            earlier, decision=Decision.DUPLICATE, code=None, first=_first_of(earlier), approval_id=None
        )


async def record(
    conn: asyncpg.Connection, numbered: Numbered, outcomes: Sequence[Outcome | None], now: dt.datetime
) -> None:
    """Store the first verdict of each newly numbered step, in the batch's transaction."""
    rows = []
    for i in numbered.new:
        item, outcome = numbered.items[i], outcomes[i]
        envelope, proposal = item.envelope, item.proposal
        assert envelope is not None and proposal is not None and outcome is not None
        rows.append(
            (
                envelope.tenant_id,
                envelope.order_id,
                envelope.event_id,
                envelope.seq_id,
                proposal.keyed,
                proposal.digest,
                outcome.decision.value,
                outcome.code.value if outcome.code else None,
                outcome.check,
                outcome.message,
                now,
            )
        )
    if rows:
        await conn.execute(query("steps.sql", "record_first_verdicts"), *columns(rows, 11))


def _numbered(envelope: EventEnvelope, assignment: Assignment, state: OrderState, plan: Any) -> EventEnvelope:
    """The proposal as the step it is: its number, the order's live plan, and on a plan's first step the
    started plan's process and deadline."""
    update: dict[str, Any] = {"seq_id": assignment.seq_id}
    if state.plan_id is not None:
        update["plan_id"] = state.plan_id
    elif plan is not None:
        update["plan_id"] = plan["plan_id"]
    if plan is not None:
        update["process"] = state.process or plan["process"]
        update["deadline"] = plan["deadline_at"] if not state.exists else None
    return envelope.model_copy(update=update)


def _verdict(row: Any) -> FirstVerdict:
    return FirstVerdict(
        row["event_id"],
        row["seq_id"],
        row["digest"],
        row["decision"],
        row["code"],
        row["check"],
        row["message"],
        row["decided_at"],
    )


def _first_of(outcome: Outcome) -> dict[str, Any]:
    return {
        "decision": outcome.decision.value,
        "code": outcome.code.value if outcome.code else None,
        "check": outcome.check,
        "message": outcome.message,
    }


def _duplicate_entry(
    envelope: EventEnvelope, first: FirstVerdict, state: OrderState, actor: str | None, actor_name: str | None
) -> Entry:
    """The decision log's row of a repeat answered here: a DUPLICATE, naming the step it repeats."""
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
