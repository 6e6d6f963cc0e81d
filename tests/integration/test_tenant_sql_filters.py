"""Operators' pages cost their own tenant's rows (issue 34, item 7): the keys list, a key's revoke and the
console's subscription accounting filter by tenant in SQL; a key spanning every tenant still sees all."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from nexus.auth.keys import create_key
from nexus.auth.roles import Role
from nexus.gateway import Gateway
from nexus.ingress.http import create_app
from nexus.store.database import Database
from nexus.store.queries import query
from tests.conftest import root_headers
from tests.factories import step_json
from tests.integration.test_console import sign_in

TENANTS = ("acme", "globex")


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture
async def api(db: Database) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(db, Gateway(db), settings=db.settings)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://api") as client:
        yield client


async def test_keys_are_listed_and_revoked_within_the_callers_tenant_in_sql(
    api: httpx.AsyncClient, db: Database
) -> None:
    """The named queries take the tenant: acme's admin lists only acme's keys and cannot revoke globex's
    (404, the key stays active); the every-tenant admin lists and revokes any."""
    admins = {t: (await create_key(db, t, frozenset({Role.ADMIN}), f"{t}-admin"))[1] for t in TENANTS}
    agents = {t: (await create_key(db, t, frozenset({Role.AGENT}), f"{t}-agent"))[0] for t in TENANTS}
    rows = await db.fetch(query("auth.sql", "list_keys"), "acme")
    assert {r["tenant_id"] for r in rows} == {"acme"} and len(rows) == 2
    assert {r["tenant_id"] for r in await db.fetch(query("auth.sql", "list_keys"), None)} >= {"acme", "globex", None}
    listed = (await api.get("/v1/keys", headers=bearer(admins["acme"]))).json()["keys"]
    assert sorted(k["name"] for k in listed) == ["acme-admin", "acme-agent"]
    everyone = (await api.get("/v1/keys", headers=root_headers())).json()["keys"]
    assert {"acme-agent", "globex-agent"} <= {k["name"] for k in everyone}
    foreign = await api.post(f"/v1/keys/{agents['globex'].id}/revoke", headers=bearer(admins["acme"]))
    assert foreign.status_code == 404 and foreign.json()["code"] == "NOT_FOUND"
    assert await db.fetchval("SELECT revoked_at FROM api_keys WHERE id = $1", agents["globex"].id) is None
    own = await api.post(f"/v1/keys/{agents['acme'].id}/revoke", headers=bearer(admins["acme"]))
    assert own.status_code == 200 and own.json()["revoked_at"] is not None
    by_root = await api.post(f"/v1/keys/{agents['globex'].id}/revoke", headers=root_headers())
    assert by_root.status_code == 200 and by_root.json()["revoked_at"] is not None


async def test_subscription_accounting_counts_the_viewers_tenant_only(api: httpx.AsyncClient, db: Database) -> None:
    """Each tenant's subscription gets its tenant's notifications; the accounting query for acme returns acme's
    subscription alone, the console page shows acme's counts only, and the every-tenant viewer gets both."""
    for tenant, orders in (("acme", 2), ("globex", 3)):
        made = await api.post(
            "/v1/subscriptions",
            json={"name": "hook", "url": "http://127.0.0.1:9/h", "tenant": tenant},
            headers=root_headers(),
        )
        assert made.status_code == 201, made.text
        _, agent = await create_key(db, tenant, frozenset({Role.AGENT}), f"{tenant}-agent")
        for i in range(orders):
            posted = await api.post("/v1/events", json=step_json(f"o-{i}", f"p-{i}", 1), headers=bearer(agent))
            assert posted.json()["results"][0]["decision"] == "APPLY", posted.text
    acme = await db.fetch(query("delivery.sql", "accounting"), "acme")
    assert [(r["name"], r["total"]) for r in acme] == [("hook", 2)]
    every = await db.fetch(query("delivery.sql", "accounting"), None)
    assert sorted(r["total"] for r in every if r["name"] == "hook") == [2, 3]
    _, operator = await create_key(db, "acme", frozenset({Role.OPERATOR}), "acme-op")
    assert (await sign_in(api, operator)).status_code == 303
    page = await api.get("/console/subscriptions")
    assert page.status_code == 200 and page.text.count("127.0.0.1:9/h") == 1
