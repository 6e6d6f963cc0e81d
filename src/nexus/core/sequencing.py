"""Sequencing and process validation: what to do with one step given its order's state. Pure: no I/O.

`decide(state, event)` answers one event by position (the decisions table); `resolve(state, events,
pending, ...)` folds a batch of one order's events through it, draining buffered successors whenever a
step applies, and returns the new state and the writes to make. The gateway turns that into SQL; the
decision table lives here and only here.

With a `ProcessCatalog`, a step that would apply (arriving in turn, or drained from the buffer) is first
judged by the order's process (`core/process.validate_step`): an unknown type, a step out of turn, a
failed check or an amount above the tenant's limit is REJECTED. A rejected step changes nothing: the order
waits at the same seq for a corrected step (a new event_id), a drained step that is rejected leaves the
buffer and its successors wait, and the same event_id sent again is answered the same way (`rejected`,
remembered by the gateway). Reaching a definition's `max_rejections` aborts the plan
(`policy_violation`) with one notification.
"""

from __future__ import annotations

import dataclasses
import enum
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

from nexus.core.envelope import EventEnvelope
from nexus.core.process import (
    ABORT_STEP,
    STATUS_AFTER,
    AbortCode,
    CompiledProcess,
    OrderStatus,
    ProcessCatalog,
    Verdict,
    validate_step,
)
from nexus.errors import ErrorCode

_POLICY_ABORT_NAMESPACE = uuid.UUID("0b6f2a4e-7c59-4e8e-9a3d-706f6c696379")


class Decision(enum.StrEnum):
    APPLY = "APPLY"
    BUFFER = "BUFFER"
    DUPLICATE = "DUPLICATE"
    DISCARD = "DISCARD"
    TOMBSTONE = "TOMBSTONE"
    PLAN_MISMATCH = "PLAN_MISMATCH"
    DEAD_LETTER = "DEAD_LETTER"
    REJECTED = "REJECTED"


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
    # issue 14: sagas. `effect`: the step whose effect is in flight ({"step", "seq", "status", "attempts"}),
    # or the open saga holding the order; while set, the next step is BUFFER. `past_pivot`: the saga's
    # pivot completed, so an agent's ABORT_PLAN is REJECTED (PAST_PIVOT).
    effect: Mapping[str, Any] | None = None
    past_pivot: bool = False

    @property
    def exists(self) -> bool:
        return self.status is not None


def decide(state: OrderState | None, event: EventEnvelope) -> Decision:
    """The decisions table of DESIGN.md section 4, for one event, by position only."""
    if state is None:
        state = OrderState(event.order_id)
    if state.plan_id is not None and event.plan_id != state.plan_id:
        return Decision.PLAN_MISMATCH
    if state.status == OrderStatus.ABORTED:
        return Decision.DUPLICATE if event.is_abort else Decision.DISCARD
    if event.is_abort:
        if state.status is None:
            return Decision.TOMBSTONE
        return Decision.DUPLICATE if state.status == OrderStatus.COMPLETED else Decision.APPLY
    assert event.seq_id is not None  # guaranteed by the envelope
    if event.seq_id <= state.last_seq or event.seq_id in state.buffered:
        return Decision.DUPLICATE
    if event.seq_id == state.last_seq + 1 and state.effect is None:  # issue 14: an open effect holds it
        return Decision.APPLY
    return Decision.BUFFER


def code_of(decision: Decision) -> ErrorCode | None:
    """The error code a decision carries in API bodies and dead letters, if any (REJECTED: its verdict's)."""
    return ErrorCode.PLAN_MISMATCH if decision is Decision.PLAN_MISMATCH else None


@dataclasses.dataclass(frozen=True, slots=True)
class Applied:
    """A step that changed its order: one notification at `position` in the order's outbox."""

    event: EventEnvelope
    position: int
    drained: bool
    status: str = ""
    """The order's status once the step applied."""
    effect: bool = False
    """issue 14: the step took its seq but waits for its effect: no notification yet, status unchanged."""


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

    def verdict_of(self, event_id: uuid.UUID) -> Verdict | None:
        for rejection in self.rejections:
            if rejection.event.event_id == event_id and not rejection.drained:
                return rejection.verdict
        return None


def policy_abort(event: EventEnvelope, last_seq: int, limit: int) -> EventEnvelope:
    """The ABORT_PLAN the gateway writes when a plan reaches its process's `max_rejections`."""
    return EventEnvelope(
        event_id=uuid.uuid5(_POLICY_ABORT_NAMESPACE, f"{event.order_id}\x00{event.plan_id}"),
        event_type=ABORT_STEP,
        plan_id=event.plan_id,
        order_id=event.order_id,
        timestamp=event.timestamp,
        tenant_id=event.tenant_id,
        correlation_id=event.correlation_id,
        data={
            "reason": f"{limit} steps of this plan were rejected (max_rejections)",
            "abort_code": AbortCode.POLICY_VIOLATION.value,
            "aborted_at_seq": last_seq,
        },
    )


def resolve(
    state: OrderState,
    events: Iterable[EventEnvelope],
    pending: Mapping[int, EventEnvelope],
    *,
    catalog: ProcessCatalog | None = None,
    limits: Mapping[str, Any] | None = None,
    rejected: Mapping[uuid.UUID, Verdict] | None = None,
    effect_done: int | None = None,
) -> Resolution:
    """Fold one order's events, in arrival order, through `decide` and the order's process.

    `pending` holds the order's events buffered before this batch, by seq_id. Whenever a step applies,
    its consecutive buffered successors apply after it, in seq order, each judged as it would apply.
    Without a `catalog` no step is judged (every step in turn applies, as the built-in order's statuses).
    `limits` are the tenant's (CEL `limits`); `rejected` the verdicts already given to event_ids.
    A step with a saga effect takes its seq but keeps the status until the effect succeeds (issue 14);
    `effect_done` is the seq whose effect just succeeded, applied now for good (`complete_effect`).
    """
    before = state
    limits = limits or {}
    rejected = rejected or {}
    waiting: dict[int, EventEnvelope] = dict(pending)
    decisions: list[tuple[EventEnvelope, Decision, OrderState]] = []
    applied: list[Applied] = []
    rejections: list[Rejection] = []
    added: dict[int, EventEnvelope] = {}
    removed: list[int] = []

    def take(seq: int) -> EventEnvelope:
        # Buffered and drained within one batch: never written, so nothing to delete.
        if added.pop(seq, None) is None:
            removed.append(seq)
        return waiting.pop(seq)

    def process_of(current: OrderState, event: EventEnvelope) -> CompiledProcess | None:
        assert catalog is not None
        if current.process is not None:
            return catalog.get(current.process, current.process_version)
        return catalog.get(event.process_name)

    def judge(current: OrderState, event: EventEnvelope) -> Verdict | None:
        if catalog is None:
            return None
        process = process_of(current, event)
        if process is None:
            name = current.process or event.process_name
            return Verdict(ErrorCode.UNKNOWN_STEP, f"unknown process {name!r}: no definition is registered")
        return validate_step(process, current.status, current.facts, event.event_type, event.seq_id, event.data, limits)

    def apply(current: OrderState, event: EventEnvelope, drained: bool) -> OrderState:
        position = current.outbox_count + 1
        process = process_of(current, event) if catalog is not None else None
        deferred = _defer_for_effect(process, current, event, drained, effect_done)  # issue 14
        if deferred is not None:
            applied.append(deferred[0])
            return deferred[1]
        if process is None:
            status = STATUS_AFTER.get(event.event_type, OrderStatus.ABORTED)  # type: ignore[call-overload]
            facts = current.facts
        else:
            status = process.status_after(event.event_type)
            facts = (
                current.facts if event.is_abort else process.facts_after(current.facts, event.event_type, event.data)
            )
        applied.append(Applied(event, position, drained, status))
        return dataclasses.replace(
            current,
            plan_id=event.plan_id,
            status=status,
            last_seq=event.seq_id if event.seq_id is not None else current.last_seq,
            outbox_count=position,
            process=process.name if process is not None else current.process,
            process_version=process.version if process is not None else current.process_version,
            facts=facts,
            effect=None,
        )

    def drop_buffer(current: OrderState) -> OrderState:
        for seq in sorted(waiting):
            take(seq)
        return dataclasses.replace(current, buffered=frozenset())

    def reject(current: OrderState, event: EventEnvelope, verdict: Verdict, drained: bool) -> OrderState:
        rejections.append(Rejection(event, verdict, drained))
        current = dataclasses.replace(current, rejections=current.rejections + 1, plan_id=event.plan_id)
        process = process_of(current, event) if catalog is not None else None
        limit = process.definition.max_rejections if process is not None else None
        if limit is not None and current.rejections >= limit:
            current = apply(current, policy_abort(event, current.last_seq, limit), drained=False)
            current = drop_buffer(current)
        return current

    def after_terminal(current: OrderState, event: EventEnvelope) -> Verdict | None:
        if catalog is None or event.is_abort or current.status in (None, OrderStatus.ABORTED):
            return None
        if current.plan_id is not None and event.plan_id != current.plan_id:
            return None
        process = process_of(current, event)
        assert event.seq_id is not None
        if process is None or not process.is_terminal(current.status) or event.seq_id <= current.last_seq:
            return None
        return Verdict(
            ErrorCode.AFTER_TERMINAL,
            f"order {current.order_id} is {current.status} at seq {current.last_seq}: "
            f"no step may follow a terminal state",
        )

    for event in events:
        known = rejected.get(event.event_id)
        if known is not None:
            rejections.append(Rejection(event, known, replay=True))
            decisions.append((event, Decision.REJECTED, state))
            continue
        terminal_verdict = after_terminal(state, event)
        if terminal_verdict is not None:
            state = reject(state, event, terminal_verdict, drained=False)
            decisions.append((event, Decision.REJECTED, state))
            continue
        decision = decide(state, event)
        pivot_verdict = _past_pivot(state, event, decision)  # issue 14
        if pivot_verdict is not None:
            state = reject(state, event, pivot_verdict, drained=False)
            decisions.append((event, Decision.REJECTED, state))
            continue
        if decision is Decision.TOMBSTONE:
            state = drop_buffer(state)
            state = dataclasses.replace(state, plan_id=event.plan_id, status=OrderStatus.ABORTED, tombstone=True)
        elif decision is Decision.BUFFER:
            assert event.seq_id is not None
            waiting[event.seq_id] = event
            added[event.seq_id] = event
            state = dataclasses.replace(state, plan_id=event.plan_id, buffered=frozenset(waiting))
        elif decision is Decision.APPLY:
            verdict = None if event.is_abort else judge(state, event)
            if verdict is not None:
                decision = Decision.REJECTED
                state = reject(state, event, verdict, drained=False)
            else:
                state = apply(state, event, drained=False)
                if event.is_abort:
                    state = drop_buffer(state)
                else:
                    while (
                        state.status != OrderStatus.ABORTED and state.last_seq + 1 in waiting and state.effect is None
                    ):
                        successor = take(state.last_seq + 1)
                        verdict = judge(state, successor)
                        if verdict is not None:
                            # Out of the buffer and refused: the order waits at this seq for a correction.
                            state = reject(state, successor, verdict, drained=True)
                            break
                        state = apply(state, successor, drained=True)
            state = dataclasses.replace(state, buffered=frozenset(waiting))
        decisions.append((event, decision, state))

    return Resolution(
        decisions=tuple(decisions),
        before=before,
        after=state,
        applied=tuple(applied),
        buffered=tuple(added[s] for s in sorted(added)),
        unbuffered=tuple(sorted(removed)),
        rejections=tuple(rejections),
    )


# --- issue 14: sagas (the effects of steps), see core/saga.py -------------------------------------------


def _defer_for_effect(
    process: CompiledProcess | None,
    current: OrderState,
    event: EventEnvelope,
    drained: bool,
    effect_done: int | None,
) -> tuple[Applied, OrderState] | None:
    """A step whose definition declares an effect takes its seq but keeps the order's status (and writes
    no notification) until the effect succeeds; None for any other step, or once its effect is done."""
    if process is None or event.is_abort or event.seq_id is None or event.seq_id == effect_done:
        return None
    compiled = process.steps.get(event.event_type)
    if compiled is None or compiled.step.effect is None:
        return None
    effect = {"step": str(event.event_type), "seq": event.seq_id, "status": "running", "attempts": 0}
    after = dataclasses.replace(
        current,
        plan_id=event.plan_id,
        last_seq=event.seq_id,
        process=process.name,
        process_version=process.version,
        effect=effect,
    )
    return Applied(event, 0, drained, str(current.status), effect=True), after


def _past_pivot(state: OrderState, event: EventEnvelope, decision: Decision) -> Verdict | None:
    """An agent's ABORT_PLAN once the saga's pivot completed: the saga is committed, the abort refused."""
    # The gateway's own `effect_failed` abort never meets this: it only follows a compensated saga, and
    # a saga whose pivot completed is never compensated.
    if not (event.is_abort and state.past_pivot and decision is Decision.APPLY):
        return None
    return Verdict(
        ErrorCode.PAST_PIVOT,
        f"order {state.order_id}: the saga's pivot completed, its effects are committed and cannot be aborted",
    )


def complete_effect(
    state: OrderState,
    event: EventEnvelope,
    pending: Mapping[int, EventEnvelope],
    *,
    catalog: ProcessCatalog | None,
    limits: Mapping[str, Any] | None = None,
) -> Resolution:
    """The effect of `event` (the step at `state.last_seq`) succeeded: the step applies now for good (its
    status, facts and notification), then its buffered successors drain as they would have."""
    assert event.seq_id is not None
    before = dataclasses.replace(state, effect=None, last_seq=event.seq_id - 1)
    return resolve(before, [event], pending, catalog=catalog, limits=limits, effect_done=event.seq_id)
