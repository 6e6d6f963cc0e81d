"""Writing a saga call's outcome back, under its order's advisory lock, in one transaction: the step's row,
the saga's status and, when an effect succeeded, the step applied for good (status, facts, notification,
buffered successors drained) through the same pure `resolve` as `Gateway.submit`; when a compensation
succeeded, its notification; when compensation is over, the plan's abort (`effect_failed`)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import uuid
from typing import Any

import asyncpg

from nexus.audit.log import record_entries
from nexus.batch_rows import read_batch, write_builder
from nexus.core.actors import SYSTEM_SAGA
from nexus.core.decide.rows import OutboxRow, RowsBuilder, add_rows
from nexus.core.envelope import EventEnvelope, parse_envelope
from nexus.core.process import ABORT_STEP, AbortCode
from nexus.core.saga import SagaStatus
from nexus.core.sequencing import OrderState, Resolution, complete_effect, resolve
from nexus.gateway import Gateway
from nexus.store import lifecycle as lifecycle_records
from nexus.store import sagas as records
from nexus.store.queries import query

_COMPENSATION_NAMESPACE = uuid.UUID("5a9a7e0c-3c1b-4f7e-8a51-636f6d70656e")
_ABORT_NAMESPACE = uuid.UUID("5a9a7e0c-3c1b-4f7e-8a51-61626f727421")
COMPENSATED_EVENT = "EffectCompensated"


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
    await records.record(conn, [resolution], gateway.catalog, {})
    entries = gateway.parts.log.order_entries(resolution, pending, SYSTEM_SAGA, None)
    # The step's own APPLY was logged when it took its seq; what it drains now is logged here.
    await record_entries(conn, entries[1:] if skip_first else entries)


async def apply_effect(gateway: Gateway, conn: asyncpg.Connection, tenant_id: str, order_id: str, envelope: str) -> str:
    """The effect of the step succeeded: apply it for good; return the order's status afterwards."""
    event = parse_envelope(envelope)
    state, pending, limits = await _state(gateway, conn, (tenant_id, order_id))
    if state.last_seq != event.seq_id or state.status == "aborted":
        return str(state.status)  # aborted meanwhile (the saga compensates), or already applied
    resolution = complete_effect(state, event, pending, catalog=gateway.catalog, limits=limits)
    # The step's notification carries the step's traceparent (the agent's trace), as at APPLY
    traceparent = await conn.fetchval(query("saga.sql", "step_traceparent"), tenant_id, order_id, event.seq_id)
    await _write(gateway, conn, resolution, pending, skip_first=True, traces={event.event_id: traceparent})
    return str(resolution.after.status)


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
    """Compensation is over: abort the plan (`effect_failed`) unless it already is; True if written."""
    state, pending, limits = await _state(gateway, conn, (tenant_id, order_id))
    if state.status is None or state.status == "aborted" or state.plan_id is None:
        return False
    abort = EventEnvelope(
        event_id=uuid.uuid5(_ABORT_NAMESPACE, f"{tenant_id}\x1f{order_id}\x1f{state.plan_id}"),
        event_type=ABORT_STEP,
        plan_id=state.plan_id,
        order_id=order_id,
        timestamp=dt.datetime.now(dt.UTC),
        tenant_id=tenant_id,
        data={"reason": reason[:500], "abort_code": AbortCode.EFFECT_FAILED.value, "aborted_at_seq": state.last_seq},
    )
    state = dataclasses.replace(state, effect=None, past_pivot=False)
    resolution = resolve(state, [abort], pending, catalog=gateway.catalog, limits=limits)
    await _write(gateway, conn, resolution, pending, skip_first=False)
    return True
