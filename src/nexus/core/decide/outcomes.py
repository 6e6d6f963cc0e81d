"""A saga call's outcome as a command of the fold (`EffectOutcome`): what it makes of the order and its saga.

| outcome (direction)                | saga before     | order                         | saga after, next attempt      |
|------------------------------------|-----------------|-------------------------------|-------------------------------|
| DONE (forward)                     | PENDING/RUNNING | its step applies for good (1) | terminal: COMPLETED, none (2) |
|                                    |                 |                               | else RUNNING, now             |
| DONE (forward)                     | any other       | nothing (the saga turned)     | unchanged, now                |
| FAILED, retried (either)           | any             | nothing                       | unchanged (3), after retry_s  |
| ESCALATED (forward)                | any             | nothing                       | ESCALATED, none               |
| FAILED, not retried (forward)      | any             | nothing                       | COMPENSATING (4), now         |
| COMPENSATED (compensation)         | any             | its notification              | unchanged, now                |
| FAILED, not retried (compensation) | any             | nothing                       | FAILED, none                  |

(1) `order.complete_effect`, unless stale (`effects.effect_outcome_stale`: the order moved on or aborted);
terminal from the order's process, never from a fixed list of states. (2) An aborted order's saga stays
RUNNING (its compensation comes from the abort). (3) A forward call's PENDING saga turns RUNNING. (4) A
FAILED saga stays FAILED. A saga is kept leased by the writer when it is due at once
and still open; it is retrying while a call failed and is retried.

Every value written is decided here, the SQL writes what it is given (`saga.sql`): a step's `executed_at`
(a forward call COMPLETED) and `compensated_at` (its compensation COMPENSATED) are the fold's `now`, else
kept; a retrying saga's `retrying_since` is kept from its first such failure (else the fold's `now`) and
cleared with `retrying_service` once it is not retrying; a compensation's notification takes the order's
next position (`outbox_count` + 1, counted on within a batch). Pure: no I/O.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from nexus.core.decide.items import EffectOutcome, EffectResult
from nexus.core.decide.rows import OutboxRow
from nexus.core.definitions import DEFAULT_PROCESS
from nexus.core.order_state import OrderState
from nexus.core.process_model import ABORTED, ProcessCatalog
from nexus.core.saga import SagaStatus, StepStatus, StepView, next_work, settle

COMPENSATED_EVENT = "EffectCompensated"
_COMPENSATION_NAMESPACE = uuid.UUID("5a9a7e0c-3c1b-4f7e-8a51-636f6d70656e")
_OPEN = (SagaStatus.PENDING, SagaStatus.RUNNING, SagaStatus.COMPENSATING)


@dataclasses.dataclass(frozen=True, slots=True)
class SagaAfter:
    """A saga's values after one outcome: its status, seconds until its next attempt (None: nothing to do
    until the agent's next step) and its error (None: kept as it was)."""

    status: SagaStatus
    delay_s: float | None
    error: str | None


@dataclasses.dataclass(frozen=True, slots=True)
class SagaRow:
    """The `sagas` row an outcome writes (`saga.sql` `set_sagas`): `keep`, leased on by the writer (else its
    lease is cleared); `retrying_since` and `retrying_service` as written (None: not retrying)."""

    tenant_id: str
    order_id: str
    status: str
    delay_s: float | None
    error: str | None
    keep: bool
    retrying_since: dt.datetime | None
    retrying_service: str | None


@dataclasses.dataclass(frozen=True, slots=True)
class CompensationRow:
    """A compensated step's `saga_steps` row (`saga.sql` `finish_compensations`)."""

    tenant_id: str
    order_id: str
    seq: int
    status: str
    response: Any
    compensated_at: dt.datetime | None


@dataclasses.dataclass(frozen=True, slots=True)
class OutboxCount:
    """An order's notification count once a batch's compensations took their positions (`set_outbox_counts`)."""

    tenant_id: str
    order_id: str
    outbox_count: int


def applies(outcome: EffectOutcome, current: SagaStatus) -> bool:
    """A forward call's success applies its step while the saga still runs forward."""
    return (
        outcome.forward and outcome.result is EffectResult.DONE and current in (SagaStatus.PENDING, SagaStatus.RUNNING)
    )


def saga_after(outcome: EffectOutcome, current: SagaStatus, terminal: tuple[str, bool] | None) -> SagaAfter:
    """The saga after `outcome` (see the table); `terminal`: the order's status once a success was folded,
    and whether it is terminal (None: nothing was folded)."""
    if not outcome.forward:
        if outcome.result is EffectResult.COMPENSATED:
            return SagaAfter(current, 0.0, None)
        if outcome.retry_s is not None:
            return SagaAfter(current, outcome.retry_s, outcome.error)
        return SagaAfter(SagaStatus.FAILED, None, outcome.error)
    if current is SagaStatus.PENDING:
        current = SagaStatus.RUNNING
    if outcome.result is EffectResult.DONE:
        if terminal is None:  # not applied: the saga turned to compensation meanwhile
            return SagaAfter(current, 0.0, None)
        status, done = terminal
        if done:
            return SagaAfter(SagaStatus.COMPLETED if status != ABORTED else SagaStatus.RUNNING, None, None)
        return SagaAfter(SagaStatus.RUNNING, 0.0, None)
    if outcome.retry_s is not None:
        return SagaAfter(current, outcome.retry_s, outcome.error)
    if outcome.result is EffectResult.ESCALATED:
        return SagaAfter(SagaStatus.ESCALATED, None, outcome.error)
    return SagaAfter(current if current is SagaStatus.FAILED else SagaStatus.COMPENSATING, 0.0, outcome.error)


@dataclasses.dataclass(frozen=True, slots=True)
class Settled:
    """A claimed saga with nothing to call, once read again under its order's lock: its status and next
    attempt (None: not due until the agent's next step), and the reason of the plan's `effect_failed` abort
    when its compensation is over (None: no abort)."""

    status: SagaStatus
    delay_s: float | None
    abort_reason: str | None = None


def settled(claimed: SagaStatus, current: SagaStatus, steps: Sequence[StepView]) -> Settled:
    """A claimed saga with nothing to call: changed since the claim, or with work again (a step recorded
    meanwhile), due at once; a compensation over, COMPENSATED and its plan aborted; else it waits."""
    if current is not claimed or next_work(current, steps) is not None:
        return Settled(current, 0.0)
    if settle(claimed, steps) is SagaStatus.COMPENSATED:
        failed = [s for s in steps if s.status is StepStatus.FAILED]
        return Settled(
            SagaStatus.COMPENSATED, None, f"effect of {failed[-1].step} failed" if failed else "effects compensated"
        )
    return Settled(claimed, None)


def redriven(target: SagaStatus, steps: Sequence[StepView]) -> tuple[tuple[int, StepStatus], ...]:
    """Each step's (seq, status) once its saga is redriven to `target` (`core.saga.redrive`): back to its steps
    (RUNNING), a failed step is PENDING again and the others keep theirs; back to its compensations, every
    step keeps its status (only the compensations' attempts start again)."""
    if target is not SagaStatus.RUNNING:
        return tuple((s.seq, s.status) for s in steps)
    return tuple((s.seq, StepStatus.PENDING if s.status is StepStatus.FAILED else s.status) for s in steps)


def saga_row(outcome: EffectOutcome, after: SagaAfter, since: dt.datetime | None, now: dt.datetime) -> SagaRow:
    """The row written for `outcome`: kept leased when due at once and open; retrying while retried and open,
    since `since` (when it began retrying, as read; None: it was not) or else `now`."""
    is_open = after.status in _OPEN
    retrying = outcome.retry_s is not None and is_open
    return SagaRow(
        outcome.tenant_id, outcome.order_id, after.status.value, after.delay_s, after.error,
        outcome.keep and after.delay_s == 0 and is_open, (since or now) if retrying else None,
        outcome.service if retrying else None,
    )  # fmt: skip


def executed_at(outcome: EffectOutcome, now: dt.datetime) -> dt.datetime | None:
    """When a forward call's step was executed: `now` if the call COMPLETED it; None: kept as it was."""
    return now if outcome.forward and outcome.step_status is StepStatus.COMPLETED else None


def settled_retrying(
    delay_s: float | None, since: dt.datetime | None, service: str | None
) -> tuple[dt.datetime | None, str | None]:
    """A settled saga's `retrying_since` and `retrying_service`: kept while it is due again, cleared when it
    waits for the agent's next step (not due)."""
    return (since, service) if delay_s is not None else (None, None)


def compensations(
    outcomes: Sequence[EffectOutcome], states: Mapping[tuple[str, str], OrderState], now: dt.datetime
) -> tuple[tuple[CompensationRow, ...], tuple[OutboxRow, ...], tuple[OutboxCount, ...]]:
    """The compensated steps of a batch's outcomes: each step's row, and the notification of each at its
    order's next position with the orders' counts after them (an order without a row, or removed, gets none)."""
    steps: list[CompensationRow] = []
    notifications: list[OutboxRow] = []
    counts: dict[tuple[str, str], int] = {}
    for o in outcomes:
        if o.forward or o.result is not EffectResult.COMPENSATED:
            continue
        stamp = now if o.step_status is StepStatus.COMPENSATED else None
        steps.append(CompensationRow(o.tenant_id, o.order_id, o.seq, o.step_status.value, o.response, stamp))
        state = states.get(o.key)
        if state is None or not state.exists or state.removed or state.plan_id is None:
            continue
        position = counts.get(o.key, state.outbox_count) + 1
        counts[o.key] = position
        notifications.append(compensation_notification(o, position, state.plan_id, str(state.status)))
    return (tuple(steps), tuple(notifications), tuple(OutboxCount(t, oid, n) for (t, oid), n in counts.items()))


def is_terminal(catalog: ProcessCatalog, process: str | None, version: int | None, status: str) -> bool:
    """Whether `status` is terminal in the order's process (its definition's terminal states)."""
    compiled = catalog.get(process or DEFAULT_PROCESS, version)
    return compiled is not None and compiled.is_terminal(status)


def compensation_notification(outcome: EffectOutcome, position: int, plan_id: str, status: str) -> OutboxRow:
    """The notification of a compensation, at the order's next `position` (one per compensated step)."""
    tenant_id, order_id, seq = outcome.tenant_id, outcome.order_id, outcome.seq
    event_id = uuid.uuid5(_COMPENSATION_NAMESPACE, f"{tenant_id}\x1f{order_id}\x1f{seq}")
    notification_id = uuid.uuid5(_COMPENSATION_NAMESPACE, f"notification\x1f{event_id}")
    payload: dict[str, Any] = {
        "notification_id": str(notification_id),
        "order_id": order_id,
        "plan_id": plan_id,
        "tenant_id": tenant_id,
        "position": position,
        "event_type": COMPENSATED_EVENT,
        "seq_id": None,
        "compensated_seq": seq,
        "status": status,
        "compensation": {"step": outcome.step_name, "service": outcome.service, "result": outcome.response},
    }
    return OutboxRow(
        notification_id,
        order_id,
        position,
        event_id,
        COMPENSATED_EVENT,
        None,  # a compensation has no seq of its own (outbox keeps one notification per seq)
        plan_id,
        json.dumps(payload, default=str),
        outcome.traceparent,
        tenant_id,
    )
