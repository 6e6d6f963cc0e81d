"""The fold of one order's steps in one batch: each step through the deciders, in arrival order.

The deciders each hold their part of the decision table: `position` (sequencing, the reorder buffer),
`replan` (plan swap), `validation` (the process), `approvals`, `deadlines`, `effects` (saga steps),
`rejections` (max_rejections). This module only runs them, in this order, for each step:

0. an order removed after its retention period: its marker decides alone (`removed`);
1. a deadline passed on a live plan: the gateway's timeout abort applies first (`deadlines`);
2. an event_id already rejected: REJECTED again (`rejections`);
3. a step past a terminal state: REJECTED AFTER_TERMINAL (`validation`);
4. its position decides (`position`, `replan`); an agent's abort past a saga's pivot: REJECTED (`effects`);
5. a step that would apply is judged by its process, then held for approval or applied (`validation`,
   `approvals`); an applied step with an effect keeps the order's status (`effects`); whenever a step
   applies, its consecutive buffered successors apply after it, each judged as it would apply.

Pure: no I/O; the clock comes in `OrderContext.now`.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from nexus.core.decide.approvals import must_hold, settle_numbered
from nexus.core.decide.deadlines import deadline_abort, deadline_for, is_deadline_abort, overdue, unstarted_overdue
from nexus.core.decide.effects import defer_for_effect, is_pivot, past_pivot
from nexus.core.decide.position import DEFAULT_TERMINAL, ReorderBuffer, decide
from nexus.core.decide.rejections import limit_reached, policy_abort
from nexus.core.decide.removed import decide_removed
from nexus.core.decide.validation import StepChecks, after_terminal
from nexus.core.envelope import EventEnvelope
from nexus.core.order_state import Applied, OrderState, Rejection, Resolution
from nexus.core.process_model import ABORTED, CompiledProcess, ProcessCatalog, Verdict
from nexus_wire.codes import Decision

_CHECKED = StepChecks()

Precheck = Callable[[EventEnvelope], "Verdict | None"]


@dataclasses.dataclass(frozen=True, slots=True)
class OrderContext:
    """What deciding one order's steps needs besides the steps: the processes and how they judge, the
    tenant's limits, what was decided before (rejected event_ids, a person's answers, an effect that just
    succeeded) and the clock."""

    catalog: ProcessCatalog | None = None
    checks: StepChecks = _CHECKED
    limits: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    rejected: Mapping[uuid.UUID, Verdict] = dataclasses.field(default_factory=dict)
    effect_done: int | None = None
    now: dt.datetime | None = None
    approvals: Mapping[uuid.UUID, Verdict | None] = dataclasses.field(default_factory=dict)
    prechecks: tuple[Precheck, ...] = ()
    """Extension point: per-step limits (e.g. `max_list_items`); the first verdict makes the step
    REJECTED with it, before its position is looked at."""
    numbered: frozenset[uuid.UUID] = frozenset()
    """The server-numbered steps (by event_id) among the order's buffered ones and this batch's: a step
    denied, expired or refused out of the buffer settles them (`approvals.settle_numbered`)."""
    data_checked: Mapping[uuid.UUID, tuple[EventEnvelope, CompiledProcess]] = dataclasses.field(default_factory=dict)
    """The steps of this batch whose data passed their process's schema on arrival (`data_check`), by event_id:
    that very envelope and that process. Judged by the same process, the same envelope's data is not checked
    again; any other step (buffered before, numbered in the fold, or judged by another process) is."""


class OrderFold:
    """Folds one order's steps; `result()` is the frozen `Resolution`. Lives for one order of one batch."""

    def __init__(self, state: OrderState, pending: Mapping[int, EventEnvelope], ctx: OrderContext) -> None:
        self.ctx = ctx
        self.before = self.state = state
        self.buffer = ReorderBuffer.of(pending)
        self.decisions: list[tuple[EventEnvelope, Decision, OrderState]] = []
        self.applied: list[Applied] = []
        self.rejections: list[Rejection] = []
        self.deadlines: dict[uuid.UUID, tuple[dt.datetime, bool]] = {}
        self.held_now: list[tuple[EventEnvelope, bool]] = []
        self.released: list[uuid.UUID] = []
        self.settled: list[tuple[uuid.UUID, EventEnvelope]] = []

    def result(self) -> Resolution:
        return Resolution(
            decisions=tuple(self.decisions),
            before=self.before,
            after=self.state,
            applied=tuple(self.applied),
            buffered=self.buffer.to_add(),
            unbuffered=tuple(sorted(self.buffer.removed)),
            rejections=tuple(self.rejections),
            deadlines=self.deadlines,
            held=tuple(self.held_now),
            released=tuple(self.released),
            settled=tuple(self.settled),
        )

    # --- one arriving step --------------------------------------------------------------------------

    def step(self, event: EventEnvelope) -> None:
        state = self.state
        if state.removed:  # 0. an order removed after its retention: its marker decides (`removed`)
            self.decisions.append((event, decide_removed(state, event), state))
            return
        due = self._overdue(state)
        if is_deadline_abort(event) and not (due or unstarted_overdue(state, self.ctx.now)):
            self.decisions.append((event, Decision.DUPLICATE, state))  # a sweeper's abort, not (now) due
            return
        if due and not is_deadline_abort(event):
            assert self.ctx.now is not None
            state = self._drop_buffer(self._apply(state, deadline_abort(state, event.tenant_id, self.ctx.now), False))
            state = dataclasses.replace(state, buffered=self.buffer.seqs())
        decision, self.state = self._decide(state, event)
        self.decisions.append((event, decision, self.state))

    def _decide(self, state: OrderState, event: EventEnvelope) -> tuple[Decision, OrderState]:
        known = self.ctx.rejected.get(event.event_id)
        if known is not None:
            self.rejections.append(Rejection(event, known, replay=True))
            return Decision.REJECTED, state
        for check in self.ctx.prechecks:
            verdict = check(event)
            if verdict is not None:
                return Decision.REJECTED, self._reject(state, event, verdict, drained=False)
        verdict = self._after_terminal(state, event)
        if verdict is not None:
            return Decision.REJECTED, self._reject(state, event, verdict, drained=False)
        decision = decide(state, event, self._terminal(state, event))
        verdict = past_pivot(state, event, decision)
        if verdict is not None:
            return Decision.REJECTED, self._reject(state, event, verdict, drained=False)
        if decision is Decision.APPLY and event.is_replan and self.ctx.catalog is not None:
            process = self._process(state, event)
            if process is not None and process.is_terminal(state.status):
                decision = Decision.DUPLICATE
        return self._act(state, event, decision)

    def _act(self, state: OrderState, event: EventEnvelope, decision: Decision) -> tuple[Decision, OrderState]:
        if decision is Decision.TOMBSTONE:
            state = self._drop_buffer(state)
            return decision, dataclasses.replace(
                state, plan_id=event.plan_id, status=ABORTED, tombstone=True, deadline_at=None
            )
        if decision is Decision.BUFFER:
            self.buffer.put(event)
            return decision, dataclasses.replace(state, plan_id=event.plan_id, buffered=self.buffer.seqs())
        if decision in (Decision.HELD, Decision.APPLY) and event.event_id in self.ctx.approvals:
            decision, state = self._answered(state, event)
        elif decision is Decision.APPLY:
            decision, state = self._apply_arriving(state, event)
        else:
            return decision, state
        return decision, self._with_buffer(state)

    def _answered(self, state: OrderState, event: EventEnvelope) -> tuple[Decision, OrderState]:
        """A held step a person answered: denied, REJECTED with the answer; approved, applied and drained."""
        denial = self.ctx.approvals[event.event_id]
        self.released.append(event.event_id)
        if denial is not None:
            self._settle(event)
            return Decision.REJECTED, self._reject(dataclasses.replace(state, held=None), event, denial, False)
        state = self._apply(dataclasses.replace(state, held=None), event, drained=False)
        return Decision.APPLY, self._drain(state)

    def _apply_arriving(self, state: OrderState, event: EventEnvelope) -> tuple[Decision, OrderState]:
        if event.is_abort or event.is_replan:
            return Decision.APPLY, self._drop_buffer(self._apply(state, event, drained=False))
        verdict = self._judge(state, event)
        if verdict is not None:
            return Decision.REJECTED, self._reject(state, event, verdict, drained=False)
        state, held = self._hold_or_apply(state, event, drained=False)
        if held:
            return Decision.HELD, state
        return Decision.APPLY, self._drain(state)

    # --- the deciders, bound to this order ----------------------------------------------------------

    def _process(self, current: OrderState, event: EventEnvelope) -> CompiledProcess | None:
        catalog = self.ctx.catalog
        if catalog is None:
            return None
        if current.process is not None:
            return catalog.get(current.process, current.process_version)
        return catalog.get(event.process_name)

    def _terminal(self, state: OrderState, event: EventEnvelope | None) -> frozenset[str]:
        """The terminal states of the order's process, from its definition (`aborted` included)."""
        catalog = self.ctx.catalog
        if catalog is None:
            return DEFAULT_TERMINAL
        if state.process is not None:
            process = catalog.get(state.process, state.process_version)
        else:
            process = catalog.get(event.process_name) if event is not None else None
        return process.terminal_states if process is not None else DEFAULT_TERMINAL

    def _overdue(self, state: OrderState) -> bool:
        if state.deadline_at is None:
            return False
        return overdue(state, self.ctx.now, self._terminal(state, None))

    def _judge(self, current: OrderState, event: EventEnvelope) -> Verdict | None:
        if self.ctx.catalog is None:
            return None
        process = self._process(current, event)
        arrival = self.ctx.data_checked.get(event.event_id)
        checked = arrival is not None and arrival[0] is event and arrival[1] is process
        return self.ctx.checks.verdict(
            process, current.process or event.process_name, current.status, current.facts, event.event_type,
            event.seq_id, event.data, self.ctx.limits, data_checked=checked,
        )  # fmt: skip

    def _after_terminal(self, current: OrderState, event: EventEnvelope) -> Verdict | None:
        if self.ctx.catalog is None or not self.ctx.checks.checks or event.is_abort or event.is_replan:
            return None
        if current.status in (None, ABORTED) or (current.plan_id is not None and event.plan_id != current.plan_id):
            return None
        process = self._process(current, event)
        return after_terminal(process, current.order_id, current.status, current.last_seq, event.seq_id)

    def _reject(self, current: OrderState, event: EventEnvelope, verdict: Verdict, drained: bool) -> OrderState:
        self.rejections.append(Rejection(event, verdict, drained))
        if current.status is not None and current.status in self._terminal(current, event):
            return dataclasses.replace(current, plan_id=event.plan_id)  # a finished plan counts no rejection
        current = dataclasses.replace(current, rejections=current.rejections + 1, plan_id=event.plan_id)
        limit = limit_reached(self._process(current, event), current.rejections)
        if limit is not None:
            current = self._apply(current, policy_abort(event, current.last_seq, limit), drained=False)
            current = self._drop_buffer(current)
        return current

    def _hold_or_apply(self, current: OrderState, event: EventEnvelope, drained: bool) -> tuple[OrderState, bool]:
        """Apply a judged step, or hold it when it needs approval (and was not answered): (state, held)."""
        if self.ctx.checks.checks and must_hold(
            self._process(current, event), current.facts, event, self.ctx.limits, self.ctx.approvals
        ):
            self.held_now.append((event, drained))
            return dataclasses.replace(current, held=event.event_id, plan_id=event.plan_id), True
        if current.held == event.event_id:
            self.released.append(event.event_id)
            current = dataclasses.replace(current, held=None)
        return self._apply(current, event, drained), False

    def _drain(self, current: OrderState) -> OrderState:
        waiting = self.buffer.waiting
        while current.status != ABORTED and current.last_seq + 1 in waiting and current.effect is None:
            successor = self.buffer.take(current.last_seq + 1)
            verdict = self._judge(current, successor)
            if verdict is not None:
                # Out of the buffer and refused: the order waits at this seq for a correction.
                self._settle(successor)
                return self._reject(current, successor, verdict, drained=True)
            current, held = self._hold_or_apply(current, successor, drained=True)
            if held:
                break
        return current

    def _settle(self, refused: EventEnvelope) -> None:
        """A step refused at its number: the server-numbered steps buffered after it leave the buffer."""
        for step in settle_numbered(self.buffer, refused, self.ctx.numbered):
            self.settled.append((refused.event_id, step))

    def _with_buffer(self, current: OrderState) -> OrderState:
        seqs = self.buffer.seqs()
        return current if seqs == current.buffered else dataclasses.replace(current, buffered=seqs)

    def _drop_buffer(self, current: OrderState) -> OrderState:
        self.buffer.drop_all()
        if current.held is not None:
            self.released.append(current.held)
        return dataclasses.replace(current, buffered=frozenset(), held=None)

    # --- applying -------------------------------------------------------------------------------------

    def _apply(self, current: OrderState, event: EventEnvelope, drained: bool) -> OrderState:
        position = current.outbox_count + 1
        process = self._process(current, event)
        deferred = defer_for_effect(process, current, event, drained, self.ctx.effect_done)
        if deferred is not None:
            self.applied.append(deferred[0])
            if current.status is None:  # a plan's first step with an effect still sets its deadline
                return dataclasses.replace(deferred[1], deadline_at=self._set_deadline(event, process))
            return deferred[1]
        status, facts = self._outcome(current, event, process)
        self.applied.append(Applied(event, position, drained, status))
        return dataclasses.replace(
            current,
            deadline_at=self._deadline_after(current, event, process, status),
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

    def _outcome(
        self, current: OrderState, event: EventEnvelope, process: CompiledProcess | None
    ) -> tuple[str, Mapping[str, Any]]:
        """The order's status and facts once `event` applied."""
        if event.is_replan:
            return current.status or "", current.facts
        if process is None:
            return ABORTED, current.facts  # no process knows the step: nothing but an abort can follow
        if event.is_abort:
            return process.status_after(event.event_type), current.facts
        return process.status_after(event.event_type), process.facts_after(current.facts, event.event_type, event.data)

    def _deadline_after(
        self, current: OrderState, event: EventEnvelope, process: CompiledProcess | None, status: str
    ) -> dt.datetime | None:
        deadline_at = current.deadline_at
        if event.is_replan or current.status is None:
            deadline_at = self._set_deadline(event, process)
        terminal = process.is_terminal(status) if process is not None else status in DEFAULT_TERMINAL
        if event.is_abort or terminal:
            return None
        if process is not None and is_pivot(process, event):
            return None  # the saga's pivot completed: its plan can no longer time out
        return deadline_at

    def _set_deadline(self, event: EventEnvelope, process: CompiledProcess | None) -> dt.datetime | None:
        found = deadline_for(event, process, self.ctx.now, self.before.past_pivot)
        if found is None:
            return None
        self.deadlines[event.event_id] = found
        return found[0]


def resolve(
    state: OrderState, events: Iterable[EventEnvelope], pending: Mapping[int, EventEnvelope], ctx: OrderContext
) -> Resolution:
    """Fold one order's events, in arrival order (see the module docstring)."""
    fold = OrderFold(state, pending, ctx)
    for event in events:
        fold.step(event)
    return fold.result()


def complete_effect(
    state: OrderState, event: EventEnvelope, pending: Mapping[int, EventEnvelope], ctx: OrderContext
) -> Resolution:
    """The effect of `event` (the step at `state.last_seq`) succeeded: the step applies now for good (its
    status, facts and notification), then its buffered successors drain as they would have."""
    assert event.seq_id is not None
    # A REPLAN may have come while the effect ran; the step took its seq before it, so it is kept (a
    # REPLAN keeps completed effects) and applies under its own plan, and the new plan stays the order's.
    before = dataclasses.replace(state, effect=None, last_seq=event.seq_id - 1, plan_id=event.plan_id)
    resolution = resolve(before, [event], pending, dataclasses.replace(ctx, effect_done=event.seq_id))
    if state.plan_id is None or resolution.after.plan_id != event.plan_id or state.plan_id == event.plan_id:
        return resolution
    return dataclasses.replace(resolution, after=dataclasses.replace(resolution.after, plan_id=state.plan_id))
