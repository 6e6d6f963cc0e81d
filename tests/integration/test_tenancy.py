"""Tenancy: orders keyed by (tenant, order_id), the tenant taken from the key, never from the body."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from nexus.auth.keys import create_key
from nexus.auth.roles import Role
from nexus.core.decide.items import Incoming
from nexus.gateway import Gateway
from nexus.ingress.http import create_app
from nexus.ingress.tenants import bind_or_dead_letter
from nexus.store.database import Database
from tests.factories import abort_json, step_json


@pytest.fixture
async def clients(db: Database) -> AsyncIterator[dict[str, httpx.AsyncClient]]:
    """An API client per tenant (acme, globex), each with an agent key of its tenant."""
    app = create_app(db, Gateway(db))
    out = {}
    for tenant in ("acme", "globex"):
        _, key = await create_key(db, tenant, frozenset({Role.AGENT}))
        out[tenant] = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://api", headers={"Authorization": f"Bearer {key}"}
        )
    yield out
    for client in out.values():
        await client.aclose()


async def _decisions(client: httpx.AsyncClient, *events: dict[str, object]) -> list[str]:
    answer = await client.post("/v1/events", json={"events": list(events)})
    assert answer.status_code == 200, answer.text
    return [r["decision"] for r in answer.json()["results"]]


async def test_same_order_id_in_two_tenants_never_touch(clients: dict[str, httpx.AsyncClient]) -> None:
    """globex advancing then aborting its o-1 leaves acme's o-1 as it was; each reads only its own."""
    acme, globex = clients["acme"], clients["globex"]
    assert await _decisions(acme, step_json("o-1", "p-acme", 1)) == ["APPLY"]
    assert await _decisions(globex, step_json("o-1", "p-globex", 1), step_json("o-1", "p-globex", 2)) == [
        "APPLY",
        "APPLY",
    ]
    assert await _decisions(globex, abort_json("o-1", "p-globex", 2)) == ["APPLY"]
    mine = (await acme.get("/v1/orders/o-1")).json()
    theirs = (await globex.get("/v1/orders/o-1")).json()
    assert (mine["plan_id"], mine["status"], mine["last_seq"]) == ("p-acme", "created", 1)
    assert (theirs["plan_id"], theirs["status"], theirs["last_seq"]) == ("p-globex", "aborted", 2)
    assert await _decisions(acme, step_json("o-1", "p-acme", 2)) == ["APPLY"]  # acme goes on


async def test_abort_on_an_unused_id_tombstones_only_its_tenant(clients: dict[str, httpx.AsyncClient]) -> None:
    """A globex ABORT_PLAN on an id acme has not used yet does not DISCARD acme's later OrderCreated."""
    acme, globex = clients["acme"], clients["globex"]
    assert await _decisions(globex, abort_json("o-2", "p-g")) == ["TOMBSTONE"]
    assert await _decisions(acme, step_json("o-2", "p-a", 1)) == ["APPLY"]
    assert await _decisions(globex, step_json("o-2", "p-g", 1)) == ["DISCARD"]


async def test_an_envelope_naming_another_tenant_is_refused_and_writes_nothing(
    clients: dict[str, httpx.AsyncClient], db: Database
) -> None:
    """acme's key sending tenant_id "globex" (alone or inside a batch): 403 TENANT_MISMATCH, no row anywhere."""
    acme = clients["acme"]
    single = await acme.post("/v1/events", json=step_json("o-3", "p", 1, tenant_id="globex"))
    batch = await acme.post(
        "/v1/events", json={"events": [step_json("o-4", "p", 1), step_json("o-5", "p", 1, tenant_id="globex")]}
    )
    for answer in (single, batch):
        assert answer.status_code == 403
        assert answer.json()["code"] == "TENANT_MISMATCH"
    for table in ("orders", "outbox", "pending_events", "dead_letters"):
        assert await db.fetchval(f"SELECT count(*) FROM {table}") == 0, table
    named = await acme.post("/v1/events", json=step_json("o-6", "p", 1, tenant_id="acme"))
    assert named.json()["results"][0]["decision"] == "APPLY"
    assert await db.fetchval("SELECT tenant_id FROM orders WHERE order_id = 'o-6'") == "acme"


async def test_another_tenants_order_and_plan_are_not_found(clients: dict[str, httpx.AsyncClient]) -> None:
    """Reading globex's order or plan with acme's key answers 404, as if it did not exist."""
    assert await _decisions(clients["globex"], step_json("o-7", "p-7", 1)) == ["APPLY"]
    assert (await clients["globex"].get("/v1/orders/o-7")).status_code == 200
    assert (await clients["acme"].get("/v1/orders/o-7")).status_code == 404
    assert (await clients["acme"].get("/v1/plans/p-7")).status_code == 404


async def test_a_kafka_record_naming_another_tenant_is_dead_lettered(db: Database) -> None:
    """On a topic bound to acme, an envelope of globex is a TENANT_MISMATCH dead letter; one without a
    tenant is acme's."""
    gateway = Gateway(db, record_plan_mismatch=False)
    items = [
        bind_or_dead_letter(Incoming.parse(step_json("o-8", "p", 1, tenant_id="globex")), "acme"),
        bind_or_dead_letter(Incoming.parse(step_json("o-9", "p", 1)), "acme"),
    ]
    outcomes = await gateway.submit(items, source="kafka")
    assert [o.decision.value for o in outcomes] == ["DEAD_LETTER", "APPLY"]
    assert outcomes[0].code is not None and outcomes[0].code.value == "TENANT_MISMATCH"
    assert await db.fetchval("SELECT count(*) FROM orders WHERE order_id = 'o-8'") == 0
    assert await db.fetchval("SELECT tenant_id FROM orders WHERE order_id = 'o-9'") == "acme"
    assert await db.fetchval("SELECT tenant_id FROM dead_letters WHERE code = 'TENANT_MISMATCH'") == "acme"
