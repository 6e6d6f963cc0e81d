"""An unstarted plan's expiry (issue 34, item 5): a plan started with no step gets an implicit deadline of
NEXUS_PLAN_START_TIMEOUT_S, and the deadline sweeper ends it as a TOMBSTONE (abort_code timeout) with no
notification, once; a plan that had its first step is not touched."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from nexus.gateway import Gateway
from nexus.settings import Settings
from nexus.store.database import Database
from tests.conftest import fast_settings
from tests.factories import step_json

CREATED = step_json("x", "p", 1)["data"]


@pytest.fixture
def settings(database_url: str) -> Settings:
    """Plans with no step expire after a second."""
    return fast_settings(database_url, plan_start_timeout_s=1.0)


async def test_an_unstarted_plan_ends_as_a_silent_timeout_tombstone(api: httpx.AsyncClient, db: Database) -> None:
    """Past the start timeout, the sweeper ends a plan with no step (TOMBSTONE, abort_code timeout in the
    decision log, no outbox row) once, leaves a started plan alone, and the plan's late step is DISCARD."""
    for order_id in ("o-idle", "o-busy"):
        assert (await api.post("/v1/plans", json={"order_id": order_id})).status_code == 201
    step = await api.post("/v1/orders/o-busy/steps", json={"step": "OrderCreated", "data": CREATED})
    assert step.json()["decision"] == "APPLY"
    gateway = Gateway(db)
    assert await gateway.abort_overdue() == 0  # not yet due
    await asyncio.sleep(1.3)
    assert await gateway.abort_overdue() == 1
    assert await gateway.abort_overdue() == 0  # once
    row = await db.fetchrow("SELECT status, tombstone, process FROM orders WHERE order_id = 'o-idle'")
    assert dict(row) == {"status": "aborted", "tombstone": True, "process": "order"}
    assert await db.fetchval("SELECT count(*) FROM outbox WHERE order_id = 'o-idle'") == 0
    log = await db.fetch("SELECT event_type, decision, message, actor FROM decision_log WHERE order_id = 'o-idle'")
    assert [(r["event_type"], r["decision"], r["actor"]) for r in log] == [
        ("ABORT_PLAN", "TOMBSTONE", "system:deadline")
    ]
    assert "abort_code timeout" in log[0]["message"]
    assert await db.fetchval("SELECT status FROM orders WHERE order_id = 'o-busy'") == "created"
    late = await api.post("/v1/orders/o-idle/steps", json={"step": "OrderCreated", "data": CREATED})
    assert late.json()["decision"] == "DISCARD"
