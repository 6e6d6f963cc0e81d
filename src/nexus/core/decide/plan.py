"""The batch fold: every item of one `Gateway.submit` through the deciders, into one frozen `BatchPlan`.

The gateway locks the batch's orders, reads them (`BatchReads`), calls `plan_batch`, and writes the plan:
the decision table is in the deciders (`core/decide/*.py`), and nothing decides outside the core.

Extension points, for what later work adds to every step (each documented where it plugs in):

* `Parts.prechecks` (`OrderContext.prechecks`): per-step limits (e.g. `max_list_items`): a verdict makes
  the step REJECTED with it before sequencing;
* `Incoming.actor`: who proposed each item; it reaches the decision log's entries of that item and of what
  it caused (`log.resolution_entries`); `Incoming.actor_name`, the name of the key it stands for, beside
  each of those entries (`Entry.actor_name`, outside the hash).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import uuid
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from nexus.core import wording
from nexus.core.actors import SYSTEM_SAGA
from nexus.core.audit_chain import Entry
from nexus.core.decide.answers import Outcome, answer
from nexus.core.decide.data_check import arrival_data, invalid_data_entry
from nexus.core.decide.effects import effect_outcome_stale
from nexus.core.decide.expiry import Expiry, expired_rows
from nexus.core.decide.items import EffectOutcome, Incoming, IngressKind, order_key
from nexus.core.decide.log import DecisionLog, ingress_entry
from nexus.core.decide.numbering import FirstVerdictRow, NumberingReads, OrderNumbering, Step, resolve_numbered
from nexus.core.decide.order import OrderContext, Precheck, complete_effect, resolve
from nexus.core.decide.outcomes import (
    CompensationRow,
    OutboxCount,
    SagaRow,
    applies,
    compensations,
    is_terminal,
    saga_after,
    saga_row,
)  # fmt: skip
from nexus.core.decide.plan_end import ended_envelope
from nexus.core.decide.plan_start import OrderKnown, PlanStart, fold_starts
from nexus.core.decide.rows import (
    ApprovalRow,
    DeadLetterRow,
    DecisionRecord,
    OrderRow,
    OutboxRow,
    PendingDelete,
    PendingRow,
    RejectedRow,
    RowsBuilder,
    add_rows,
    approval_rows,
    postgres_text,
)  # fmt: skip
from nexus.core.decide.saga_abort import SagaGate, SagaTurn, compensating
from nexus.core.decide.validation import StepChecks
from nexus.core.envelope import EventEnvelope
from nexus.core.numbering import DEFAULT_REPEAT_WINDOW_S
from nexus.core.order_state import OrderState, Resolution
from nexus.core.process_model import CompiledProcess, ProcessCatalog, Verdict
from nexus.core.saga import SagaStatus
from nexus.errors import ErrorCode
from nexus_wire.codes import Decision

OrderKey = tuple[str, str]


@dataclasses.dataclass(frozen=True, slots=True)
class Parts:
    """What a gateway decides with, injected: the processes, how steps are judged (`NoChecks`: not at all),
    the decision log (`NoDecisionLog`: records nothing), whether plan mismatches are dead-lettered in the
    table (Kafka ingress sends them to its DLQ topic instead), and the limits of a tenant that has none."""

    catalog: ProcessCatalog
    checks: StepChecks = dataclasses.field(default_factory=StepChecks)
    log: DecisionLog = dataclasses.field(default_factory=DecisionLog)
    record_plan_mismatch: bool = True
    default_limits: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    prechecks: tuple[Precheck, ...] = ()
    """See `OrderContext.prechecks`."""
    repeat_window_s: float = DEFAULT_REPEAT_WINDOW_S
    """How long an unkeyed proposal repeating the order's last applied step is a repeat (NEXUS_REPEAT_WINDOW_S)."""


@dataclasses.dataclass(frozen=True, slots=True)
class BatchReads:
    """What the gateway read of the batch's orders under their locks."""

    states: Mapping[OrderKey, OrderState] = dataclasses.field(default_factory=dict)
    pending: Mapping[OrderKey, Mapping[int, EventEnvelope]] = dataclasses.field(default_factory=dict)
    rejected: Mapping[OrderKey, Mapping[uuid.UUID, Verdict]] = dataclasses.field(default_factory=dict)
    limits: Mapping[str, Mapping[str, Any]] = dataclasses.field(default_factory=dict)
    heads: Mapping[OrderKey, tuple[int, bytes]] = dataclasses.field(default_factory=dict)
    numbered: Mapping[OrderKey, frozenset[uuid.UUID]] = dataclasses.field(default_factory=dict)
    """The buffered steps (by event_id) the server numbered (`OrderContext.numbered`)."""
    numbering: Mapping[OrderKey, NumberingReads] = dataclasses.field(default_factory=dict)
    """Of the orders with proposals: their started plan and stored first verdicts (`decide/numbering.py`)."""
    sagas: Mapping[OrderKey, SagaStatus] = dataclasses.field(default_factory=dict)
    """Of a batch of effect outcomes: each saga's status, read under its order's lock (absent: compensated)."""
    retrying: Mapping[OrderKey, dt.datetime] = dataclasses.field(default_factory=dict)
    """Of a batch of effect outcomes: since when each retrying saga retries (absent: not retrying)."""
    gates: Mapping[OrderKey, SagaGate] = dataclasses.field(default_factory=dict)
    """The sagas of the batch's orders, read with their states (`decide/saga_abort.py`; absent: none)."""
    known: Mapping[OrderKey, OrderKnown] = dataclasses.field(default_factory=dict)
    """Of a batch of plan starts: what the tenant knows of each order, read under its lock (absent: nothing)."""
    live: Mapping[OrderKey, bool] = dataclasses.field(default_factory=dict)
    """The orders stored, each live or not (`finished_at` NULL): the store counts what it writes against this
    (`batch_rows.write_plan`, the live_orders quota); the fold does not read it."""


@dataclasses.dataclass(frozen=True, slots=True)
class BatchPlan:
    """Everything one batch decided: the answers (one per item, in order) and what to write for them."""

    answers: tuple[Outcome, ...]
    orders: tuple[OrderRow, ...] = ()
    notifications: tuple[OutboxRow, ...] = ()
    buffered: tuple[PendingRow, ...] = ()
    unbuffered: tuple[PendingDelete, ...] = ()
    rejected: tuple[RejectedRow, ...] = ()
    dead_letters: tuple[DeadLetterRow, ...] = ()
    dead_letter_items: tuple[int, ...] = ()
    """The item index each dead letter answers (to give its answer the dead letter's id)."""
    approvals: tuple[ApprovalRow, ...] = ()
    cancelled_approvals: tuple[uuid.UUID, ...] = ()
    decisions: tuple[DecisionRecord, ...] = ()
    log: tuple[Entry, ...] = ()
    wake: tuple[OrderKey, ...] = ()
    """Orders whose waiters (long poll, SSE) wake at commit."""
    resolutions: tuple[Resolution, ...] = ()
    """Each order's resolution, for the saga steps of the steps with effects."""
    traces: Mapping[uuid.UUID, str | None] = dataclasses.field(default_factory=dict)
    drained: int = 0
    blocked: tuple[ErrorCode, ...] = ()
    """Codes of drained steps REJECTED (metrics of blocked actions)."""
    first_verdicts: tuple[FirstVerdictRow, ...] = ()
    """The first verdicts of the steps the server numbered in this batch (`plan_steps`)."""
    sagas: tuple[SagaRow, ...] = ()
    """The sagas' rows after a batch's effect outcomes, one per outcome, in their order."""
    turns: tuple[SagaTurn, ...] = ()
    """The open sagas the batch's aborts turn to compensation (`decide/saga_abort.py`)."""
    compensated: tuple[CompensationRow, ...] = ()
    """The steps a batch of effect outcomes compensated."""
    outbox_counts: tuple[OutboxCount, ...] = ()
    """The orders' notification counts after their compensations' notifications (in `notifications`)."""
    started: tuple[PlanStart, ...] = ()
    """The plans a batch's starts began (their rows to write)."""
    start_refusals: tuple[ErrorCode | None, ...] = ()
    """One per start, in their order: its refusal (ORDER_EXISTS), or None once started."""


class _Planner:
    def __init__(self, items: Sequence[Incoming], parts: Parts, kind: IngressKind, now: dt.datetime | None) -> None:
        self.items, self.parts, self.kind, self.now = items, parts, kind, now
        self.first_verdicts: list[FirstVerdictRow] = []
        self.rows = RowsBuilder()
        self.answers: list[Outcome | None] = [None] * len(items)
        self.dead_items: list[int] = []
        self.log: list[Entry] = []
        self.resolutions: list[Resolution] = []
        self.traces: dict[uuid.UUID, str | None] = {}
        self.drained = 0
        self.blocked: list[ErrorCode] = []
        self.woken: set[OrderKey] = set()
        self.with_actors = any(item.actor for item in items)
        self.with_proposals = any(item.proposal is not None for item in items)
        self.with_endings = any(item.ending for item in items)
        self.names = {item.actor: item.actor_name for item in items if item.actor and item.actor_name}
        self.sagas: list[SagaRow] = []
        self.compensated: tuple[CompensationRow, ...] = ()
        self.outbox_counts: tuple[OutboxCount, ...] = ()
        self.checked: dict[uuid.UUID, tuple[EventEnvelope, CompiledProcess]] = {}
        """`OrderContext.data_checked` of every order of the batch: `valid_data` adds each order's before its fold."""

    def order(self, key: OrderKey, indexes: list[int], reads: BatchReads, ctx: OrderContext) -> None:
        items = self.items
        state = reads.states.get(key) or OrderState(key[1])
        indexes = self.valid_data(indexes, state)
        if not indexes:
            return
        if key in reads.rejected:
            state = dataclasses.replace(state, rejections=len(reads.rejected[key]))
        pending = reads.pending.get(key, {})
        numbering = self.numbering(key, indexes, reads)
        envelopes = self.envelopes(key, indexes, state, reads)
        if numbering is None:
            folded = indexes
            events = [e for i in indexes if (e := envelopes[i]) is not None]  # every index has one
            resolution = resolve(state, events, pending, ctx)
        else:
            steps = [Step(i, e, items[i].proposal) for i in indexes if (e := envelopes[i]) is not None]
            resolution, folded = resolve_numbered(state, steps, pending, ctx, numbering)
            actors_of = {i: (items[i].actor, items[i].actor_name) for i in indexes}
            self.log += self.parts.log.entries(numbering.entries(actors_of))
        traces = {items[i].envelope.event_id: items[i].traceparent for i in indexes}  # type: ignore[union-attr]  # an item past validation carries its envelope
        self.drained += add_rows(resolution, traces, self.rows, self.parts.catalog)
        self.resolutions.append(resolution)
        self.traces.update(traces)
        self.blocked.extend(r.verdict.code for r in resolution.rejections if r.drained)
        if resolution.held or resolution.released:
            held, cancelled = approval_rows(resolution, self.parts.catalog, traces, ctx.approvals)
            self.rows.approvals += held
            self.rows.cancelled += cancelled
        actors = None
        if self.with_actors:
            actors = {items[i].envelope.event_id: items[i].actor for i in indexes if items[i].actor}  # type: ignore[union-attr]  # an item past validation carries its envelope
        self.log += self.parts.log.order_entries(resolution, pending, None, actors, self.names)
        for i, (event, decision, after) in zip(folded, resolution.decisions, strict=True):
            verdict = resolution.verdict_of(event.event_id) if decision is Decision.REJECTED else None
            outcome = answer(event, decision, after, verdict, resolution.deadlines.get(event.event_id))
            if decision is Decision.PLAN_MISMATCH:
                why = wording.plan_mismatch(key[1], after.plan_id, event.plan_id)
                outcome = dataclasses.replace(outcome, error=why)
                if self.parts.record_plan_mismatch:
                    self.dead_letter(i, ErrorCode.PLAN_MISMATCH, why)
            self.answers[i] = outcome
        if numbering is not None:
            numbering.answer(self.answers)
            self.first_verdicts += numbering.first_verdicts(self.answers)

    def envelopes(
        self, key: OrderKey, indexes: list[int], state: OrderState, reads: BatchReads
    ) -> dict[int, EventEnvelope | None]:
        """The order's items' envelopes; a plan's end completed from the state read under the lock."""
        if not self.with_endings:  # the usual batch: no plan's end
            return {i: self.items[i].envelope for i in indexes}
        started = reads.numbering.get(key)
        started_plan = started.plan.plan_id if started is not None and started.plan is not None else None
        out: dict[int, EventEnvelope | None] = {}
        for i in indexes:
            item = self.items[i]
            envelope = item.envelope
            out[i] = ended_envelope(envelope, state, started_plan) if envelope and item.ending else envelope
        return out

    def numbering(self, key: OrderKey, indexes: list[int], reads: BatchReads) -> OrderNumbering | None:
        """The numbering of the order's proposals (None: it has none, the usual)."""
        if not self.with_proposals or not any(self.items[i].proposal is not None for i in indexes):
            return None
        assert self.now is not None, "numbering proposals needs the clock (the repeat window)"
        return OrderNumbering(reads.numbering.get(key, NumberingReads()), self.now, self.parts.repeat_window_s)

    def valid_data(self, indexes: list[int], state: OrderState) -> list[int]:
        """The items whose data their order's process accepts (the others DEAD_LETTER INVALID_EVENT); of those,
        the steps it checked go into `checked` (`OrderContext.data_checked`, one mapping for the whole batch:
        an entry counts only for that very envelope judged by that very process)."""
        events = [event for i in indexes if (event := self.items[i].envelope) is not None]
        invalid, passed = arrival_data(self.parts.catalog, state, events)
        for j, process in passed.items():
            self.checked[events[j].event_id] = (events[j], process)
        for j, verdict in invalid.items():
            i, event = indexes[j], events[j]
            self.dead_letter(i, verdict.code, verdict.message)
            self.answers[i] = Outcome(
                str(event.event_id), Decision.DEAD_LETTER, verdict.code, verdict.message, state.status,
                state.last_seq, seq_id=event.seq_id,
            )  # fmt: skip
            self.log += self.parts.log.entries([invalid_data_entry(self.items[i], event, verdict)])
        return [i for j, i in enumerate(indexes) if j not in invalid] if invalid else indexes

    def dead_letter(self, i: int, code: ErrorCode, error: str) -> None:
        item = self.items[i]
        env = item.envelope or item.refused
        self.dead_items.append(i)
        self.rows.dead.append(
            DeadLetterRow(
                self.kind.value, code.value, postgres_text(error), item.event_id and postgres_text(item.event_id),
                env.order_id if env else None, env.plan_id if env else None, postgres_text(item.text),
                env.tenant_id if env else item.tenant_id,
            )
        )  # fmt: skip

    def unparsed(self) -> None:
        for i, item in enumerate(self.items):
            if item.envelope is None:
                assert item.error is not None
                self.dead_letter(i, item.error.code, str(item.error))
                self.answers[i] = Outcome(item.event_id, Decision.DEAD_LETTER, item.error.code, str(item.error))
                self.log += self.parts.log.entries([ingress_entry(item)])

    def expire(self, expiry: Expiry, now: dt.datetime) -> None:
        deletes, dead, entries = expired_rows(expiry, now)
        self.rows.pending_del += deletes
        self.rows.dead += dead
        self.log += self.parts.log.entries(entries)
        self.woken.update((d.tenant_id, d.order_id) for d in deletes)

    def effects(self, outcomes: Sequence[EffectOutcome], reads: BatchReads) -> None:
        """The saga calls' outcomes (`core/decide/outcomes.py`): an effect's success applies its step for
        good, each saga's row follows from its outcome, and each compensation takes its notification."""
        assert self.now is not None, "the outcomes' times are the fold's clock"
        for outcome in outcomes:
            current = reads.sagas.get(outcome.key, SagaStatus.COMPENSATED)
            terminal = self.effect_done(outcome, reads) if applies(outcome, current) else None
            after = saga_after(outcome, current, terminal)
            self.sagas.append(saga_row(outcome, after, reads.retrying.get(outcome.key), self.now))
            self.woken.add(outcome.key)
        self.compensated, notifications, self.outbox_counts = compensations(outcomes, reads.states, self.now)
        self.rows.outbox += notifications

    def effect_done(self, outcome: EffectOutcome, reads: BatchReads) -> tuple[str, bool]:
        """An effect succeeded: its step applies for good (`order.complete_effect`) unless stale; the order's
        status afterwards, and whether it is terminal in its process."""
        key, event, catalog = outcome.key, outcome.envelope, self.parts.catalog
        assert event is not None, "a success carries its step's envelope"
        state = reads.states.get(key) or OrderState(key[1])
        if effect_outcome_stale(state, event):
            status = str(state.status)
            return status, is_terminal(catalog, state.process, state.process_version, status)
        pending = reads.pending.get(key, {})
        limits = reads.limits.get(key[0]) or self.parts.default_limits
        resolution = complete_effect(state, event, pending, OrderContext(catalog=catalog, limits=limits))
        # The step's notification carries the step's traceparent (the agent's trace), as at APPLY.
        add_rows(resolution, {event.event_id: outcome.traceparent}, self.rows, catalog)
        self.resolutions.append(resolution)
        # The step's own APPLY was logged when it took its seq; what it drains now is logged here.
        self.log += self.parts.log.order_entries(resolution, pending, SYSTEM_SAGA, None)[1:]
        after = resolution.after
        return str(after.status), is_terminal(catalog, after.process, after.process_version, str(after.status))

    def decision_records(self) -> None:
        """A Kafka batch's decisions, for `nexus.decisions`, written in its transaction."""
        for item, outcome in zip(self.items, self.answers, strict=True):
            env = item.envelope
            if env is not None and outcome is not None:
                value = {**outcome.as_json(), "order_id": env.order_id, "tenant": env.tenant_id}
                self.rows.decisions.append(
                    DecisionRecord(env.tenant_id, env.order_id, json.dumps(value), item.traceparent)
                )


def plan_batch(
    items: Sequence[Incoming],
    reads: BatchReads,
    parts: Parts,
    *,
    kind: IngressKind,
    now: dt.datetime | None,
    approvals: Mapping[uuid.UUID, Verdict | None] | None = None,
    expiry: Expiry | None = None,
    effects: Sequence[EffectOutcome] = (),
    starts: Sequence[PlanStart] = (),
) -> BatchPlan:
    """Decide a batch: each order's items folded through the deciders (orders in key order, the lock
    order), then the items that are not steps, then the buffer sweeper's `expiry` (if any), then the saga
    calls' outcomes `effects` and the plan starts `starts` (`plan_start.fold_starts`), if any; see the
    module docstring for the extension points."""
    by_order: dict[OrderKey, list[int]] = defaultdict(list)
    for i, item in enumerate(items):
        if item.envelope is not None:
            by_order[order_key(item.envelope)].append(i)
    planner = _Planner(items, parts, kind, now)
    base = OrderContext(
        catalog=parts.catalog, checks=parts.checks, now=now, approvals=approvals or {},
        prechecks=parts.prechecks, data_checked=planner.checked,
    )  # fmt: skip
    contexts: dict[str, OrderContext] = {}  # per tenant, for orders without rejected steps (the usual)
    for key in sorted(by_order):
        rejected = reads.rejected.get(key)
        ctx = contexts.get(key[0]) if not rejected else None
        if ctx is None:
            limits = reads.limits.get(key[0]) or parts.default_limits
            ctx = dataclasses.replace(base, limits=limits, rejected=rejected or {})
            if not rejected:
                contexts[key[0]] = ctx
        numbered = _numbered(items, by_order[key], reads.numbered.get(key, frozenset()))
        if numbered:
            ctx = dataclasses.replace(ctx, numbered=numbered)
        planner.order(key, by_order[key], reads, ctx)
    planner.unparsed()
    if expiry is not None and now is not None:
        planner.expire(expiry, now)
    if effects:
        planner.effects(effects, reads)
    started, refusals = fold_starts(starts, reads.known) if starts else ((), ())
    if kind is IngressKind.KAFKA:
        planner.decision_records()
    rows = planner.rows
    return BatchPlan(
        answers=tuple(a for a in planner.answers if a is not None),
        orders=tuple(rows.orders), notifications=tuple(rows.outbox), buffered=tuple(rows.pending_add),
        unbuffered=tuple(rows.pending_del), rejected=tuple(rows.rejected), dead_letters=tuple(rows.dead),
        dead_letter_items=tuple(planner.dead_items), approvals=tuple(rows.approvals),
        cancelled_approvals=tuple(rows.cancelled), decisions=tuple(rows.decisions), log=tuple(planner.log),
        wake=tuple(sorted({*by_order, *planner.woken})), resolutions=tuple(planner.resolutions), traces=planner.traces,
        drained=planner.drained, blocked=tuple(planner.blocked), first_verdicts=tuple(planner.first_verdicts),
        sagas=tuple(planner.sagas), started=started, start_refusals=refusals,
        turns=compensating(planner.resolutions, reads.gates), compensated=planner.compensated,
        outbox_counts=planner.outbox_counts,
    )  # fmt: skip


def _numbered(items: Sequence[Incoming], indexes: list[int], buffered: frozenset[uuid.UUID]) -> frozenset[uuid.UUID]:
    """The order's server-numbered steps: those buffered before, and this batch's proposals."""
    proposed = [e.event_id for i in indexes if items[i].proposal is not None and (e := items[i].envelope) is not None]
    return buffered | frozenset(proposed) if proposed else buffered
