"""The gateway's side of the plan lifecycle (issue 13): what `Gateway.submit` reads and writes for held
steps (approvals), for the decisions of Kafka-ingested steps (the decisions outbox) and for the waiters of
an order (NOTIFY), in the transaction of the decisions themselves. Every row is keyed by (tenant, order)."""

from __future__ import annotations

import dataclasses
import json
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import asyncpg

from nexus.core.envelope import EventEnvelope
from nexus.core.process import ProcessCatalog, Verdict, approval_expires_s
from nexus.core.sequencing import OrderState, Resolution
from nexus.errors import ApprovalNotPendingError
from nexus.store.queries import query

_APPROVAL_NAMESPACE = uuid.UUID("a9f0c2d4-1b3e-4f5a-8c7d-617070726f76")


def approval_id_for(event_id: uuid.UUID, tenant_id: str = "default") -> uuid.UUID:
    """The approval of a held step: derived from its tenant and event_id, so a resend names the same one
    (two tenants' steps with one event_id get different approvals)."""
    name = str(event_id) if tenant_id == "default" else f"{tenant_id}\x1f{event_id}"
    return uuid.uuid5(_APPROVAL_NAMESPACE, name)


@dataclasses.dataclass(frozen=True, slots=True)
class ApprovalDecision:
    """A person's (or the expiry sweeper's) answer to a held step, applied by `Gateway.submit_approval`."""

    approval_id: uuid.UUID
    verdict: Verdict | None
    """None approves; a verdict (APPROVAL_DENIED) denies."""
    status: str
    """approved, denied or expired (the approvals row's new status)."""
    by: str


async def read_held(
    conn: asyncpg.Connection, states: dict[tuple[str, str], OrderState], keys: Sequence[tuple[str, str]]
) -> None:
    """Mark the orders whose next seq is taken by a step held for approval (under the orders' locks)."""
    rows = await conn.fetch(query("lifecycle.sql", "read_held"), [t for t, _ in keys], [o for _, o in keys])
    for row in rows:
        key = (row["tenant_id"], row["order_id"])
        state = states.get(key) or OrderState(row["order_id"], plan_id=row["plan_id"])
        states[key] = dataclasses.replace(state, held=row["event_id"])


async def decide_approvals(conn: asyncpg.Connection, decided: Mapping[uuid.UUID, ApprovalDecision]) -> None:
    """Turn each answered approval from pending to its answer, once (under its order's lock)."""
    for answer in decided.values():
        row = await conn.fetchrow(
            query("lifecycle.sql", "decide_approval"), answer.approval_id, answer.status, answer.by
        )
        if row is None:
            raise ApprovalNotPendingError(f"approval {answer.approval_id} is not pending")


def approval_rows(
    resolution: Resolution,
    catalog: ProcessCatalog | None,
    traces: Mapping[uuid.UUID, str | None],
    decided: Mapping[uuid.UUID, ApprovalDecision] | None,
) -> tuple[list[tuple[Any, ...]], list[uuid.UUID]]:
    """An approvals row per newly held step, and the approvals of held steps dropped (by an abort or a
    REPLAN) to cancel. `decided` is keyed by the held steps' event_ids."""
    rows: list[tuple[Any, ...]] = []
    for event, _drained in resolution.held:
        assert catalog is not None  # only a process holds a step
        after = resolution.after
        process = (
            catalog.get(after.process, after.process_version)
            if after.process is not None
            else catalog.get(event.process_name)
        )
        rows.append(
            (
                approval_id_for(event.event_id, event.tenant_id),
                event.tenant_id,
                event.order_id,
                event.event_id,
                event.plan_id,
                event.seq_id,
                str(event.event_type),
                event.model_dump_json(),
                traces.get(event.event_id),
                approval_expires_s(process, str(event.event_type)) if process is not None else None,
            )
        )
    tenant = _tenant_of(resolution)
    cancelled = [approval_id_for(e, tenant) for e in resolution.released if e not in (decided or {})]
    return rows, cancelled


async def write_approvals(conn: asyncpg.Connection, rows: list[tuple[Any, ...]], cancelled: list[uuid.UUID]) -> None:
    if rows:
        await conn.execute(query("lifecycle.sql", "insert_approvals"), *_columns(rows, 10))
    if cancelled:
        await conn.execute(query("lifecycle.sql", "cancel_approvals"), cancelled)


async def record_decisions(
    conn: asyncpg.Connection, decided: Iterable[tuple[EventEnvelope, str | None, dict[str, Any]]]
) -> None:
    """One decisions_outbox row per decided Kafka step: its HTTP result plus `order_id` and `tenant`."""
    rows = [
        (
            envelope.tenant_id,
            envelope.order_id,
            json.dumps({**result, "order_id": envelope.order_id, "tenant": envelope.tenant_id}),
            traceparent,
        )
        for envelope, traceparent, result in decided
    ]
    if rows:
        await conn.execute(query("lifecycle.sql", "insert_decisions"), *_columns(rows, 4))


async def notify_orders(conn: asyncpg.Connection, keys: Iterable[tuple[str, str]]) -> None:
    """Wake the waiters (long poll, SSE) of these orders at commit; the payload names tenant and order."""
    pairs = sorted(set(keys))
    if pairs:
        await conn.execute(query("gateway.sql", "notify_orders"), [t for t, _ in pairs], [o for _, o in pairs])


def _tenant_of(resolution: Resolution) -> str:
    for event, _, _ in resolution.decisions:
        return event.tenant_id
    return "default"


def _columns(rows: list[tuple[Any, ...]], width: int) -> list[list[Any]]:
    return [list(col) for col in zip(*rows, strict=True)] if rows else [[] for _ in range(width)]
