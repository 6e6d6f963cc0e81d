"""Handing saga calls' outcomes to the gateway: each outcome becomes a command of the fold (`command_of` ->
`EffectOutcome`), a batch of them (of different orders) folded in one transaction by `Gateway.fold_effects`
(lock, read, plan, write, as for steps), which decides nothing here: the step applied for good, the
compensation's notification and each saga's status and next attempt come from `core/decide/outcomes.py`.
A saga due again at once stays leased to the writer's process, which goes on with it with the steps read
back in the same transaction. When compensation is over, the plan's abort (`abort_plan`, `effect_failed`)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import uuid
from typing import Any

import asyncpg

from nexus.audit.log import record_entries
from nexus.batch_rows import pairs, read_batch, write_builder
from nexus.core.actors import SYSTEM_SAGA
from nexus.core.decide.effects import effect_failed_abort
from nexus.core.decide.items import EffectOutcome, EffectResult
from nexus.core.decide.rows import RowsBuilder, add_rows
from nexus.core.envelope import parse_envelope
from nexus.core.saga import Action, CallDecision, SagaStatus, StepStatus
from nexus.core.sequencing import OrderState, Resolution, resolve
from nexus.gateway import Gateway
from nexus.store import lifecycle as lifecycle_records
from nexus.store import sagas as records
from nexus.store.queries import query

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
    """Hand a batch of outcomes (one per saga) to the gateway as commands (`Gateway.fold_effects`: lock, read,
    plan, write) in the caller's transaction; the sagas kept leased, as it left them."""
    kept = await gateway.fold_effects(conn, [command_of(o) for o in outcomes], lease_s, owner)
    return {key: Continued(status, steps) for key, (status, steps) in kept.items()}


def command_of(o: Outcome) -> EffectOutcome:
    """The fold's command for a call's outcome: what it is (`EffectResult`) and the values it writes."""
    step, decision = o.step, o.decision
    forward = o.action is Action.FORWARD
    if forward and decision.step is StepStatus.COMPLETED:
        result = EffectResult.DONE
    elif not forward and decision.step is StepStatus.COMPENSATED:
        result = EffectResult.COMPENSATED
    elif forward and decision.delay_ms is None and decision.saga is SagaStatus.ESCALATED:
        result = EffectResult.ESCALATED
    else:
        result = EffectResult.FAILED
    return EffectOutcome(
        step["tenant_id"], step["order_id"], step["seq"], step["step_name"], step["service"], forward, result,
        decision.step, parse_envelope(step["envelope_text"]) if result is EffectResult.DONE else None,
        step["traceparent"], o.response, o.error, decision.uncertain,
        decision.delay_ms / 1000 if decision.delay_ms is not None else None, o.keep,
    )  # fmt: skip


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
