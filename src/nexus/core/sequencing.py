"""Sequencing: what to do with one step given its order's state. Pure: no I/O, no clock.

`decide(state, event)` answers one event; `resolve(state, events, pending)` folds a batch of one order's
events through `decide`, draining buffered successors whenever a step applies, and returns the new state
and the writes to make. The gateway turns that into SQL; the decision table lives here and only here.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterable, Mapping

from nexus.core.envelope import EventEnvelope
from nexus.core.process import STATUS_AFTER, OrderStatus
from nexus.errors import ErrorCode


class Decision(enum.StrEnum):
    APPLY = "APPLY"
    BUFFER = "BUFFER"
    DUPLICATE = "DUPLICATE"
    DISCARD = "DISCARD"
    TOMBSTONE = "TOMBSTONE"
    PLAN_MISMATCH = "PLAN_MISMATCH"
    DEAD_LETTER = "DEAD_LETTER"


@dataclasses.dataclass(frozen=True, slots=True)
class OrderState:
    """What the gateway knows of one order. `status` is None until the order's first write."""

    order_id: str
    plan_id: str | None = None
    status: OrderStatus | None = None
    last_seq: int = 0
    buffered: frozenset[int] = frozenset()
    tombstone: bool = False
    outbox_count: int = 0

    @property
    def exists(self) -> bool:
        return self.status is not None


def decide(state: OrderState | None, event: EventEnvelope) -> Decision:
    """The decisions table of DESIGN.md section 4, for one event."""
    if state is None:
        state = OrderState(event.order_id)
    if state.plan_id is not None and event.plan_id != state.plan_id:
        return Decision.PLAN_MISMATCH
    if state.status is OrderStatus.ABORTED:
        return Decision.DUPLICATE if event.is_abort else Decision.DISCARD
    if event.is_abort:
        if state.status is None:
            return Decision.TOMBSTONE
        return Decision.DUPLICATE if state.status.terminal else Decision.APPLY
    assert event.seq_id is not None  # guaranteed by the envelope
    if event.seq_id <= state.last_seq or event.seq_id in state.buffered:
        return Decision.DUPLICATE
    if event.seq_id == state.last_seq + 1:
        return Decision.APPLY
    return Decision.BUFFER


def code_of(decision: Decision) -> ErrorCode | None:
    """The error code a decision carries in API bodies and dead letters, if any."""
    return ErrorCode.PLAN_MISMATCH if decision is Decision.PLAN_MISMATCH else None


@dataclasses.dataclass(frozen=True, slots=True)
class Applied:
    """A step that changed its order: one notification at `position` in the order's outbox."""

    event: EventEnvelope
    position: int
    drained: bool


@dataclasses.dataclass(frozen=True, slots=True)
class Resolution:
    """The outcome of one order's events in one batch: the decisions, the new state and what to write."""

    decisions: tuple[tuple[EventEnvelope, Decision, OrderState], ...]
    """Each event with its decision and the order's state right after it."""
    before: OrderState
    after: OrderState
    applied: tuple[Applied, ...]
    buffered: tuple[EventEnvelope, ...]
    """Events to add to pending_events."""
    unbuffered: tuple[int, ...]
    """seq_ids to remove from pending_events (drained, or dropped by an abort)."""


def resolve(
    state: OrderState,
    events: Iterable[EventEnvelope],
    pending: Mapping[int, EventEnvelope],
) -> Resolution:
    """Fold one order's events, in arrival order, through `decide`.

    `pending` holds the order's events buffered before this batch, by seq_id. Whenever a step applies,
    its consecutive buffered successors apply after it, in seq order.
    """
    before = state
    waiting: dict[int, EventEnvelope] = dict(pending)
    decisions: list[tuple[EventEnvelope, Decision, OrderState]] = []
    applied: list[Applied] = []
    added: dict[int, EventEnvelope] = {}
    removed: list[int] = []

    def take(seq: int) -> EventEnvelope:
        # Buffered and drained within one batch: never written, so nothing to delete.
        if added.pop(seq, None) is None:
            removed.append(seq)
        return waiting.pop(seq)

    def apply(current: OrderState, event: EventEnvelope, drained: bool) -> OrderState:
        position = current.outbox_count + 1
        applied.append(Applied(event, position, drained))
        return dataclasses.replace(
            current,
            plan_id=event.plan_id,
            status=STATUS_AFTER[event.event_type],
            last_seq=event.seq_id if event.seq_id is not None else current.last_seq,
            outbox_count=position,
        )

    for event in events:
        decision = decide(state, event)
        if decision is Decision.TOMBSTONE:
            for seq in sorted(waiting):
                take(seq)
            state = dataclasses.replace(
                state, plan_id=event.plan_id, status=OrderStatus.ABORTED, tombstone=True, buffered=frozenset()
            )
        elif decision is Decision.BUFFER:
            assert event.seq_id is not None
            waiting[event.seq_id] = event
            added[event.seq_id] = event
            state = dataclasses.replace(state, plan_id=event.plan_id, buffered=frozenset(waiting))
        elif decision is Decision.APPLY:
            state = apply(state, event, drained=False)
            if event.is_abort:
                for seq in sorted(waiting):
                    take(seq)
            else:
                while state.last_seq + 1 in waiting:
                    state = apply(state, take(state.last_seq + 1), drained=True)
            state = dataclasses.replace(state, buffered=frozenset(waiting))
        decisions.append((event, decision, state))

    return Resolution(
        decisions=tuple(decisions),
        before=before,
        after=state,
        applied=tuple(applied),
        buffered=tuple(added[s] for s in sorted(added)),
        unbuffered=tuple(sorted(removed)),
    )
