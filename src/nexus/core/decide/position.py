"""Sequencing by position and the reorder buffer: what to do with one step given where its order is.

| situation                                             | decision      | effect                                    |
|-------------------------------------------------------|---------------|-------------------------------------------|
| seq == last_seq + 1, same plan, no effect open         | APPLY         | applied, buffered successors drained      |
| seq > last_seq + 1 (or the next while an effect runs) | BUFFER        | kept in the reorder buffer                |
| seq <= last_seq, or already buffered                  | DUPLICATE     | nothing                                   |
| seq == last_seq + 1 while another step is HELD        | DUPLICATE     | nothing (the held step's own id: HELD)    |
| any step of an aborted order                          | DISCARD       | nothing (ABORT_PLAN again: DUPLICATE)     |
| ABORT_PLAN on a live order                            | APPLY         | aborted, buffer dropped                   |
| ABORT_PLAN before any step                            | TOMBSTONE     | aborted tombstone, buffer dropped         |
| ABORT_PLAN on a terminal order                        | DUPLICATE     | nothing                                   |
| a step of another plan                                | PLAN_MISMATCH | dead letter (a superseded plan: replan.py)|

`terminal` is the order's process's terminal states (from its definition). REPLAN steps are decided in
`replan.py`. Pure: no I/O.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping

from nexus.core.decide.replan import decide_replan, foreign_plan
from nexus.core.envelope import EventEnvelope
from nexus.core.order_state import OrderState
from nexus.core.process_model import ABORTED
from nexus_wire.codes import Decision

DEFAULT_TERMINAL: frozenset[str] = frozenset({ABORTED})
"""Terminal states when the order's process is not known: only the built-in `aborted`."""


def decide(state: OrderState | None, event: EventEnvelope, terminal: Collection[str] = DEFAULT_TERMINAL) -> Decision:
    """The table above, for one event, by position only."""
    if state is None:
        state = OrderState(event.order_id)
    if event.is_replan:
        return decide_replan(state, event, terminal)
    foreign = foreign_plan(state, event)
    if foreign is not None:
        return foreign
    if state.status == ABORTED:
        return Decision.DUPLICATE if event.is_abort else Decision.DISCARD
    if event.is_abort:
        if state.status is None:
            return Decision.TOMBSTONE
        return Decision.DUPLICATE if state.status in terminal else Decision.APPLY
    assert event.seq_id is not None  # guaranteed by the envelope
    if event.seq_id <= state.last_seq or event.seq_id in state.buffered:
        return Decision.DUPLICATE
    if state.held is not None and event.seq_id == state.last_seq + 1:
        return Decision.HELD if event.event_id == state.held else Decision.DUPLICATE
    if event.seq_id == state.last_seq + 1 and state.effect is None:  # an open effect holds the next step
        return Decision.APPLY
    return Decision.BUFFER


@dataclasses.dataclass(slots=True)
class ReorderBuffer:
    """One order's buffered steps during its batch: those read (`pending`) and those added. Tracks what to
    write: steps added and not drained within the batch, and seqs to delete of those read."""

    waiting: dict[int, EventEnvelope]
    added: dict[int, EventEnvelope] = dataclasses.field(default_factory=dict)
    removed: list[int] = dataclasses.field(default_factory=list)

    @classmethod
    def of(cls, pending: Mapping[int, EventEnvelope]) -> ReorderBuffer:
        return cls(dict(pending))

    def put(self, event: EventEnvelope) -> None:
        assert event.seq_id is not None
        self.waiting[event.seq_id] = event
        self.added[event.seq_id] = event

    def take(self, seq: int) -> EventEnvelope:
        # Buffered and drained within one batch: never written, so nothing to delete.
        if self.added.pop(seq, None) is None:
            self.removed.append(seq)
        return self.waiting.pop(seq)

    def drop_all(self) -> None:
        for seq in sorted(self.waiting):
            self.take(seq)

    def seqs(self) -> frozenset[int]:
        return frozenset(self.waiting)

    def to_add(self) -> tuple[EventEnvelope, ...]:
        return tuple(self.added[s] for s in sorted(self.added))
