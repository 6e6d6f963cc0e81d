"""An order's state and what resolving a batch of its steps decided: the values `core/decide/`
computes and the gateway writes. Pure: no I/O."""

from __future__ import annotations

import dataclasses
import datetime as dt
import uuid
from collections.abc import Mapping
from typing import Any

from nexus.core.envelope import EventEnvelope
from nexus.core.process_model import Verdict
from nexus_wire.codes import Decision


@dataclasses.dataclass(frozen=True, slots=True)
class OrderState:
    """What the gateway knows of one order. `status` is None until the order's first write."""

    order_id: str
    plan_id: str | None = None
    status: str | None = None
    last_seq: int = 0
    buffered: frozenset[int] = frozenset()
    tombstone: bool = False
    outbox_count: int = 0
    process: str | None = None
    """The (process, version) the order is pinned to, from its first applied step."""
    process_version: int | None = None
    facts: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    """What the order's applied steps established (money in minor units): the `order` of CEL checks."""
    rejections: int = 0
    # Sagas. `effect`: the step whose effect is in flight ({"step", "seq", "status", "attempts"}),
    # or the open saga holding the order; while set, the next step is BUFFER. `past_pivot`: the saga's
    # pivot completed, so an agent's ABORT_PLAN is REJECTED (PAST_PIVOT).
    effect: Mapping[str, Any] | None = None
    past_pivot: bool = False
    superseded: frozenset[str] = frozenset()
    """Plans a REPLAN replaced for this order; their later steps are DISCARD PLAN_SUPERSEDED."""
    deadline_at: dt.datetime | None = None
    """When the live plan is aborted (abort_code timeout); None: no deadline, or not live."""
    held: uuid.UUID | None = None
    """The event_id of the step waiting for approval (at seq last_seq + 1), if any."""
    removed: bool = False
    """The order was removed after its retention period: this state is its marker's (`decide/removed.py`)."""

    @property
    def exists(self) -> bool:
        return self.status is not None


@dataclasses.dataclass(frozen=True, slots=True)
class Applied:
    """A step that changed its order: one notification at `position` in the order's outbox."""

    event: EventEnvelope
    position: int
    drained: bool
    status: str = ""
    """The order's status once the step applied."""
    effect: bool = False
    """The step took its seq but waits for its effect: no notification yet, status unchanged."""


@dataclasses.dataclass(frozen=True, slots=True)
class Rejection:
    """A step the order's process refused. `drained`: it came out of the buffer; `replay`: its event_id
    was already rejected before (answered the same, recorded once)."""

    event: EventEnvelope
    verdict: Verdict
    drained: bool = False
    replay: bool = False


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
    """seq_ids to remove from pending_events (drained, rejected when drained, or dropped by an abort)."""
    rejections: tuple[Rejection, ...] = ()
    """Every rejection of this batch, the events' own and those of drained buffered steps."""
    deadlines: Mapping[uuid.UUID, tuple[dt.datetime, bool]] = dataclasses.field(default_factory=dict)
    """The deadline each plan-starting step set (by event_id), and whether it was clipped."""
    held: tuple[tuple[EventEnvelope, bool], ...] = ()
    """Steps newly HELD for approval in this batch, with whether they came out of the buffer."""
    released: tuple[uuid.UUID, ...] = ()
    """Held steps no longer held: approved, denied, or dropped by an abort or a REPLAN."""
    settled: tuple[tuple[uuid.UUID, EventEnvelope], ...] = ()
    """Server-numbered buffered steps DISCARDed because the step before them was refused at its number
    (denied, expired, or REJECTED out of the buffer): (the refused step's event_id, the step)."""

    def verdict_of(self, event_id: uuid.UUID) -> Verdict | None:
        for rejection in self.rejections:
            if rejection.event.event_id == event_id and not rejection.drained:
                return rejection.verdict
        return None
