"""Issue 33 item 1 on a real PostgreSQL: an order's finished_at is decided by the fold (core/decide/finished.py) and
written by `write_batch` from its row's flag, whichever door finished the order: steps on `/v1/events`' path (the
gateway's submit), the steps API, a plan's end (`POST /v1/orders/{id}/abort`) and the deadline sweeper; each
finished order counts out of `live_orders` and each live one stays in."""

from __future__ import annotations

import json

import httpx

from nexus.core.decide.items import Incoming
from nexus.gateway import Gateway
from nexus.store.database import Database
from tests.factories import STEPS, plan_json, step_json

LIVE = "SELECT tenant_id, coalesce(sum(used), 0)::int AS n FROM tenant_usage WHERE quota = 'live_orders' GROUP BY 1"
UNFINISHED = "SELECT tenant_id, count(*)::int AS n FROM orders WHERE finished_at IS NULL GROUP BY 1"


async def steps(api: httpx.AsyncClient, order_id: str, n: int) -> None:
    """The order's plan started and its first `n` steps of the order process sent through the steps API."""
    assert (await api.post("/v1/plans", json={"order_id": order_id})).status_code == 201
    for seq in range(1, n + 1):
        body = {"step": STEPS[seq - 1], "data": step_json(order_id, "p", seq)["data"]}
        answer = await api.post(f"/v1/orders/{order_id}/steps", json=body)
        assert answer.json()["decision"] == "APPLY", answer.text


async def test_an_order_finished_through_each_door_has_finished_at_and_leaves_live_orders(
    api: httpx.AsyncClient, db: Database
) -> None:
    """Orders completed by events and by the steps API, aborted by a plan's end and by the deadline sweeper get
    finished_at; one live order of each tenant does not, and live_orders counts exactly the unfinished ones."""
    gateway = Gateway(db)
    await gateway.submit([Incoming.parse(json.dumps(e)) for e in plan_json("ev-done", "p-ev-done", 5)])
    await gateway.submit([Incoming.parse(json.dumps(step_json("ev-live", "p-ev-live", 1)))])
    await steps(api, "api-done", 5)
    await steps(api, "api-live", 2)
    await steps(api, "api-ended", 1)
    ended = await api.post("/v1/orders/api-ended/abort", json={"reason": "stop"})
    assert ended.json()["decision"] == "APPLY", ended.text
    await steps(api, "late", 3)
    await db.execute("UPDATE orders SET deadline_at = now() - interval '1 second' WHERE order_id = 'late'")
    assert await gateway.abort_overdue() == 1
    rows = await db.fetch("SELECT order_id, status, finished_at IS NOT NULL AS finished FROM orders ORDER BY 1")
    assert [tuple(r) for r in rows] == [
        ("api-done", "completed", True),
        ("api-ended", "aborted", True),
        ("api-live", "inventory_validated", False),
        ("ev-done", "completed", True),
        ("ev-live", "created", False),
        ("late", "aborted", True),
    ]
    assert dict(await db.fetch(LIVE)) == dict(await db.fetch(UNFINISHED)) == {"acme": 1, "default": 1}
