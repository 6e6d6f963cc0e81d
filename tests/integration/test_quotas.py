"""Quotas on what a tenant stores (issue 34 item 5), on real PostgreSQL through the in-process API: each
refuses the whole request 429 QUOTA_EXCEEDED naming the quota with nothing written, a tenant's own quota
overrides the default, and another tenant is unaffected."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from nexus.auth.keys import create_key
from nexus.auth.roles import Role
from nexus.gateway import Gateway
from nexus.ingress.http import create_app
from nexus.settings import Settings
from nexus.store.database import Database
from nexus.store.queries import query
from tests.conftest import fast_settings, root_headers
from tests.factories import abort_json, step_json

COUNTS = """
SELECT (SELECT count(*) FROM orders WHERE tenant_id = $1) AS orders,
       (SELECT count(*) FROM pending_events WHERE tenant_id = $1) AS buffered,
       (SELECT count(*) FROM dead_letters WHERE tenant_id = $1) AS dead,
       (SELECT count(*) FROM plans WHERE tenant_id = $1) AS plans,
       (SELECT count(*) FROM api_keys WHERE tenant_id = $1) AS keys
"""


@pytest.fixture
def settings(database_url: str) -> Settings:
    """Quota snapshots read again after 0.2 s, so a quota changed here takes effect after a short wait."""
    return fast_settings(database_url, quota_refresh_s=0.2)


async def set_quotas(db: Database, tenant: str, **quotas: int) -> None:
    """Set a tenant's quotas and wait out the refresh interval, within which a changed quota takes effect."""
    names = ("live_orders", "unstarted_plans", "buffered_steps", "dead_letters", "active_keys")
    await db.execute(query("quotas.sql", "set_tenant_quotas"), tenant, "100000", *(quotas.get(n) for n in names))
    await asyncio.sleep(db.settings.quota_refresh_s)


async def counts(db: Database, tenant: str) -> dict[str, int]:
    row = await db.fetchrow(COUNTS, tenant)
    assert row is not None
    return dict(row)


@pytest.fixture
async def clients(db: Database) -> AsyncIterator[dict[str, httpx.AsyncClient]]:
    """API clients: agent keys of acme and globex, the every-tenant operator and admin key (`root`)."""
    app = create_app(db, Gateway(db))
    out = {}
    for name, tenant in (("acme", "acme"), ("globex", "globex")):
        _, key = await create_key(db, tenant, frozenset({Role.AGENT}), name)
        out[name] = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://api", headers={"Authorization": f"Bearer {key}"}
        )
    out["root"] = httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://api", headers=root_headers()
    )
    yield out
    for client in out.values():
        await client.aclose()


def refused(answer: httpx.Response, quota: str) -> bool:
    body = answer.json()
    return (
        answer.status_code == 429
        and body["code"] == "QUOTA_EXCEEDED"
        and body["quota"] == quota
        and bool(body["request_id"])
    )


async def events(client: httpx.AsyncClient, *envelopes: dict[str, Any]) -> httpx.Response:
    return await client.post("/v1/events", json={"events": list(envelopes)})


async def test_live_orders_quota_refuses_the_whole_batch(clients: dict[str, httpx.AsyncClient], db: Database) -> None:
    """At a live_orders quota of 2 a batch that would create a third order is refused whole (nothing written),
    steps of stored orders still pass, another tenant is unaffected, and an order aborted frees its place."""
    await set_quotas(db, "acme", live_orders=2)
    acme, globex = clients["acme"], clients["globex"]
    too_many = await events(acme, *(step_json(f"o-{i}", f"p-{i}", 1) for i in range(3)))
    assert refused(too_many, "live_orders"), too_many.text
    assert (await counts(db, "acme"))["orders"] == 0
    assert (await events(acme, step_json("o-0", "p-0", 1), step_json("o-1", "p-1", 1))).status_code == 200
    assert refused(await events(acme, step_json("o-2", "p-2", 1)), "live_orders")
    assert (await events(acme, step_json("o-0", "p-0", 2))).status_code == 200
    others = await events(globex, *(step_json(f"o-{i}", f"p-{i}", 1) for i in range(3)))
    assert others.status_code == 200 and (await counts(db, "globex"))["orders"] == 3
    assert (await events(acme, abort_json("o-1", "p-1", 1))).status_code == 200
    assert (await events(acme, step_json("o-2", "p-2", 1))).status_code == 200
    assert (await counts(db, "acme"))["orders"] == 3


async def test_default_quota_comes_from_settings(settings: Settings) -> None:
    """NEXUS_QUOTA_LIVE_ORDERS applies to a tenant without its own quota; `set-limit`'s 0 lifts it for one tenant."""
    db = await Database(settings.replace(quota_live_orders=1)).open()
    try:
        app = create_app(db, Gateway(db))
        _, key = await create_key(db, "acme", frozenset({Role.AGENT}))
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(
            transport=transport, base_url="http://api", headers={"Authorization": f"Bearer {key}"}
        ) as acme:
            assert (await events(acme, step_json("o-1", "p-1", 1))).status_code == 200
            assert refused(await events(acme, step_json("o-2", "p-2", 1)), "live_orders")
            await set_quotas(db, "acme", live_orders=0)
            assert (await events(acme, step_json("o-2", "p-2", 1))).status_code == 200
    finally:
        await db.close()


async def test_buffered_steps_quota_lets_the_missing_step_through(
    clients: dict[str, httpx.AsyncClient], db: Database
) -> None:
    """At its buffered_steps quota a tenant's next step beyond the gap is refused, but the missing step is
    applied (it adds nothing to the buffer) and drains it."""
    await set_quotas(db, "acme", buffered_steps=2)
    acme = clients["acme"]
    assert (
        await events(acme, step_json("o-1", "p-1", 1), step_json("o-1", "p-1", 3), step_json("o-1", "p-1", 4))
    ).status_code == 200
    assert (await counts(db, "acme"))["buffered"] == 2
    assert refused(await events(acme, step_json("o-1", "p-1", 5)), "buffered_steps")
    assert refused(await events(acme, step_json("o-1", "p-1", 2), step_json("o-1", "p-1", 5)), "buffered_steps")
    filled = await events(acme, step_json("o-1", "p-1", 2))
    assert filled.status_code == 200 and filled.json()["results"][0]["decision"] == "APPLY"
    assert (await counts(db, "acme"))["buffered"] == 0
    order = (await acme.get("/v1/orders/o-1")).json()
    assert order["last_seq"] == 4


async def test_unstarted_plans_quota(clients: dict[str, httpx.AsyncClient], db: Database) -> None:
    """At an unstarted_plans quota of 1 a second plan without a step is refused (no plan row); the first
    plan's first step starts it and frees the place; another tenant is unaffected."""
    await set_quotas(db, "acme", unstarted_plans=1)
    acme = clients["acme"]
    assert (await acme.post("/v1/plans", json={"order_id": "o-1"})).status_code == 201
    assert refused(await acme.post("/v1/plans", json={"order_id": "o-2"}), "unstarted_plans")
    assert (await counts(db, "acme"))["plans"] == 1
    assert (await clients["globex"].post("/v1/plans", json={"order_id": "o-2"})).status_code == 201
    data = {"items": [{"product_id": "p", "quantity": 1, "unit_price": 10}], "total_amount": 10, "currency": "USD"}
    step = await acme.post("/v1/orders/o-1/steps", json={"step": "OrderCreated", "data": data})
    assert step.status_code == 200, step.text
    assert (await acme.post("/v1/plans", json={"order_id": "o-2"})).status_code == 201


async def test_numbered_step_counts_against_live_orders(clients: dict[str, httpx.AsyncClient], db: Database) -> None:
    """The steps API's first step of a started plan creates an order: refused at the live_orders quota, with
    no order written; a step of a stored order still passes."""
    acme = clients["acme"]
    assert (await events(acme, step_json("o-0", "p-0", 1))).status_code == 200
    assert (await acme.post("/v1/plans", json={"order_id": "o-1"})).status_code == 201
    await set_quotas(db, "acme", live_orders=1)
    step = await acme.post("/v1/orders/o-1/steps", json={"step": "OrderCreated", "data": {}})
    assert refused(step, "live_orders"), step.text
    assert (await counts(db, "acme"))["orders"] == 1


async def test_dead_letters_quota(clients: dict[str, httpx.AsyncClient], db: Database) -> None:
    """At its dead_letters quota every step request of the tenant is refused, nothing written; another
    tenant's requests pass."""
    await set_quotas(db, "acme", dead_letters=1)
    acme = clients["acme"]
    bad = await events(acme, {"event_type": "OrderCreated", "order_id": "o-1"})
    assert bad.status_code == 200 and bad.json()["results"][0]["decision"] == "DEAD_LETTER"
    assert refused(await events(acme, step_json("o-1", "p-1", 1)), "dead_letters")
    assert (await counts(db, "acme"))["orders"] == 0 and (await counts(db, "acme"))["dead"] == 1
    assert (await events(clients["globex"], step_json("o-1", "p-1", 1))).status_code == 200


async def test_active_keys_quota_on_post_keys(clients: dict[str, httpx.AsyncClient], db: Database) -> None:
    """POST /v1/keys beyond a tenant's active_keys quota is 429 (no key stored); a revoked key frees its place;
    keys spanning every tenant are not counted."""
    await set_quotas(db, "acme", active_keys=2)  # acme holds one agent key already
    root = clients["root"]
    first = await root.post("/v1/keys", json={"tenant": "acme", "roles": ["agent"]})
    assert first.status_code == 201, first.text
    assert refused(await root.post("/v1/keys", json={"tenant": "acme", "roles": ["agent"]}), "active_keys")
    assert (await counts(db, "acme"))["keys"] == 2
    assert (await root.post(f"/v1/keys/{first.json()['id']}/revoke")).status_code == 200
    assert (await root.post("/v1/keys", json={"tenant": "acme", "roles": ["agent"]})).status_code == 201
    await set_quotas(db, "*", active_keys=1)
    assert (await root.post("/v1/keys", json={"tenant": "*", "roles": ["operator"]})).status_code == 201


async def test_mcp_tools_carry_the_quota(clients: dict[str, httpx.AsyncClient], db: Database) -> None:
    """MCP start_plan beyond the unstarted_plans quota answers isError with structuredContent code
    QUOTA_EXCEEDED and quota unstarted_plans; no plan is stored."""
    await set_quotas(db, "acme", unstarted_plans=1)
    acme = clients["acme"]
    assert (await acme.post("/v1/plans", json={"order_id": "o-1"})).status_code == 201
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "start_plan", "arguments": {}}}
    answer = await acme.post(
        "/mcp",
        content=json.dumps(call),
        headers={"Content-Type": "application/json", "Accept": "application/json, text/event-stream"},
    )
    assert answer.status_code == 200, answer.text
    result = answer.json()["result"]
    assert result["isError"] is True
    assert (result["structuredContent"]["code"], result["structuredContent"]["quota"]) == (
        "QUOTA_EXCEEDED",
        "unstarted_plans",
    )
    assert (await counts(db, "acme"))["plans"] == 1


async def test_usage_matches_a_recount_and_gauges_show_it(clients: dict[str, httpx.AsyncClient], db: Database) -> None:
    """After orders applied, finished, buffered and drained, plans started and keys revoked (and the delta rows
    compacted), the usage table equals a recount, and /metrics shows nexus_tenant_quota_used and _limit."""
    acme = clients["acme"]
    await set_quotas(db, "acme", live_orders=50)
    for i in range(5):
        await events(acme, *(step_json(f"o-{i}", f"p-{i}", seq) for seq in (1, 3)))
    await events(acme, step_json("o-0", "p-0", 2), abort_json("o-1", "p-1", 1))
    await acme.post("/v1/plans", json={"order_id": "planned"})
    await db.execute(query("quotas.sql", "compact_usage"), "acme")
    for i in range(5, 8):
        await events(acme, step_json(f"o-{i}", f"p-{i}", 1))
    used = {
        r["quota"]: r["n"]
        for r in await db.fetch(
            "SELECT quota, sum(used) AS n FROM tenant_usage WHERE tenant_id = 'acme' GROUP BY quota"
        )
    }
    assert used == {"live_orders": 7, "buffered_steps": 3, "unstarted_plans": 1, "active_keys": 1}
    text = (await clients["root"].get("/metrics")).text
    assert 'nexus_tenant_quota_used{quota="live_orders",tenant="acme"} 7.0' in text
    assert 'nexus_tenant_quota_limit{quota="live_orders",tenant="acme"} 50.0' in text
    assert 'nexus_tenant_quota_limit{quota="unstarted_plans",tenant="acme"} 10000.0' in text
