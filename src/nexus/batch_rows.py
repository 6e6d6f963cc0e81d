"""The rows of one `Gateway.submit` transaction: the batch's orders read in one statement, and each
order's resolution turned into set-based writes (one statement per table, whatever the batch size).

Shared by the gateway and the saga outcomes (nexus.saga.outcomes), which apply an effect's step under
the same lock with the same writes.
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from collections import defaultdict
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

import asyncpg

from nexus.core.envelope import EventEnvelope, parse_envelope
from nexus.core.list_limits import tenant_limits
from nexus.core.process import Verdict, as_status
from nexus.core.sequencing import OrderState, Resolution
from nexus.errors import ErrorCode
from nexus.store import lifecycle as lifecycle_records
from nexus.store.queries import query

_OUTBOX_NAMESPACE = uuid.UUID("6d1f3c1e-8f43-4a43-9d5c-6e6578757300")


def outbox_id_for(event_id: uuid.UUID, tenant_id: str = "default") -> uuid.UUID:
    """The notification id (and Idempotency-Key) of an applied event: derived, so it never changes.
    Two tenants' events with the same event_id get different ids (the default tenant keeps the old ones)."""
    name = str(event_id) if tenant_id == "default" else f"{tenant_id}\x1f{event_id}"
    return uuid.uuid5(_OUTBOX_NAMESPACE, name)


@dataclasses.dataclass(slots=True)
class Writes:
    """The set-based writes of one transaction, accumulated column by column."""

    orders: list[tuple[Any, ...]] = dataclasses.field(default_factory=list)
    outbox: list[tuple[Any, ...]] = dataclasses.field(default_factory=list)
    pending_add: list[tuple[Any, ...]] = dataclasses.field(default_factory=list)
    pending_del: list[tuple[Any, ...]] = dataclasses.field(default_factory=list)
    dead: list[tuple[Any, ...]] = dataclasses.field(default_factory=list)
    rejected: list[tuple[Any, ...]] = dataclasses.field(default_factory=list)
    approvals: list[tuple[Any, ...]] = dataclasses.field(default_factory=list)
    cancelled: list[uuid.UUID] = dataclasses.field(default_factory=list)

    async def run(self, conn: asyncpg.Connection, records: list[list[Any]] | None = None) -> list[int]:
        """Write the rows; `records`: the decision log's columns (audit.log.record_columns). The usual rows
        (orders, notifications and their deliveries, decision log) go in one statement (issue 17)."""
        await lifecycle_records.write_approvals(conn, self.approvals, self.cancelled)  # issue 13: held steps
        if self.rejected:
            await conn.execute(query("gateway.sql", "insert_rejected"), *columns(self.rejected, 11))
        if self.pending_del:
            await conn.execute(query("gateway.sql", "delete_pending"), *columns(self.pending_del, 3))
        if self.pending_add:
            await conn.execute(query("gateway.sql", "insert_pending"), *columns(self.pending_add, 7))
        records = records or [[] for _ in range(15)]
        if self.orders or self.outbox or records[0]:
            # Notifications wake the dispatchers at commit, and only then, without waiting for their poll.
            await conn.execute(
                query("gateway.sql", "write_batch"), *columns(self.orders, 12), *columns(self.outbox, 10), *records
            )
        if self.dead:
            rows = await conn.fetch(query("gateway.sql", "insert_dead_letters"), *columns(self.dead, 8))
            return [r["id"] for r in rows]
        return []


def columns(rows: list[tuple[Any, ...]], width: int) -> list[list[Any]]:
    return [list(col) for col in zip(*rows, strict=True)] if rows else [[] for _ in range(width)]


async def read_batch(
    conn: asyncpg.Connection, order_ids: list[tuple[str, str]], *, validated: bool
) -> tuple[
    dict[tuple[str, str], OrderState],
    dict[tuple[str, str], dict[int, EventEnvelope]],
    dict[tuple[str, str], dict[uuid.UUID, Verdict]],
    dict[str, dict[str, Any]],
    dict[tuple[str, str], tuple[int, bytes]],
]:
    """The orders' rows and buffered steps, their rejected steps by event_id and the tenants' limits
    (when steps are `validated`), and their decision-log chain heads: one statement (issue 17)."""
    tenants = sorted({tenant for tenant, _ in order_ids})
    rows = await conn.fetch(query("gateway.sql", "read_batch"), *pairs(order_ids), tenants, validated)
    pending: dict[tuple[str, str], dict[int, EventEnvelope]] = defaultdict(dict)
    rejected: dict[tuple[str, str], dict[uuid.UUID, Verdict]] = defaultdict(dict)
    limits: dict[str, dict[str, Any]] = {}
    heads: dict[tuple[str, str], tuple[int, bytes]] = {}
    order_rows = []
    for row in rows:
        kind = row["kind"]
        if kind == "order":
            order_rows.append(row)
        elif kind == "head":
            heads[(row["tenant_id"], row["order_id"])] = (row["position"], bytes(row["hash"]))
        elif kind == "pending":
            pending[(row["tenant_id"], row["order_id"])][row["seq_id"]] = parse_envelope(row["envelope"])
        elif kind == "rejected":
            verdict = Verdict(ErrorCode(row["code"]), row["message"], row["check_id"])
            rejected[(row["tenant_id"], row["order_id"])][row["event_id"]] = verdict
        else:
            limits[row["tenant_id"]] = tenant_limits(Decimal(row["max_order_amount"]), row["max_list_items"])
    states = {(r["tenant_id"], r["order_id"]): state_of(r, pending) for r in order_rows}
    for oid, steps in pending.items():
        if oid not in states:
            # the plan of a buffered step (any: they share it, or PLAN_MISMATCH kept them out)
            plan_id = next(iter(steps.values())).plan_id
            states[oid] = OrderState(oid[1], plan_id=plan_id, buffered=frozenset(steps))
    if validated:  # issue 13: a step held for approval takes its order's next seq
        await lifecycle_records.read_held(conn, states, order_ids)
    return states, pending, rejected, limits, heads


def plan_writes(
    resolution: Resolution,
    traces: dict[uuid.UUID, str | None],
    writes: Writes,
) -> int:
    """Turn one order's resolution into rows; return how many buffered events it drained."""
    after = resolution.after
    if after.status is not None and after != resolution.before:
        writes.orders.append(
            (
                after.order_id,
                tenant_of(resolution),
                after.plan_id,
                str(after.status),
                after.last_seq,
                after.tombstone,
                after.outbox_count,
                after.process or "order",
                after.process_version or 1,
                json.dumps(dict(after.facts), default=str),
                "\x1f".join(sorted(after.superseded)),  # identifiers never contain U+001F
                after.deadline_at,
            )
        )
    for rejection in resolution.rejections:
        if rejection.replay:
            continue
        event, verdict = rejection.event, rejection.verdict
        writes.rejected.append(
            (
                event.event_id,
                event.order_id,
                event.plan_id,
                event.tenant_id,
                event.seq_id,
                str(event.event_type),
                verdict.code.value,
                verdict.check,
                postgres_text(verdict.message),
                rejection.drained,
                event.model_dump_json(),
            )
        )
    tenant = tenant_of(resolution)
    for seq in resolution.unbuffered:
        writes.pending_del.append((after.order_id, seq, tenant))
    for event in resolution.buffered:
        writes.pending_add.append(
            (
                event.order_id,
                event.seq_id,
                event.event_id,
                event.plan_id,
                event.model_dump_json(),
                traces.get(event.event_id),
                event.tenant_id,
            )
        )
    for applied in resolution.applied:
        if applied.effect:  # issue 14: notified once its effect succeeds (nexus.saga.outcomes)
            continue
        event = applied.event
        status_after = applied.status
        notification_id = outbox_id_for(event.event_id, event.tenant_id)
        payload = {
            "notification_id": str(notification_id),
            "order_id": event.order_id,
            "plan_id": event.plan_id,
            "tenant_id": event.tenant_id,
            "position": applied.position,
            "event_type": str(event.event_type),
            "seq_id": event.seq_id,
            "status": str(status_after),
        }
        # The envelope's JSON spliced in as it is (the column is jsonb): not decoded to be encoded again.
        body = f'{json.dumps(payload)[:-1]}, "event": {event.model_dump_json()}}}'
        writes.outbox.append(
            (
                notification_id,
                event.order_id,
                applied.position,
                event.event_id,
                str(event.event_type),
                event.seq_id,
                event.plan_id,
                body,
                traces.get(event.event_id),
                event.tenant_id,
            )
        )
    return sum(1 for a in resolution.applied if a.drained)


def state_of(row: Any, pending: dict[tuple[str, str], dict[int, EventEnvelope]]) -> OrderState:
    """An order's state from its row (read_batch) and its buffered steps."""
    return OrderState(
        order_id=row["order_id"],
        plan_id=row["plan_id"],
        status=as_status(row["status"]),
        last_seq=row["last_seq"],
        buffered=frozenset(pending.get((row["tenant_id"], row["order_id"]), {})),
        tombstone=row["tombstone"],
        outbox_count=row["outbox_count"],
        process=row["process"],
        process_version=row["process_version"],
        facts=json.loads(row["facts"]) if row["facts"] != "{}" else {},
        superseded=frozenset(row["superseded_plans"] or ()),
        deadline_at=row["deadline_at"],
    )


def postgres_text(value: str) -> str:
    """PostgreSQL text holds neither NUL nor lone surrogates: keep the dead letter, escaped, rather than lose it."""
    return value.replace("\x00", "\\u0000").encode("utf-8", "backslashreplace").decode("utf-8")


def pairs(keys: Sequence[tuple[str, str]]) -> tuple[list[str], list[str]]:
    """(tenant, order_id) pairs as the two arrays the queries take."""
    return [t for t, _ in keys], [o for _, o in keys]


def tenant_of(resolution: Resolution) -> str:
    for event, _, _ in resolution.decisions:
        return event.tenant_id
    return "default"
