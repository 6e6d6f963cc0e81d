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

Plan swap (issue 13): a `REPLAN` (no seq_id; its `plan_id` the plan replaced, `data.new_plan_id` the
next) on a live order APPLYs with one notification: the order keeps its status and last_seq, its plan
becomes the new one (which continues at last_seq + 1), the old plan joins `superseded`, and the old plan's
buffered steps are dropped. A later step of a superseded plan is DISCARD with code PLAN_SUPERSEDED (an
expected straggler, not a dead letter); a step of any other plan stays PLAN_MISMATCH. A REPLAN on a
terminal order, or one whose new plan is already the order's plan (a resend), is a DUPLICATE; a REPLAN
before the order exists has nothing to replace: DISCARD.

Deadlines (issue 13): a plan's first step (or its REPLAN) sets the order's `deadline_at`, from the
envelope's `deadline` clipped to the process's `deadline.max_s` from `now`, or `now + deadline.default_s`.
Once `now` is past it on a live order, the gateway's own ABORT_PLAN (`deadline_abort`, abort_code
`timeout`, one id per order and plan) applies before anything else of the batch, so later steps DISCARD.
The deadline sweeper submits that same abort; arriving when the order is not (or no longer) overdue and
live, it is a DUPLICATE, so any number of sweepers abort a plan once.

Approval (issue 13): a step that would apply, passes its checks and needs a person's approval
(`needs_approval`) is HELD: nothing applied, the order's `held` names it, its seq is taken (another step
at that seq is a DUPLICATE; the same event_id resent is HELD again), and successors wait in the buffer.
`resolve(..., approvals={event_id: None})` applies an approved held step in order and drains its
successors; `approvals={event_id: verdict}` rejects it (APPROVAL_DENIED), and the order waits at the same
seq for a corrected step. An abort or a REPLAN drops the held step with the buffer.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

from nexus.core.envelope import EventEnvelope
from nexus.core.order_state import Applied, Decision, OrderState, Rejection, Resolution
from nexus.core.process import (
    ABORT_STEP,
    STATUS_AFTER,
    AbortCode,
    CompiledProcess,
    OrderStatus,
    ProcessCatalog,
    Verdict,
    needs_approval,
    validate_step,
)
from nexus.errors import ErrorCode

# The values resolve() works on live in core/order_state.py; importers find them here too.
__all__ = [
    "Applied",
    "Decision",
    "OrderState",
    "Rejection",
    "Resolution",
    "code_of",
    "complete_effect",
    "deadline_abort",
    "deadline_abort_id",
    "decide",
    "is_deadline_abort",
    "policy_abort",
    "resolve",
]

_POLICY_ABORT_NAMESPACE = uuid.UUID("0b6f2a4e-7c59-4e8e-9a3d-706f6c696379")
_DEADLINE_ABORT_NAMESPACE = uuid.UUID("5c1d7e0a-3b8f-4d52-a1e6-646561646c6e")


def decide(state: OrderState | None, event: EventEnvelope) -> Decision:
    """The decisions table of DESIGN.md section 4, for one event, by position only."""
    if state is None:
        state = OrderState(event.order_id)
    if event.is_replan:
        return _decide_replan(state, event)
    if state.plan_id is not None and event.plan_id != state.plan_id:
        return Decision.DISCARD if event.plan_id in state.superseded else Decision.PLAN_MISMATCH
    if state.status == OrderStatus.ABORTED:
        return Decision.DUPLICATE if event.is_abort else Decision.DISCARD
    if event.is_abort:
        if state.status is None:
            return Decision.TOMBSTONE
        return Decision.DUPLICATE if state.status == OrderStatus.COMPLETED else Decision.APPLY
    assert event.seq_id is not None  # guaranteed by the envelope
    if event.seq_id <= state.last_seq or event.seq_id in state.buffered:
        return Decision.DUPLICATE
    if state.held is not None and event.seq_id == state.last_seq + 1:
        return Decision.HELD if event.event_id == state.held else Decision.DUPLICATE
    if event.seq_id == state.last_seq + 1 and state.effect is None:  # issue 14: an open effect holds it
        return Decision.APPLY
    return Decision.BUFFER


def _decide_replan(state: OrderState, event: EventEnvelope) -> Decision:
    if event.new_plan_id == state.plan_id:
        return Decision.DUPLICATE  # names the current plan: a resend of an applied REPLAN, or a no-op
    if state.plan_id is not None and event.plan_id != state.plan_id:
        return Decision.DISCARD if event.plan_id in state.superseded else Decision.PLAN_MISMATCH
    if state.status is None:
        return Decision.DISCARD  # nothing to replace yet
    if state.status in (OrderStatus.ABORTED, OrderStatus.COMPLETED):
        return Decision.DUPLICATE
    return Decision.APPLY


def code_of(
    decision: Decision, event: EventEnvelope | None = None, state: OrderState | None = None
) -> ErrorCode | None:
    """The error code a decision carries in API bodies and dead letters, if any (REJECTED: its verdict's).

    `event` and the order's `state` after it tell a superseded plan's straggler (DISCARD PLAN_SUPERSEDED)."""
    if decision is Decision.PLAN_MISMATCH:
        return ErrorCode.PLAN_MISMATCH
    if (
        decision is Decision.DISCARD
        and event is not None
        and state is not None
        and event.plan_id in state.superseded
        and event.plan_id != state.plan_id
    ):
        return ErrorCode.PLAN_SUPERSEDED
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


def deadline_abort_id(order_id: str, plan_id: str) -> uuid.UUID:
    """The one id of the timeout abort of a plan of an order: two sweepers write the same step."""
    return uuid.uuid5(_DEADLINE_ABORT_NAMESPACE, f"{order_id}\x00{plan_id}")


def deadline_abort(state: OrderState, tenant_id: str, now: dt.datetime) -> EventEnvelope:
    """The ABORT_PLAN the gateway writes when a live plan's deadline passed (abort_code timeout)."""
    assert state.plan_id is not None
    return EventEnvelope(
        event_id=deadline_abort_id(state.order_id, state.plan_id),
        event_type=ABORT_STEP,
        plan_id=state.plan_id,
        order_id=state.order_id,
        timestamp=now,
        tenant_id=tenant_id,
        data={
            "reason": "the plan's deadline passed",
            "abort_code": AbortCode.TIMEOUT.value,
            "aborted_at_seq": state.last_seq,
        },
    )


def is_deadline_abort(event: EventEnvelope) -> bool:
    return event.is_abort and event.event_id == deadline_abort_id(event.order_id, event.plan_id)


def resolve(
    state: OrderState,
    events: Iterable[EventEnvelope],
    pending: Mapping[int, EventEnvelope],
    *,
    catalog: ProcessCatalog | None = None,
    limits: Mapping[str, Any] | None = None,
    rejected: Mapping[uuid.UUID, Verdict] | None = None,
    effect_done: int | None = None,
    now: dt.datetime | None = None,
    approvals: Mapping[uuid.UUID, Verdict | None] | None = None,
) -> Resolution:
    """Fold one order's events, in arrival order, through `decide` and the order's process.

    `pending` holds the order's events buffered before this batch, by seq_id. Whenever a step applies,
    its consecutive buffered successors apply after it, in seq order, each judged as it would apply.
    Without a `catalog` no step is judged (every step in turn applies, as the built-in order's statuses).
    `limits` are the tenant's (CEL `limits`); `rejected` the verdicts already given to event_ids.
    A step with a saga effect takes its seq but keeps the status until the effect succeeds (issue 14);
    `effect_done` is the seq whose effect just succeeded, applied now for good (`complete_effect`).
    `now` (issue 13): the clock of deadlines; None: deadlines are neither set nor enforced.
    `approvals` (issue 13): held steps decided by a person: None approves (the step applies in order),
    a verdict denies (REJECTED with it).
    """
    approvals = approvals or {}
    held_now: list[tuple[EventEnvelope, bool]] = []
    released: list[uuid.UUID] = []
    before = state
    limits = limits or {}
    rejected = rejected or {}
    waiting: dict[int, EventEnvelope] = dict(pending)
    decisions: list[tuple[EventEnvelope, Decision, OrderState]] = []
    applied: list[Applied] = []
    rejections: list[Rejection] = []
    added: dict[int, EventEnvelope] = {}
    removed: list[int] = []
    deadlines: dict[uuid.UUID, tuple[dt.datetime, bool]] = {}

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
            if current.status is None:  # a plan's first step with an effect still sets its deadline
                return dataclasses.replace(deferred[1], deadline_at=set_deadline(event, process))
            return deferred[1]
        if event.is_replan:
            status, facts = current.status or "", current.facts
        elif process is None:
            status = STATUS_AFTER.get(event.event_type, OrderStatus.ABORTED)  # type: ignore[call-overload]
            facts = current.facts
        else:
            status = process.status_after(event.event_type)
            facts = (
                current.facts if event.is_abort else process.facts_after(current.facts, event.event_type, event.data)
            )
        applied.append(Applied(event, position, drained, status))
        deadline_at = current.deadline_at
        if event.is_replan or current.status is None:
            deadline_at = set_deadline(event, process)
        if event.is_abort or (process is not None and process.is_terminal(status)) or status == OrderStatus.COMPLETED:
            deadline_at = None
        elif process is not None and _is_pivot(process, event):
            deadline_at = None  # issue 14: the saga's pivot completed: its plan can no longer time out
        return dataclasses.replace(
            current,
            deadline_at=deadline_at,
            plan_id=event.new_plan_id or event.plan_id,
            superseded=current.superseded | {event.plan_id} if event.is_replan else current.superseded,
            status=status,
            last_seq=event.seq_id if event.seq_id is not None else current.last_seq,
            outbox_count=position,
            process=process.name if process is not None else current.process,
            process_version=process.version if process is not None else current.process_version,
            facts=facts,
            effect=current.effect if event.is_replan else None,  # a REPLAN leaves a running effect running
        )

    def set_deadline(event: EventEnvelope, process: CompiledProcess | None) -> dt.datetime | None:
        if now is None or before.past_pivot:
            return None
        limits_of = process.definition.deadline if process is not None else None
        wanted = event.deadline
        if wanted is None and limits_of is not None and limits_of.default_s is not None:
            wanted = now + dt.timedelta(seconds=limits_of.default_s)
        if wanted is None:
            return None
        clipped = False
        if limits_of is not None and limits_of.max_s is not None:
            latest = now + dt.timedelta(seconds=limits_of.max_s)
            if wanted > latest:
                wanted, clipped = latest, True
        deadlines[event.event_id] = (wanted, clipped)
        return wanted

    def overdue(current: OrderState) -> bool:
        return (
            now is not None
            and current.deadline_at is not None
            and current.deadline_at <= now
            and current.status not in (None, OrderStatus.ABORTED, OrderStatus.COMPLETED)
            and not current.past_pivot  # issue 14: a saga past its pivot is committed, no deadline applies
        )

    def drop_buffer(current: OrderState) -> OrderState:
        for seq in sorted(waiting):
            take(seq)
        if current.held is not None:
            released.append(current.held)
        return dataclasses.replace(current, buffered=frozenset(), held=None)

    def hold_or_apply(current: OrderState, event: EventEnvelope, drained: bool) -> tuple[OrderState, bool]:
        """Apply a judged step, or hold it when it needs approval (and was not approved): (state, held)."""
        if catalog is not None and event.event_id not in approvals:
            process = process_of(current, event)
            if process is not None and needs_approval(
                process, current.facts, event.event_type, event.seq_id, event.data, limits
            ):
                held_now.append((event, drained))
                return dataclasses.replace(current, held=event.event_id, plan_id=event.plan_id), True
        if current.held == event.event_id:
            released.append(event.event_id)
            current = dataclasses.replace(current, held=None)
        return apply(current, event, drained), False

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
        if catalog is None or event.is_abort or event.is_replan or current.status in (None, OrderStatus.ABORTED):
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

    def drain(current: OrderState) -> OrderState:
        while current.status != OrderStatus.ABORTED and current.last_seq + 1 in waiting and current.effect is None:
            successor = take(current.last_seq + 1)
            verdict = judge(current, successor)
            if verdict is not None:
                # Out of the buffer and refused: the order waits at this seq for a correction.
                return reject(current, successor, verdict, drained=True)
            current, held = hold_or_apply(current, successor, drained=True)
            if held:
                break
        return current

    def apply_and_drain(current: OrderState, event: EventEnvelope) -> OrderState:
        released.append(event.event_id)
        current = apply(dataclasses.replace(current, held=None), event, drained=False)
        return drain(current)

    for event in events:
        if is_deadline_abort(event) and not overdue(state):
            decisions.append((event, Decision.DUPLICATE, state))  # a sweeper's abort: not (or no longer) due
            continue
        if overdue(state) and not is_deadline_abort(event):
            assert now is not None
            state = drop_buffer(apply(state, deadline_abort(state, event.tenant_id, now), drained=False))
            state = dataclasses.replace(state, buffered=frozenset(waiting))
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
        if decision is Decision.APPLY and event.is_replan and catalog is not None:
            process = process_of(state, event)
            if process is not None and process.is_terminal(state.status):
                decision = Decision.DUPLICATE
        if decision is Decision.TOMBSTONE:
            state = drop_buffer(state)
            state = dataclasses.replace(state, plan_id=event.plan_id, status=OrderStatus.ABORTED, tombstone=True)
        elif decision is Decision.BUFFER:
            assert event.seq_id is not None
            waiting[event.seq_id] = event
            added[event.seq_id] = event
            state = dataclasses.replace(state, plan_id=event.plan_id, buffered=frozenset(waiting))
        elif decision in (Decision.HELD, Decision.APPLY) and event.event_id in approvals:
            denial = approvals[event.event_id]
            if denial is not None:
                decision = Decision.REJECTED
                released.append(event.event_id)
                state = reject(dataclasses.replace(state, held=None), event, denial, drained=False)
            else:
                decision = Decision.APPLY
                state = apply_and_drain(state, event)
            state = dataclasses.replace(state, buffered=frozenset(waiting))
        elif decision is Decision.APPLY:
            verdict = None if event.is_abort or event.is_replan else judge(state, event)
            if verdict is not None:
                decision = Decision.REJECTED
                state = reject(state, event, verdict, drained=False)
            elif event.is_abort or event.is_replan:
                state = drop_buffer(apply(state, event, drained=False))
            else:
                state, held = hold_or_apply(state, event, drained=False)
                if held:
                    decision = Decision.HELD
                else:
                    state = drain(state)
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
        deadlines=deadlines,
        held=tuple(held_now),
        released=tuple(released),
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
    # issue 13: a REPLAN may have come while the effect ran; the step took its seq before it, so it is kept
    # (a REPLAN keeps completed effects) and applies under its own plan, and the new plan stays the order's.
    before = dataclasses.replace(state, effect=None, last_seq=event.seq_id - 1, plan_id=event.plan_id)
    resolution = resolve(before, [event], pending, catalog=catalog, limits=limits, effect_done=event.seq_id)
    if state.plan_id is None or resolution.after.plan_id != event.plan_id or state.plan_id == event.plan_id:
        return resolution
    after = dataclasses.replace(resolution.after, plan_id=state.plan_id)
    return dataclasses.replace(resolution, after=after)


def _is_pivot(process: CompiledProcess, event: EventEnvelope) -> bool:
    compiled = process.steps.get(event.event_type)
    return compiled is not None and compiled.step.pivot
