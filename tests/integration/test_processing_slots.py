"""Processing slots on the real app (issue 34: C's p99 under A's load), real PostgreSQL: with the one slot taken,
another tenant's request is served before a busy tenant's queued ones; a long poll or a step waiting for its
shared transaction holds no slot; the probes are answered with every slot taken."""

from __future__ import annotations

import asyncio
import time

import asyncpg
import httpx
import pytest

from nexus.auth.keys import create_key
from nexus.auth.roles import Role
from nexus.auth.slots import ProcessingSlots
from nexus.gateway import Gateway
from nexus.ingress.http import create_app
from nexus.settings import Settings
from nexus.store.database import Database

pytestmark = pytest.mark.slow


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def agent(db: Database, tenant: str) -> str:
    return (await create_key(db, tenant, frozenset({Role.AGENT}), f"{tenant}-agent"))[1]


async def until(predicate: object, what: str) -> None:
    deadline = time.monotonic() + 20
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.01)


async def test_another_tenants_request_is_served_before_a_busy_tenants_queued_ones(
    settings: Settings, db: Database
) -> None:
    """One slot, taken; acme's three requests queue for it, then globex's one: once the slot is free globex's is
    answered second, before acme's second and third (a FIFO of requests would answer it fourth)."""
    app = create_app(db, Gateway(db), settings=settings.replace(processing_slots=1))
    slots: ProcessingSlots = app.state.processing_slots
    acme, globex = await agent(db, "acme"), await agent(db, "globex")
    answered: list[str] = []
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://api") as api:
        assert (await api.get("/v1/processes", headers=bearer(acme))).status_code == 200  # keys cached

        async def call(name: str, key: str) -> None:
            answer = await api.get("/v1/processes", headers=bearer(key))
            assert answer.status_code == 200, answer.text
            answered.append(name)

        held = await slots.acquire("someone")
        tasks = []
        for i in range(3):
            tasks.append(asyncio.create_task(call(f"acme-{i}", acme)))
            await until(lambda i=i: slots.waiting("acme") == i + 1, "acme's request waiting for the slot")
        tasks.append(asyncio.create_task(call("globex", globex)))
        await until(lambda: slots.waiting("globex") == 1, "globex's request waiting for the slot")
        assert (await api.get("/healthz")).status_code == 200  # the probes take no slot
        held.release()
        await asyncio.gather(*tasks)
    assert answered == ["acme-0", "globex", "acme-1", "acme-2"]


async def test_waits_and_shared_transactions_hold_no_slot(  # type: ignore[no-untyped-def]
    start_gateway, settings: Settings, db: Database, database_url: str
) -> None:
    """One slot: while acme's long poll waits, and while globex's step waits for its shared transaction (the orders
    advisory lock held), globex's reads are answered: neither wait holds the slot."""
    _, base = start_gateway("--no-dispatcher", settings_=settings.replace(processing_slots=1))
    acme, globex = await agent(db, "acme"), await agent(db, "globex")
    async with httpx.AsyncClient(base_url=base, timeout=30) as api:
        poll = asyncio.create_task(api.get("/v1/orders/o-1", params={"wait": "4"}, headers=bearer(acme)))
        await asyncio.sleep(0.5)  # the poll in first, waiting
        read = await api.get("/v1/processes", headers=bearer(globex))
        assert read.status_code == 200 and not poll.done(), "globex's read waited for acme's long poll"
        assert (await poll).status_code == 404
        plan = await api.post("/v1/plans", json={"order_id": "g-1", "process": "order"}, headers=bearer(globex))
        assert plan.status_code in (200, 201), plan.text
        conn = await asyncpg.connect(database_url)
        try:
            lock = conn.transaction()
            await lock.start()
            # the order's advisory lock, as Gateway.submit takes it (gateway.sql lock_orders)
            await conn.execute("SELECT pg_advisory_xact_lock(nexus_order_lock('globex', 'g-1'))")
            body = {"step": "OrderCreated", "data": order_data()}
            step = asyncio.create_task(api.post("/v1/orders/g-1/steps", json=body, headers=bearer(globex)))
            await asyncio.sleep(1.0)  # the step in its transaction, waiting for the lock
            read = await api.get("/v1/processes", headers=bearer(globex))
            assert read.status_code == 200 and not step.done(), "the read waited for the step's transaction"
            await lock.rollback()
        finally:
            await conn.close()
        assert (await step).status_code == 200


def order_data() -> dict[str, object]:
    return {"items": [{"product_id": "p", "quantity": 1, "unit_price": 10}], "total_amount": 10}


async def test_an_open_stream_holds_no_slot(  # type: ignore[no-untyped-def]
    start_gateway, settings: Settings, db: Database
) -> None:
    """One slot: while acme's SSE stream of an order is open, globex's read is answered (the stream gave its slot
    back when it took its wait slot)."""
    _, base = start_gateway("--no-dispatcher", settings_=settings.replace(processing_slots=1))
    acme, globex = await agent(db, "acme"), await agent(db, "globex")
    async with httpx.AsyncClient(base_url=base, timeout=30) as api:
        plan = await api.post("/v1/plans", json={"order_id": "a-1", "process": "order"}, headers=bearer(acme))
        assert plan.status_code in (200, 201), plan.text
        async with api.stream("GET", "/v1/orders/a-1/stream", headers=bearer(acme)) as stream:
            assert stream.status_code == 200
            read = await asyncio.wait_for(api.get("/v1/processes", headers=bearer(globex)), 10)
            assert read.status_code == 200, read.text
