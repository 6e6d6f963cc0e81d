"""Every route x (no key, wrong tenant, wrong role, right key): the status each must answer."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from nexus.auth.keys import create_key
from nexus.auth.roles import Role
from nexus.gateway import Gateway
from nexus.ingress.http import create_app
from nexus.store.database import Database
from tests.factories import plan_json, step_json

KEYS = {
    "acme_agent": ("acme", {Role.AGENT}),
    "acme_operator": ("acme", {Role.OPERATOR}),
    "acme_approver": ("acme", {Role.APPROVER}),
    "acme_admin": ("acme", {Role.ADMIN}),
    "globex_agent": ("globex", {Role.AGENT}),
    "globex_operator": ("globex", {Role.OPERATOR}),
    "globex_admin": ("globex", {Role.ADMIN}),
    "victim": ("acme", {Role.AGENT}),
    "root_operator": ("*", {Role.OPERATOR}),
}


@dataclasses.dataclass
class World:
    api: httpx.AsyncClient
    key: dict[str, str]
    key_id: dict[str, int]
    dead_letter_id: int
    outbox_id: str
    subscription_id: int

    async def call(self, who: str | None, method: str, path: str, body: Any = None) -> httpx.Response:
        headers = {"Authorization": f"Bearer {self.key[who]}"} if who else {}
        return await self.api.request(method, path, json=body, headers=headers)


@pytest.fixture
async def world(db: Database) -> AsyncIterator[World]:
    """Tenant acme with an order, a dead letter, a subscription and a dead delivery; keys of both tenants."""
    keys: dict[str, str] = {}
    ids: dict[str, int] = {}
    for name, (tenant, roles) in KEYS.items():
        record, keys[name] = await create_key(db, tenant, frozenset(roles), name)
        ids[name] = record.id
    api = httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(db, Gateway(db))), base_url="http://api")
    acme_op = {"Authorization": f"Bearer {keys['acme_operator']}"}
    acme_agent = {"Authorization": f"Bearer {keys['acme_agent']}"}
    made = await api.post(
        "/v1/subscriptions", json={"name": "acme-hook", "url": "http://127.0.0.1:9/h"}, headers=acme_op
    )
    assert made.status_code == 201, made.text
    answer = await api.post("/v1/events", json={"events": plan_json("o-1", "p-1", 2)}, headers=acme_agent)
    assert [r["decision"] for r in answer.json()["results"]] == ["APPLY", "APPLY"]
    bad = await api.post("/v1/events", content=b"{not json", headers={**acme_agent, "content-type": "application/json"})
    assert bad.status_code == 400
    dl = await db.fetchval("SELECT id FROM dead_letters WHERE tenant_id = 'acme'")
    outbox_id = await db.fetchval(
        "UPDATE deliveries SET state = 'dead', head = false WHERE position = 1 AND tenant_id = 'acme' "
        "RETURNING outbox_id::text"
    )
    yield World(api, keys, ids, dl, outbox_id, made.json()["id"])
    await api.aclose()


# name, method, path (formatted with the world), body, right key, wrong-role key, wrong-tenant key,
# expected status for the right key and for the wrong tenant
ROUTES: list[tuple[str, str, str, Any, str, str | None, str | None, int, int | None]] = [
    (
        "submit",
        "POST",
        "/v1/events",
        step_json("o-2", "p-2", 1),
        "acme_agent",
        "acme_operator",
        "globex_agent",
        200,
        403,
    ),
    ("order", "GET", "/v1/orders/o-1", None, "acme_agent", "acme_approver", "globex_agent", 200, 404),
    ("plan", "GET", "/v1/plans/p-1", None, "acme_agent", "acme_admin", "globex_agent", 200, 404),
    ("dead letters", "GET", "/v1/dead-letters", None, "acme_operator", "acme_agent", "globex_operator", 200, 200),
    (
        "dl redrive",
        "POST",
        "/v1/dead-letters/{dl}/redrive",
        None,
        "acme_operator",
        "acme_agent",
        "globex_operator",
        200,
        404,
    ),
    ("subs list", "GET", "/v1/subscriptions", None, "acme_operator", "acme_agent", "globex_operator", 200, 200),
    (
        "subs create",
        "POST",
        "/v1/subscriptions",
        {"name": "acme-2", "url": "http://127.0.0.1:9/x"},
        "acme_operator",
        "acme_agent",
        None,
        201,
        None,
    ),
    (
        "subs disable",
        "POST",
        "/v1/subscriptions/acme-hook/disable",
        None,
        "acme_operator",
        "acme_agent",
        "globex_operator",
        200,
        404,
    ),
    ("dead deliveries", "GET", "/v1/deliveries/dead", None, "acme_operator", "acme_agent", "globex_operator", 200, 200),
    (
        "delivery redrive",
        "POST",
        "/v1/deliveries/{outbox}/{sub}/redrive",
        None,
        "acme_operator",
        "acme_agent",
        "globex_operator",
        200,
        404,
    ),
    # metrics name every tenant's subscriptions: an operator of every tenant only (a tenant's operator: 403)
    ("metrics", "GET", "/metrics", None, "root_operator", "acme_agent", "acme_operator", 200, 403),
    (
        "keys create",
        "POST",
        "/v1/keys",
        {"tenant": "acme", "roles": ["agent"]},
        "acme_admin",
        "acme_operator",
        "globex_admin",
        201,
        403,
    ),
    ("keys list", "GET", "/v1/keys", None, "acme_admin", "acme_operator", "globex_admin", 200, 200),
    ("keys revoke", "POST", "/v1/keys/{victim}/revoke", None, "acme_admin", "acme_operator", "globex_admin", 200, 404),
    ("docs", "GET", "/docs", None, "acme_approver", None, None, 200, None),
    ("openapi", "GET", "/openapi.json", None, "acme_approver", None, None, 200, None),
]
# fmt: on


@pytest.mark.parametrize("route", ROUTES, ids=[r[0] for r in ROUTES])
async def test_route_matrix(world: World, route: tuple[Any, ...]) -> None:
    """No key: 401; a key without the role: 403; another tenant's key: 404 (or 403 TENANT_MISMATCH, or a
    list without the other tenant's rows); the right key: success. Refusals use the one error shape."""
    name, method, template, body, right, wrong_role, wrong_tenant, ok, other = route
    path = template.format(dl=world.dead_letter_id, outbox=world.outbox_id, sub=world.subscription_id,
                           victim=world.key_id["victim"])  # fmt: skip
    if name == "submit":
        body = {**body, "tenant_id": "acme"}

    anonymous = await world.call(None, method, path, body)
    assert anonymous.status_code == 401
    assert set(anonymous.json()) == {"code", "message", "request_id"}
    assert anonymous.json()["code"] == "UNAUTHENTICATED"
    if wrong_role is not None:
        refused = await world.call(wrong_role, method, path, body)
        assert refused.status_code == 403, refused.text
        assert refused.json()["code"] == "FORBIDDEN" and set(refused.json()) == {"code", "message", "request_id"}
    if wrong_tenant is not None:
        seen = await world.call(wrong_tenant, method, path, body)
        assert seen.status_code == other, seen.text
        if other == 200:  # a list: the other tenant's rows are not in it
            assert "acme" not in seen.text and "o-1" not in seen.text
        if name == "submit":
            assert seen.json()["code"] == "TENANT_MISMATCH"
    answer = await world.call(right, method, path, body)
    assert answer.status_code == ok, answer.text
    if ok == 200 and name in ("dead letters", "subs list", "dead deliveries", "keys list"):
        assert "acme" in answer.text or "o-1" in answer.text


async def test_health_needs_no_key(world: World) -> None:
    """/healthz and /readyz answer without a key."""
    assert (await world.call(None, "GET", "/healthz")).status_code == 200
    assert (await world.call(None, "GET", "/readyz")).status_code == 200


async def test_garbage_and_revoked_keys_are_unauthenticated(world: World, db: Database) -> None:
    """A malformed header, an unknown key and a revoked key are all 401; nothing is written for them."""
    for header in ("Bearer", "Basic abc", "Bearer nxk_unknown", world.key["acme_agent"]):
        answer = await world.api.post("/v1/events", json=step_json("o-9", "p-9", 1), headers={"Authorization": header})
        assert answer.status_code == 401
    assert await db.fetchval("SELECT count(*) FROM orders WHERE order_id = 'o-9'") == 0
    dead_before = await db.fetchval("SELECT count(*) FROM dead_letters")
    await world.api.post("/v1/events", content=b"{nope", headers={"content-type": "application/json"})
    assert await db.fetchval("SELECT count(*) FROM dead_letters") == dead_before
