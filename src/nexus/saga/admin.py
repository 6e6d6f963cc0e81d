"""What operators see and do with sagas: the saga of an order, the list by status, a redrive."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

from nexus.core.decide.outcomes import redriven
from nexus.core.saga import SagaStatus
from nexus.core.saga import redrive as redrive_status
from nexus.errors import NotFoundError
from nexus.store.database import Database
from nexus.store.queries import query
from nexus.store.sagas import gate_of, read_settling


async def order_saga(db: Database, tenant_id: str, order_id: str) -> dict[str, Any] | None:
    """The saga of an order with its steps (status, attempts, result, compensation), or None."""
    rows = await db.fetch(query("saga.sql", "order_saga"), tenant_id, order_id)
    if not rows:
        return None
    steps = [
        {
            "seq": r["seq"],
            "step": r["step_name"],
            "service": r["service"],
            "status": r["step_status"],
            "attempts": r["attempts"],
            "pivot": r["pivot"],
            "compensable": r["compensable"],
            "result": json.loads(r["result"]) if r["result"] else None,
            "compensation": {
                "attempts": r["compensation_attempts"],
                "result": json.loads(r["compensation"]) if r["compensation"] else None,
            }
            if r["compensable"]
            else None,
            "error": r["last_error"],
        }
        for r in rows
        if r["seq"] is not None
    ]
    first = rows[0]
    return {
        "status": first["status"],
        "error": first["error"],
        "next_attempt_at": _iso(first["next_attempt_at"]),
        "retrying_since": _iso(first["retrying_since"]),
        "steps": steps,
    }


def _iso(value: dt.datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


async def list_sagas(
    db: Database, status: str | None = None, tenant_id: str | None = None, limit: int = 100, *, retrying: bool = False
) -> list[dict[str, Any]]:
    """Sagas, newest first; `retrying`: only open sagas whose current call failed and has not succeeded yet."""
    rows = await db.fetch(query("saga.sql", "list_sagas"), status, tenant_id, limit, retrying)
    return [
        {
            "tenant_id": r["tenant_id"],
            "order_id": r["order_id"],
            "plan_id": r["plan_id"],
            "process": r["process"],
            "status": r["status"],
            "steps": r["steps"],
            "error": r["error"],
            "updated_at": r["updated_at"].isoformat(),
            "next_attempt_at": _iso(r["next_attempt_at"]),
            "retrying_since": _iso(r["retrying_since"]),
            "retrying_service": r["retrying_service"],
        }
        for r in rows
    ]


async def redrive(db: Database, tenant_id: str, order_id: str) -> str:
    """Send an ESCALATED saga back to its steps, a FAILED one back to its compensations; the new status."""
    current = await db.fetchval("SELECT status FROM sagas WHERE tenant_id = $1 AND order_id = $2", tenant_id, order_id)
    if current is None:
        raise NotFoundError(f"no saga for order {order_id!r}")
    try:
        target = redrive_status(SagaStatus(current))
    except ValueError as exc:
        raise NotFoundError(str(exc)) from exc
    key = (tenant_id, order_id)
    async with db.pool.acquire() as conn, conn.transaction():
        settling = await read_settling(conn, key)
        status, steps = settling.status, settling.steps
        row = None
        if status.value == current:  # the saga's row locked: its steps stay as read
            if target is SagaStatus.RUNNING:
                redone = redriven(target, steps)
                seqs, statuses = [seq for seq, _ in redone], [step.value for _, step in redone]
                await conn.execute(query("saga.sql", "redrive_forwards"), *key, seqs, statuses)
            else:
                await conn.execute(query("saga.sql", "redrive_compensations"), *key)
            row = await conn.fetchrow(query("saga.sql", "redrive_saga"), *key, target.value, current)
            await conn.execute(query("saga.sql", "notify_sagas"))
    if row is None:
        raise NotFoundError(f"saga of order {order_id!r} changed meanwhile")
    return str(row["status"])


def effect_of(view: dict[str, Any]) -> dict[str, Any] | None:
    """The `effect` of an order's answer from its saga view: the step its open saga is busy with."""
    rows = [
        {"status": view["status"], "step_status": s["status"], "seq": s["seq"], "step_name": s["step"],
         "attempts": s["attempts"], "pivot": s["pivot"]}
        for s in view["steps"]
    ]  # fmt: skip
    return gate_of(rows) if rows else None
