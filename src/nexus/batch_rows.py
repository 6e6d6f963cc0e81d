"""The store's side of one `Gateway.submit` transaction: the batch's orders read in one statement
(`read_batch` -> `BatchReads`), and a `BatchPlan`'s rows written with a fixed number of set-based
statements whatever the batch size (`write_plan`). No decision here: the plan comes from the core.

Every writer of orders goes through the gateway's fold (steps, the sweepers, the saga calls' outcomes),
so `write_plan` is the one writer of a plan's rows.
"""

from __future__ import annotations

import dataclasses
import json
import re
import uuid
from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence
from decimal import Decimal
from typing import Any

import asyncpg
import orjson

from nexus import plan_steps
from nexus.audit.log import Records, record_rows
from nexus.core.decide import rows as decide_rows
from nexus.core.decide.expiry import BufferedStep
from nexus.core.decide.numbering import FirstVerdictRow
from nexus.core.decide.plan import BatchPlan, BatchReads
from nexus.core.envelope import EventEnvelope, parse_envelope
from nexus.core.list_limits import tenant_limits
from nexus.core.order_state import OrderState
from nexus.core.process_model import Verdict
from nexus.errors import ErrorCode
from nexus.store import lifecycle as lifecycle_records
from nexus.store.queries import query
from nexus.store.rows import json_rows

__all__ = ["pairs", "read_batch", "read_buffered", "write_plan", "write_rows"]

OrderKey = tuple[str, str]


def columns(rows: Sequence[tuple[Any, ...]], width: int) -> list[list[Any]]:
    """Rows (named tuples) as the parameter arrays of a set-based statement."""
    return [list(col) for col in zip(*rows, strict=True)] if rows else [[] for _ in range(width)]


def pairs(keys: Sequence[OrderKey]) -> tuple[list[str], list[str]]:
    """(tenant, order_id) pairs as the two arrays the queries take."""
    return [t for t, _ in keys], [o for _, o in keys]


async def read_batch(
    conn: asyncpg.Connection,
    order_ids: list[OrderKey],
    *,
    validated: bool,
    numbering: tuple[Sequence[OrderKey], Sequence[uuid.UUID]] = ((), ()),
) -> BatchReads:
    """The orders' rows and buffered steps, their rejected steps by event_id and the tenants' limits
    (when steps are `validated`), the removal markers of removed orders, their decision-log chain
    heads, and the numbering's reads of the orders `numbering` names (`plan_steps.asked`: orders with
    proposals or plan ends, the proposals' event ids): one statement."""
    tenants = sorted({tenant for tenant, _ in order_ids})
    numbered_keys, event_ids = numbering
    rows = await conn.fetch(
        query("gateway.sql", "read_batch"), *pairs(order_ids), tenants, validated, *pairs(numbered_keys), event_ids
    )
    numbering_rows = []
    pending: dict[OrderKey, dict[int, EventEnvelope]] = defaultdict(dict)
    numbered: dict[OrderKey, set[uuid.UUID]] = defaultdict(set)
    rejected: dict[OrderKey, dict[uuid.UUID, Verdict]] = defaultdict(dict)
    limits: dict[str, dict[str, Any]] = {}
    heads: dict[OrderKey, tuple[int, bytes]] = {}
    order_rows = []
    held = []
    markers = []
    for row in rows:
        kind = row["kind"]
        if kind == "order":
            order_rows.append(row)
        elif kind == "held":
            held.append(row)
        elif kind == "head":
            heads[(row["tenant_id"], row["order_id"])] = (row["position"], bytes(row["hash"]))
        elif kind == "pending":
            step = pending[(row["tenant_id"], row["order_id"])][row["seq_id"]] = parse_envelope(row["envelope"])
            if row["numbered"]:
                numbered[(row["tenant_id"], row["order_id"])].add(step.event_id)
        elif kind == "removed":
            markers.append(row)
        elif kind in plan_steps.KINDS:
            numbering_rows.append(row)
        elif kind == "rejected":
            verdict = Verdict(ErrorCode(row["code"]), row["message"], row["check_id"])
            rejected[(row["tenant_id"], row["order_id"])][row["event_id"]] = verdict
        else:
            limits[row["tenant_id"]] = tenant_limits(Decimal(row["max_order_amount"]), row["max_list_items"])
    states = _states(order_rows, markers, held, pending)
    numbered_steps = {k: frozenset(v) for k, v in numbered.items()}
    numbering_reads = plan_steps.numbering_of(numbering_rows, numbered_keys)
    live = {(r["tenant_id"], r["order_id"]): r["live"] for r in order_rows}
    return BatchReads(states, pending, rejected, limits, heads, numbered_steps, numbering=numbering_reads, live=live)


def _states(
    order_rows: Sequence[asyncpg.Record],
    markers: Sequence[asyncpg.Record],
    held: Sequence[asyncpg.Record],
    pending: Mapping[OrderKey, Mapping[int, EventEnvelope]],
) -> dict[OrderKey, OrderState]:
    """The batch's orders' states from their rows (`read_batch`'s 'order', 'removed' and 'held' rows) and
    buffered steps."""
    states = {(r["tenant_id"], r["order_id"]): state_of(r, pending) for r in order_rows}
    for row in markers:  # a removed order: its marker decides its steps (core/decide/removed.py)
        states.setdefault((row["tenant_id"], row["order_id"]), removed_state(row))
    for oid, steps in pending.items():
        if oid not in states:
            # the plan of a buffered step (any: they share it, or PLAN_MISMATCH kept them out)
            plan_id = next(iter(steps.values())).plan_id
            states[oid] = OrderState(oid[1], plan_id=plan_id, buffered=frozenset(steps))
    for row in held:  # a step held for approval takes its order's next seq
        key = (row["tenant_id"], row["order_id"])
        state = states.get(key) or OrderState(row["order_id"], plan_id=row["plan_id"])
        states[key] = dataclasses.replace(state, held=row["event_id"])
    return states


def _buffered_step(r: asyncpg.Record) -> BufferedStep:
    return BufferedStep(
        r["tenant_id"], r["order_id"], r["seq_id"], r["event_id"], r["plan_id"], r["envelope"], r["received_at"],
        r["effect_status"], r["effect_executed_at"], r["effect_updated_at"],
    )  # fmt: skip


async def read_buffered(conn: asyncpg.Connection, order_ids: list[OrderKey]) -> tuple[list[BufferedStep], Any]:
    """The buffered steps of locked orders, oldest first, and the database's clock (None: no step)."""
    rows = await conn.fetch(query("gateway.sql", "read_buffered"), *pairs(order_ids))
    steps = [_buffered_step(r) for r in rows]
    return steps, rows[0]["now"] if rows else None


class UnreadOrderError(RuntimeError):
    """An order row to write whose order was not read under its lock: its count cannot be known."""


def order_counts(
    orders: Sequence[decide_rows.OrderRow], live: Mapping[OrderKey, bool], read: Collection[OrderKey]
) -> tuple[list[str], list[int], list[str], list[str]]:
    """What writing `orders` changes of their tenants' counts (migration 0045): the live_orders delta of each tenant
    whose count changes ((live after) - (live before): an order is live while its finished_at is NULL, and a row's
    finished_at is NULL exactly when it is not `finished`), as two arrays, and the orders it inserts (stored
    before: in `live`, from `read_batch`), as two arrays. Each order must be among those `read` (under its lock, in
    this transaction): one that was not is refused (`UnreadOrderError`), never counted as new."""
    deltas: dict[str, int] = {}
    inserted: list[OrderKey] = []
    for row in orders:
        key = (row.tenant_id, row.order_id)
        before = live.get(key)
        if before is None:
            if key not in read:
                raise UnreadOrderError(f"order {key} written without being read under its lock")
            inserted.append(key)
        delta = (not row.finished) - (before is True)
        if delta:
            deltas[row.tenant_id] = deltas.get(row.tenant_id, 0) + delta
    tenants = [t for t, n in deltas.items() if n]
    return tenants, [deltas[t] for t in tenants], *pairs(inserted)


async def write_rows(
    conn: asyncpg.Connection,
    *,
    live: Mapping[OrderKey, bool] | None = None,
    read: Collection[OrderKey] = (),
    orders: Sequence[decide_rows.OrderRow] = (),
    notifications: Sequence[decide_rows.OutboxRow] = (),
    buffered: Sequence[decide_rows.PendingRow] = (),
    unbuffered: Sequence[decide_rows.PendingDelete] = (),
    rejected: Sequence[decide_rows.RejectedRow] = (),
    dead: Sequence[decide_rows.DeadLetterRow] = (),
    approvals: Sequence[decide_rows.ApprovalRow] = (),
    cancelled: Sequence[uuid.UUID] = (),
    records: Records | None = None,
    wake: Sequence[OrderKey] = (),
    decisions: Sequence[decide_rows.DecisionRecord] = (),
    first_verdicts: Sequence[FirstVerdictRow] = (),
) -> list[int]:
    """Write the rows; `live` and `read`: what was read of the orders (`order_counts`: what their write counts);
    `records`: the decision log's records (audit.log.record_rows); `wake`: the orders whose waiters wake at
    commit; `decisions`: a Kafka batch's, for the decisions topic; `first_verdicts`: the newly numbered steps'
    (`plan_steps`). The usual rows (orders, notifications and their deliveries, decision log, decisions, first
    verdicts), their counts and the wake-ups go in one statement. Returns the dead letters' ids, in order."""
    await lifecycle_records.write_approvals(conn, list(approvals), list(cancelled))
    if rejected:
        await conn.execute(query("gateway.sql", "insert_rejected"), *columns(rejected, 11))
    if unbuffered:
        await conn.execute(query("gateway.sql", "delete_pending"), *columns(unbuffered, 3))
    if buffered:
        await conn.execute(query("gateway.sql", "insert_pending"), *columns(buffered, 7))
    if orders or notifications or decisions or first_verdicts or (records is not None and records.rows):
        # Notifications wake the dispatchers at commit, and only then, without waiting for their poll.
        logged = records or Records([])
        counts = order_counts(orders, live or {}, read) if orders else ([], [], [], [])
        await conn.execute(
            query("gateway.sql", "write_batch"),
            json_rows(orders), json_rows(notifications), json_rows(logged.rows), logged.at, *pairs(sorted(set(wake))),
            json_rows(decisions), json_rows(first_verdicts), *counts,
        )  # fmt: skip
    elif wake:
        await lifecycle_records.notify_orders(conn, wake)
    if dead:
        rows = await conn.fetch(query("gateway.sql", "insert_dead_letters"), *columns(dead, 8))
        return [r["id"] for r in rows]
    return []


async def write_plan(
    conn: asyncpg.Connection, plan: BatchPlan, reads: BatchReads, read: Iterable[OrderKey]
) -> list[int]:
    """Write everything a plan decided (its orders' waiters woken at commit), in the caller's transaction;
    the dead letters' ids, in order. `reads`: what `read_batch` read of the orders `read` (their decision-log
    chain heads, and whether each is stored and live: what their write counts)."""
    known = set(read)
    records = await record_rows(conn, plan.log, reads.heads, known)
    return await write_rows(
        conn, live=reads.live, read=known, orders=plan.orders, notifications=plan.notifications, buffered=plan.buffered,
        unbuffered=plan.unbuffered, rejected=plan.rejected, dead=plan.dead_letters, approvals=plan.approvals,
        cancelled=plan.cancelled_approvals, records=records, wake=plan.wake, decisions=plan.decisions,
        first_verdicts=plan.first_verdicts,
    )  # fmt: skip


_LONG_NUMBER = re.compile(r"[0-9]{19}")


def _facts(text: str) -> dict[str, Any]:
    """An order's facts (jsonb as text): orjson unless a number may be beyond 64 bits (orjson's float)."""
    if text == "{}":
        return {}
    facts: dict[str, Any] = (orjson.loads if _LONG_NUMBER.search(text) is None else json.loads)(text)
    return facts


_MARKER_COLUMNS = ("order_id", "plan_id", "status", "last_seq", "tombstone", "outbox_count", "process")
"""The columns of read_batch's 'removed' row that a removed order's state keeps, named as its fields."""


def removed_state(row: Any) -> OrderState:
    """A removed order's state from its removal marker (read_batch's 'removed' row)."""
    return OrderState(**{name: row[name] for name in _MARKER_COLUMNS}, removed=True)


def state_of(row: Any, pending: Mapping[OrderKey, Mapping[int, EventEnvelope]]) -> OrderState:
    """An order's state from its row (read_batch) and its buffered steps."""
    return OrderState(
        order_id=row["order_id"],
        plan_id=row["plan_id"],
        status=row["status"],
        last_seq=row["last_seq"],
        buffered=frozenset(pending.get((row["tenant_id"], row["order_id"]), {})),
        tombstone=row["tombstone"],
        outbox_count=row["outbox_count"],
        process=row["process"],
        process_version=row["process_version"],
        facts=_facts(row["facts"]),
        superseded=frozenset(row["superseded_plans"] or ()),
        deadline_at=row["deadline_at"],
    )
