"""Writing saga calls' outcomes back, under their orders' advisory locks, in one transaction for a batch of
outcomes of different orders (`write_outcomes`): the steps' rows, the sagas' statuses and, when an effect
succeeded, the step applied for good (status, facts, notification, buffered successors drained) through the
same pure `resolve` as `Gateway.submit`, the batch's orders read and written set-based as a gateway batch
is; when a compensation succeeded, its notification; when compensation is over, the plan's abort
(`effect_failed`). A saga due again at once stays leased to the writer's process, which goes on with it
with the steps read back in the same transaction."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import uuid
from typing import Any

import asyncpg

from nexus.audit.log import record_entries, record_rows
from nexus.batch_rows import pairs, read_batch, write_builder
from nexus.core.actors import SYSTEM_SAGA
from nexus.core.decide.effects import effect_failed_abort, effect_outcome_stale
from nexus.core.decide.rows import OutboxRow, RowsBuilder, add_rows
from nexus.core.envelope import parse_envelope
from nexus.core.process_model import ABORTED
from nexus.core.saga import Action, CallDecision, SagaStatus, StepStatus
from nexus.core.sequencing import OrderState, Resolution, complete_effect, resolve
from nexus.gateway import Gateway
from nexus.store import lifecycle as lifecycle_records
from nexus.store import sagas as records
from nexus.store.queries import query

_COMPENSATION_NAMESPACE = uuid.UUID("5a9a7e0c-3c1b-4f7e-8a51-636f6d70656e")
COMPENSATED_EVENT = "EffectCompensated"
_OPEN = (SagaStatus.PENDING, SagaStatus.RUNNING, SagaStatus.COMPENSATING)

OrderKey = tuple[str, str]


@dataclasses.dataclass(frozen=True, slots=True)
class Outcome:
    """One call's outcome to write back: its saga's step, the call's direction and the pure decision."""

    step: asyncpg.Record
    action: Action
    decision: CallDecision
    response: Any
    error: str | None
    keep: bool = True
    """The writer's process goes on with the saga if it is due again at once (else its lease is cleared)."""

    @property
    def key(self) -> OrderKey:
        return (self.step["tenant_id"], self.step["order_id"])


@dataclasses.dataclass(frozen=True, slots=True)
class Continued:
    """A saga the writer kept leased: its status and steps as the outcome's transaction left them."""

    status: SagaStatus
    steps: list[asyncpg.Record]


async def read_steps_of(conn: asyncpg.Connection, keys: list[OrderKey]) -> dict[OrderKey, list[asyncpg.Record]]:
    """The steps of these sagas, by saga, in seq order: one statement."""
    found: dict[OrderKey, list[asyncpg.Record]] = {key: [] for key in keys}
    for row in await conn.fetch(query("saga.sql", "read_steps_of"), *pairs(keys)):
        found[(row["tenant_id"], row["order_id"])].append(row)
    return found


async def write_outcomes(
    gateway: Gateway, conn: asyncpg.Connection, outcomes: list[Outcome], lease_s: float, owner: str
) -> dict[OrderKey, Continued]:
    """Write a batch of outcomes (one per saga) in the caller's transaction; the sagas kept leased."""
    keys = sorted({o.key for o in outcomes})
    await conn.execute(query("gateway.sql", "lock_orders"), *pairs(keys))
    await lifecycle_records.notify_orders(conn, keys)
    forward = [o for o in outcomes if o.action is Action.FORWARD]
    rows = await conn.fetch(query("saga.sql", "finish_forwards"), *pairs(keys), *_forward_columns(forward))
    found = {(r["tenant_id"], r["order_id"]): SagaStatus(r["status"]) for r in rows}
    current = {o.key: found.get(o.key, SagaStatus.COMPENSATED) for o in outcomes}
    applying = [o for o in forward if o.decision.step is StepStatus.COMPLETED
                and current[o.key] in (SagaStatus.PENDING, SagaStatus.RUNNING)]  # fmt: skip
    terminal = await _apply_effects(gateway, conn, applying) if applying else {}
    sagas = []
    retrying: list[bool] = []
    for o in outcomes:
        if o.action is Action.COMPENSATE and o.decision.step is StepStatus.COMPENSATED:
            await conn.execute(query("saga.sql", "finish_compensation"), o.step["tenant_id"], o.step["order_id"],
                               o.step["seq"], StepStatus.COMPENSATED.value, _text(o.response), None)  # fmt: skip
            await notify_compensation(conn, o.step, o.response)
        status, delay_s, error = saga_after(o, current[o.key], terminal.get(o.key))
        sagas.append((*o.key, status.value, delay_s, error, o.keep and delay_s == 0 and status in _OPEN))
        retrying.append(o.decision.delay_ms is not None and status in _OPEN)
    columns = [list(c) for c in zip(*sagas, strict=True)]
    kept = {(t, oid): Continued(SagaStatus(status), []) for t, oid, status, *_, keep in sagas if keep}
    services = [o.step["service"] for o in outcomes]
    statement = query("saga.sql", "set_sagas")
    for row in await conn.fetch(statement, *columns, lease_s, owner, retrying, services):
        kept[(row["tenant_id"], row["order_id"])].steps.append(row)
    return kept


async def apply_effect(gateway: Gateway, conn: asyncpg.Connection, step: asyncpg.Record) -> str:
    """The effect of `step` (a `saga_steps` row) succeeded: apply it for good, as `write_outcomes` does for
    a batch; the order's status afterwards."""
    decision = CallDecision(StepStatus.COMPLETED, SagaStatus.RUNNING)
    outcome = Outcome(step, Action.FORWARD, decision, None, None, keep=False)
    return (await _apply_effects(gateway, conn, [outcome]))[outcome.key][0]


def saga_after(o: Outcome, current: SagaStatus, terminal: tuple[str, bool] | None) -> tuple[
    SagaStatus, float | None, str | None
]:  # fmt: skip
    """The saga's (status, seconds until its next attempt or None, error) after the outcome `o`; `terminal`:
    the order's status after an effect applied, and whether it is terminal."""
    decision = o.decision
    if o.action is Action.COMPENSATE:
        if decision.step is StepStatus.COMPENSATED:
            return current, 0.0, None
        if decision.delay_ms is not None:
            return current, decision.delay_ms / 1000, o.error
        return SagaStatus.FAILED, None, o.error
    if current is SagaStatus.PENDING:
        current = SagaStatus.RUNNING
    if decision.step is StepStatus.COMPLETED:
        if terminal is None:  # not applied: the saga turned to compensation meanwhile
            return current, 0.0, None
        status, done = terminal
        if done:
            return (SagaStatus.COMPLETED if status != ABORTED else SagaStatus.RUNNING), None, None
        return SagaStatus.RUNNING, 0.0, None
    if decision.delay_ms is not None:
        return current, decision.delay_ms / 1000, o.error
    if decision.saga is SagaStatus.ESCALATED:
        return SagaStatus.ESCALATED, None, o.error
    return (current if current is SagaStatus.FAILED else SagaStatus.COMPENSATING), 0.0, o.error


def _forward_columns(outcomes: list[Outcome]) -> list[list[Any]]:
    return [
        [o.step["tenant_id"] for o in outcomes],
        [o.step["order_id"] for o in outcomes],
        [o.step["seq"] for o in outcomes],
        [o.decision.step.value for o in outcomes],
        [o.decision.uncertain for o in outcomes],
        [_text(o.response) for o in outcomes],
        [o.error for o in outcomes],
    ]


def _text(response: Any) -> str | None:
    return json.dumps(response) if response is not None else None


async def _apply_effects(gateway: Gateway, conn: asyncpg.Connection, applying: list[Outcome]) -> dict[
    OrderKey, tuple[str, bool]
]:  # fmt: skip
    """The effects succeeded: apply their steps for good, all the batch's orders read in one statement and
    written in one; per order, its status afterwards and whether it is terminal."""
    keys = [o.key for o in applying]
    reads = await read_batch(conn, keys, validated=gateway.parts.checks.checks)
    rows = RowsBuilder()
    resolutions = []
    entries = []
    traces: dict[uuid.UUID, str | None] = {}
    after: dict[OrderKey, tuple[str, bool]] = {}
    for o in applying:
        event = parse_envelope(o.step["envelope_text"])
        state = reads.states.get(o.key) or OrderState(o.key[1])
        pending = reads.pending.get(o.key, {})
        if effect_outcome_stale(state, event):
            status = str(state.status)
            after[o.key] = (status, is_terminal(gateway, state.process, state.process_version, status))
            continue
        limits = reads.limits.get(o.key[0]) or gateway.parts.default_limits
        resolution = complete_effect(state, event, pending, catalog=gateway.catalog, limits=limits)
        resolutions.append(resolution)
        # The step's notification carries the step's traceparent (the agent's trace), as at APPLY
        traces[event.event_id] = o.step["traceparent"]
        # The step's own APPLY was logged when it took its seq; what it drains now is logged here.
        entries.extend(gateway.parts.log.order_entries(resolution, pending, SYSTEM_SAGA, None)[1:])
        status = str(resolution.after.status)
        done = is_terminal(gateway, resolution.after.process, resolution.after.process_version, status)
        after[o.key] = (status, done)
    if resolutions:
        for resolution in resolutions:
            add_rows(resolution, traces, rows)
        await write_builder(conn, rows, await record_rows(conn, entries, reads.heads, set(keys)))
        await records.record(conn, resolutions, gateway.catalog, {}, gateway.saga_secret)
    return after


async def lock_order(conn: asyncpg.Connection, tenant_id: str, order_id: str) -> str:
    """Take the order's advisory lock (as Gateway.submit does) and its saga's row; return its status.
    The transaction will write the order's saga outcome: its waiters (long poll, SSE) wake at commit."""
    await conn.execute(query("gateway.sql", "lock_orders"), [tenant_id], [order_id])
    await lifecycle_records.notify_orders(conn, [(tenant_id, order_id)])
    row = await conn.fetchrow(query("saga.sql", "lock_saga"), tenant_id, order_id)
    return str(row["status"]) if row is not None else SagaStatus.COMPENSATED.value


async def set_saga(
    conn: asyncpg.Connection,
    tenant_id: str,
    order_id: str,
    status: SagaStatus,
    delay_s: float | None,
    error: str | None = None,
) -> None:
    await conn.execute(query("saga.sql", "set_saga"), tenant_id, order_id, status.value, delay_s, error)


async def _state(gateway: Gateway, conn: asyncpg.Connection, key: tuple[str, str]) -> tuple[OrderState, Any, Any]:
    reads = await read_batch(conn, [key], validated=gateway.parts.checks.checks)
    state = reads.states.get(key) or OrderState(key[1])
    return state, reads.pending.get(key, {}), reads.limits.get(key[0]) or gateway.parts.default_limits


async def _write(
    gateway: Gateway,
    conn: asyncpg.Connection,
    resolution: Resolution,
    pending: Any,
    *,
    skip_first: bool,
    traces: dict[uuid.UUID, str | None] | None = None,
) -> None:
    rows = RowsBuilder()
    add_rows(resolution, traces or {}, rows)
    await write_builder(conn, rows)
    await records.record(conn, [resolution], gateway.catalog, {}, gateway.saga_secret)
    entries = gateway.parts.log.order_entries(resolution, pending, SYSTEM_SAGA, None)
    # The step's own APPLY was logged when it took its seq; what it drains now is logged here.
    await record_entries(conn, entries[1:] if skip_first else entries)


def is_terminal(gateway: Gateway, state_process: str | None, version: int | None, status: str) -> bool:
    process = gateway.catalog.get(state_process or "order", version) if gateway.catalog is not None else None
    return process.is_terminal(status) if process is not None else status in ("completed", "aborted")


async def notify_compensation(conn: asyncpg.Connection, step: asyncpg.Record, response: Any) -> None:
    """One notification per compensation, at the order's next position."""
    tenant_id, order_id, seq = step["tenant_id"], step["order_id"], step["seq"]
    row = await conn.fetchrow(query("saga.sql", "bump_outbox"), tenant_id, order_id)
    if row is None:
        return
    event_id = uuid.uuid5(_COMPENSATION_NAMESPACE, f"{tenant_id}\x1f{order_id}\x1f{seq}")
    notification_id = uuid.uuid5(_COMPENSATION_NAMESPACE, f"notification\x1f{event_id}")
    payload = {
        "notification_id": str(notification_id),
        "order_id": order_id,
        "plan_id": row["plan_id"],
        "tenant_id": tenant_id,
        "position": row["outbox_count"],
        "event_type": COMPENSATED_EVENT,
        "seq_id": None,
        "compensated_seq": seq,
        "status": row["status"],
        "compensation": {"step": step["step_name"], "service": step["service"], "result": response},
    }
    rows = RowsBuilder()
    rows.outbox.append(
        OutboxRow(
            notification_id,
            order_id,
            row["outbox_count"],
            event_id,
            COMPENSATED_EVENT,
            None,  # a compensation has no seq of its own (outbox keeps one notification per seq)
            row["plan_id"],
            json.dumps(payload, default=str),
            step["traceparent"],
            tenant_id,
        )
    )
    await write_builder(conn, rows)


async def abort_plan(gateway: Gateway, conn: asyncpg.Connection, tenant_id: str, order_id: str, reason: str) -> bool:
    """Compensation is over: abort the plan (`effect_failed`, decided in `core/decide/effects.py`) unless it
    already is; True if written."""
    state, pending, limits = await _state(gateway, conn, (tenant_id, order_id))
    abort = effect_failed_abort(state, tenant_id, reason, dt.datetime.now(dt.UTC))
    if abort is None:
        return False
    state = dataclasses.replace(state, effect=None, past_pivot=False)
    resolution = resolve(state, [abort], pending, catalog=gateway.catalog, limits=limits)
    await _write(gateway, conn, resolution, pending, skip_first=False)
    return True
