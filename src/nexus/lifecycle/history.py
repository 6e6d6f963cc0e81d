"""An order's and a plan's history, read from the decision log (`GET /v1/orders/{id}/history`,
`GET /v1/plans/{plan_id}/history`, `nexus orders show`)."""

from __future__ import annotations

from typing import Any

from nexus.errors import NotFoundError
from nexus.store.database import Database
from nexus.store.queries import query
from nexus.store.rows import row_json

HISTORY_FIELDS = (
    "seq", "event_type", "event_id", "decision", "code", "check", "message", "at", "actor", "actor_name",
    "notification_id",
)  # fmt: skip
"""`actor`: who took or caused the decision (`key:<id>`, `kafka:<topic>`, `system:...`; null on records
written before actors); `actor_name`: the name of the key a `key:<id>` stands for (docs/decision-log.md)."""


def history_item(row: Any) -> dict[str, Any]:
    """One decision as the API shows it: exactly HISTORY_FIELDS."""
    return row_json(row, HISTORY_FIELDS)


async def order_history(db: Database, tenant_id: str, order_id: str) -> list[dict[str, Any]]:
    """Every decision taken for the tenant's order, oldest first; NotFoundError when there is none."""
    rows = await db.fetch(query("lifecycle.sql", "order_history"), tenant_id, order_id)
    if not rows:
        raise NotFoundError(f"no history for order {order_id!r}")
    return [history_item(r) for r in rows]


async def plan_history(db: Database, plan_id: str, tenant_id: str | None) -> list[dict[str, Any]]:
    """Every decision taken for the plan's steps (of `tenant_id`; None: every tenant), oldest first;
    NotFoundError when there is none."""
    rows = await db.fetch(query("lifecycle.sql", "plan_history"), plan_id, tenant_id)
    if not rows:
        raise NotFoundError(f"no history for plan {plan_id!r}")
    return [history_item(r) for r in rows]
