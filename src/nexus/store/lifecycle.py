"""The gateway's side of the plan lifecycle: what `Gateway.submit` reads and writes for held steps
(approvals) and for the waiters of an order (NOTIFY), in the transaction of the decisions themselves.
Every row is keyed by (tenant, order)."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import asyncpg

from nexus.core.decide.approvals import ApprovalStatus
from nexus.core.decide.plan import BatchReads
from nexus.core.decide.rows import ApprovalRow
from nexus.core.order_state import OrderState
from nexus.core.process_model import Verdict
from nexus.errors import ApprovalNotPendingError
from nexus.store.queries import query

__all__ = ["ApprovalDecision", "decide_approvals", "notify_orders", "with_unstarted_plans", "write_approvals"]


@dataclasses.dataclass(frozen=True, slots=True)
class ApprovalDecision:
    """A person's (or the expiry sweeper's) answer to a held step, applied by `Gateway.submit_approval`."""

    approval_id: uuid.UUID
    verdict: Verdict | None
    """None approves; a verdict (APPROVAL_DENIED) denies."""
    status: ApprovalStatus
    """approved, denied or expired (the approvals row's new status)."""
    by: str


async def decide_approvals(conn: asyncpg.Connection, decided: Mapping[uuid.UUID, ApprovalDecision]) -> None:
    """Turn each answered approval from pending to its answer, once (under its order's lock)."""
    for answer in decided.values():
        row = await conn.fetchrow(
            query("lifecycle.sql", "decide_approval"), answer.approval_id, answer.status, answer.by
        )
        if row is None:
            raise ApprovalNotPendingError(f"approval {answer.approval_id} is not pending")


async def write_approvals(
    conn: asyncpg.Connection, rows: Sequence[ApprovalRow], cancelled: Sequence[uuid.UUID]
) -> None:
    if rows:
        await conn.execute(query("lifecycle.sql", "insert_approvals"), *_columns(rows, 11))
    if cancelled:
        await conn.execute(
            query("lifecycle.sql", "cancel_approvals"), list(cancelled), ApprovalStatus.CANCELLED.value, "gateway",
            ApprovalStatus.PENDING.value,
        )  # fmt: skip


async def notify_orders(conn: asyncpg.Connection, keys: Iterable[tuple[str, str]]) -> None:
    """Wake the waiters (long poll, SSE) of these orders at commit; the payload names tenant and order."""
    pairs = sorted(set(keys))
    if pairs:
        await conn.execute(query("gateway.sql", "notify_orders"), [t for t, _ in pairs], [o for _, o in pairs])


async def with_unstarted_plans(
    conn: asyncpg.Connection, reads: BatchReads, order_ids: Sequence[tuple[str, str]], timeout_s: float
) -> BatchReads:
    """`reads` with the state of each order that is a plan started with no step yet: its process and its
    implicit deadline (`core/decide/deadlines.unstarted_overdue`), read under the orders' locks."""
    rows = await conn.fetch(
        query("lifecycle.sql", "unstarted_deadlines"), [t for t, _ in order_ids], [o for _, o in order_ids], timeout_s
    )
    if not rows:
        return reads
    states = dict(reads.states)
    for r in rows:
        states[(r["tenant_id"], r["order_id"])] = OrderState(
            r["order_id"], process=r["process"], deadline_at=r["deadline_at"]
        )
    return dataclasses.replace(reads, states=states)


def _columns(rows: Sequence[tuple[Any, ...]], width: int) -> list[list[Any]]:
    return [list(col) for col in zip(*rows, strict=True)] if rows else [[] for _ in range(width)]
