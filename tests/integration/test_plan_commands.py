"""A plan's start and end as commands of the fold (issue 33, item 1): `POST /v1/plans` and `.../abort` are
decided under the order's advisory lock (ORDER_EXISTS, the ended plan and position from what is read there)."""

from __future__ import annotations

import asyncio
import json

import asyncpg
import httpx

from nexus.core import wording
from nexus.core.decide.items import Incoming
from nexus.gateway import Gateway
from nexus.processes import builtin_catalog
from nexus.retention.remover import RetentionRemover
from nexus.settings import Settings
from nexus.store.database import Database
from nexus.store.queries import query
from tests.factories import plan_json, step_json

CREATED = step_json("x", "p", 1)["data"]


async def test_a_plan_start_waits_for_the_orders_lock_and_sees_what_it_guarded(
    api: httpx.AsyncClient, db: Database
) -> None:
    """While a batch holding the order's lock creates the order, a plan's start waits for it, then answers
    409 ORDER_EXISTS (the order it committed), and no plan row is written."""
    conn = await asyncpg.connect(db.settings.database_url)
    try:
        async with conn.transaction():
            await conn.execute(query("gateway.sql", "lock_orders"), ["acme"], ["o-held"])
            await conn.execute(
                "INSERT INTO orders (order_id, tenant_id, plan_id, status, last_seq, process, process_version)"
                " VALUES ('o-held', 'acme', 'p-x', 'created', 1, 'order', 1)"
            )
            start = asyncio.create_task(api.post("/v1/plans", json={"order_id": "o-held"}))
            await asyncio.sleep(0.5)
            assert not start.done()  # waiting for the order's lock
        answer = await start
    finally:
        await conn.close()
    assert (answer.status_code, answer.json()["code"]) == (409, "ORDER_EXISTS")
    assert await db.fetchval("SELECT count(*) FROM plans WHERE order_id = 'o-held'") == 0
    again = await api.post("/v1/plans", json={"order_id": "o-new"})
    assert again.status_code == 201 and (await api.post("/v1/plans", json={"order_id": "o-new"})).status_code == 409


async def test_a_plan_end_takes_the_plan_and_position_read_under_the_lock(api: httpx.AsyncClient, db: Database) -> None:
    """An abort sent while a batch holding the order's lock replaces its plan is decided from what that batch
    committed: APPLY on the new plan, at its last seq (not a PLAN_MISMATCH from a read taken before)."""
    assert (await api.post("/v1/plans", json={"order_id": "o-end"})).status_code == 201
    step = await api.post("/v1/orders/o-end/steps", json={"step": "OrderCreated", "data": CREATED})
    assert step.json()["decision"] == "APPLY"
    conn = await asyncpg.connect(db.settings.database_url)
    try:
        async with conn.transaction():
            await conn.execute(query("gateway.sql", "lock_orders"), ["acme"], ["o-end"])
            await conn.execute("UPDATE orders SET plan_id = 'p-replanned' WHERE order_id = 'o-end'")
            abort = asyncio.create_task(api.post("/v1/orders/o-end/abort", json={"reason": "stop"}))
            await asyncio.sleep(0.5)
            assert not abort.done()  # waiting for the order's lock
        answer = await abort
    finally:
        await conn.close()
    assert (answer.status_code, answer.json()["decision"]) == (200, "APPLY"), answer.text
    sent = await db.fetchval(
        "SELECT payload->'event' FROM outbox WHERE order_id = 'o-end' AND event_type = 'ABORT_PLAN'"
    )
    event = json.loads(sent)
    assert (event["plan_id"], event["data"]["aborted_at_seq"], event["data"]["abort_code"]) == (
        "p-replanned",
        1,
        "manual",
    )


async def test_a_plan_start_for_a_removed_order_is_refused_while_its_marker_lasts(
    api: httpx.AsyncClient, db: Database, settings: Settings
) -> None:
    """With retention in seconds: a finished order removed, `POST /v1/plans` with its id answers 409
    ORDER_EXISTS (same wording) and writes no plan while its marker lasts; once the marker's memory passes,
    the id starts a new plan."""
    events = [{**e, "tenant_id": "acme"} for e in plan_json("o-gone", "p-gone", 5)]
    outcomes = await Gateway(db).submit([Incoming.parse(json.dumps(e)) for e in events])
    assert [o.decision.value for o in outcomes] == ["APPLY"] * 5
    remover = RetentionRemover(db, settings.replace(retention_s=1, removed_order_memory_s=1), builtin_catalog())
    await asyncio.sleep(1.5)  # the order's period passes
    assert (await remover.remove_due()).orders == 1
    refused = await api.post("/v1/plans", json={"order_id": "o-gone"})
    assert (refused.status_code, refused.json()["code"]) == (409, "ORDER_EXISTS")
    assert refused.json()["message"] == wording.order_exists()
    assert await db.fetchval("SELECT count(*) FROM plans WHERE order_id = 'o-gone'") == 0
    await asyncio.sleep(1.5)  # the marker's memory passes
    assert await remover.remove_strays() >= 1
    assert (await api.post("/v1/plans", json={"order_id": "o-gone"})).status_code == 201
