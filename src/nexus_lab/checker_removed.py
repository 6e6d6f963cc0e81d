"""What `nexus check` proves of an order removed after its retention period (nexus.retention), from its marker.

The order's rows have left; its removal marker (removed_orders) kept its plan, final status, last_seq, how many
notifications it created and how their deliveries ended. The notifications' ids are derived from their events
(`outbox_id_for`), so the report's honest events name them again, in process order, and the sink's log is
checked against them as against outbox rows. What the marker proves, per check:

- `order`: status, last_seq and plan_id, from the marker;
- `outbox`: the marker's notification count is the expected one (the rows themselves have left);
- `delivered`: every delivery was delivered at removal (none pending, none dead): a remover that took an
  order with an open delivery leaves `pending` > 0 here, and the sink never sees those notifications;
- `sink`, `acks`: as for any order (the sink's log and the agent's report are outside the database);
- `dead_letters`, `rejected`, `approvals`: their rows left with the order; the acks prove those answers.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from nexus.core.decide.rows import outbox_id_for

REMOVED_UNCHECKED = ("dead_letters", "rejected", "approvals")
"""Checks whose rows leave with a removed order (its acks prove the answers)."""


def derived_outbox(marker: Mapping[str, Any], event_ids: Sequence[str]) -> list[dict[str, Any]]:
    """The removed order's notifications as outbox rows, named from the events expected to have applied."""
    tenant = str(marker["tenant_id"])
    return [
        {"id": outbox_id_for(uuid.UUID(eid), tenant), "position": n, "event_id": eid, "order_id": marker["order_id"]}
        for n, eid in enumerate(event_ids, start=1)
    ]


def check_removed_outbox(plan: Mapping[str, Any], marker: Mapping[str, Any]) -> list[str]:
    want = plan["expected"]["notifications"]
    if marker["outbox_count"] != want:
        return [f"removed with {marker['outbox_count']} notifications, expected {want}"]
    return []


def check_removed_delivered(marker: Mapping[str, Any]) -> list[str]:
    if marker["pending"] or marker["delivery_state"] not in ("delivered", "none"):
        return [
            f"removed with deliveries {marker['delivery_state']}: {marker['delivered']} delivered, "
            f"{marker['dead']} dead, {marker['pending']} pending"
        ]
    return []


def removed_deliveries(markers: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The removed orders' deliveries as the run-wide count reads them (one row per delivery, by state)."""
    rows: list[dict[str, Any]] = []
    for m in markers.values():
        for state in ("delivered", "dead", "pending"):
            rows.extend({"state": state, "attempts": 1} for _ in range(m[state]))
    return rows
