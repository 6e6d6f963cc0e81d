"""A cross-tenant oracle generated from /openapi.json: every operation of a real `nexus serve`, called by
tenant acme's keys of every role about objects tenant globex made, must refuse (403, for a role the
route does not allow) or know nothing (404, or an empty list) and never show globex's data.

No route is listed by hand: each operation of the document is called, its path parameters filled from
the objects globex made (by parameter name), `?tenant=globex` added wherever the operation takes a
`tenant`, and a body naming globex where it takes one. A new route whose parameters the oracle cannot
fill fails the test, so it is never silently left out."""

from __future__ import annotations

import re
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from nexus.auth.keys import create_key
from nexus.auth.roles import Role, allowed, required_roles
from nexus.settings import Settings
from nexus.store.database import Database
from tests.conftest import api_headers
from tests.factories import step_json
from tests.unit.test_approvals import approval_yaml

pytestmark = pytest.mark.slow

THEM = "globex"
# Words only globex's objects contain: none may appear in an answer to acme.
THEIR_MARKS = ("globex", "o-theirs", "p-theirs", "their-hook", "their-key", "c-theirs")


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def held(order: str, seq: int) -> dict[str, Any]:
    """Steps of the `approved` process whose payment (seq 3) waits for a person."""
    body = step_json(order, "p-theirs", seq, process="approved", tenant_id=THEM, correlation_id="c-theirs")
    if seq == 1:
        body["data"].update(items=[{"product_id": "p", "quantity": 1, "unit_price": 5000}], total_amount=5000)
    if seq == 3:
        body["data"]["amount"] = 5000
    return body


async def their_world(api: httpx.AsyncClient, db: Database) -> dict[str, Any]:
    """Globex's objects (an order, a plan, a held approval, a blocked action, a dead letter, a subscription,
    a dead delivery, a key): the values of the path parameters that name them."""
    keys = {role: (await create_key(db, THEM, frozenset({role}), f"their-key-{role.value}")) for role in Role}
    agent, operator = bearer(keys[Role.AGENT][1]), bearer(keys[Role.OPERATOR][1])
    made = await api.post(
        "/v1/subscriptions", json={"name": "their-hook", "url": "http://127.0.0.1:9/h"}, headers=operator
    )
    assert made.status_code == 201, made.text
    for seq in (1, 2):
        answer = await api.post("/v1/events", json=held("o-theirs", seq), headers=agent)
        assert answer.json()["results"][0]["decision"] == "APPLY", answer.text
    payment = await api.post("/v1/events", json=held("o-theirs", 3), headers=agent)
    assert payment.status_code == 202, payment.text
    wrong_total = step_json("o-theirs-2", "p-theirs", 1, tenant_id=THEM)
    wrong_total["data"]["total_amount"] = 999
    rejected = await api.post("/v1/events", json=wrong_total, headers=agent)
    assert rejected.json()["results"][0]["decision"] == "REJECTED", rejected.text
    bad = await api.post(
        "/v1/events", content=b'{"order_id": "o-theirs", ', headers={**agent, "content-type": "application/json"}
    )
    assert bad.status_code == 400
    outbox_id = await db.fetchval(
        "UPDATE deliveries SET state = 'dead', head = false WHERE tenant_id = $1 AND position = 1"
        " RETURNING outbox_id::text",
        THEM,
    )
    assert outbox_id is not None
    return {
        "order_id": "o-theirs",
        "plan_id": "p-theirs",
        "approval_id": payment.json()["results"][0]["approval_id"],
        "dead_letter_id": await db.fetchval("SELECT id FROM dead_letters WHERE tenant_id = $1", THEM),
        "subscription_id": made.json()["id"],
        "id_or_name": "their-hook",
        "outbox_id": outbox_id,
        "key_id": keys[Role.AGENT][0].id,
    }


# Operations that name no tenant's object: what they show is the same for every tenant (or nothing).
SHARED = {("get", "/healthz"), ("get", "/readyz"), ("get", "/v1/processes"), ("get", "/v1/processes/{name}")}


def body_for(method: str, path: str) -> Any:
    """A body naming globex, for the operations that take one."""
    if (method, path) == ("post", "/v1/events"):
        return step_json("o-new", "p-new", 1, tenant_id=THEM)
    if (method, path) == ("post", "/v1/keys"):
        return {"tenant": THEM, "roles": ["agent"]}
    if (method, path) == ("post", "/v1/subscriptions"):
        return {"name": "mine", "url": "https://hooks.example.com/h", "tenant": THEM}
    return None


@pytest.fixture
def oracle_settings(settings: Settings, tmp_path: Path) -> Settings:
    folder = tmp_path / "processes"
    folder.mkdir()
    (folder / "approved.yaml").write_text(approval_yaml(expires_s=600), encoding="utf-8")
    return settings.replace(process_dir=folder, stream_keepalive_s=0.2, allow_private_urls="127.0.0.0/8")


async def test_no_route_shows_another_tenants_objects(start_gateway, oracle_settings: Settings, db: Database) -> None:  # type: ignore[no-untyped-def]
    """Every operation of /openapi.json, called with acme's keys of every role about globex's objects:
    403 where the role may not call it, else 404, a list of acme's own rows only (empty, as acme made
    nothing but its keys), or a refusal; never globex's data, and globex's objects unchanged."""
    _, base = start_gateway("--no-dispatcher", settings_=oracle_settings)
    async with httpx.AsyncClient(base_url=base, timeout=10) as api:
        ids = await their_world(api, db)
        ours = {role: (await create_key(db, "acme", frozenset({role}), f"acme-{role.value}"))[1] for role in Role}
        document = (await api.get("/openapi.json", headers=api_headers())).json()
        called = 0
        for path, operations in document["paths"].items():
            for method, operation in operations.items():
                if (method, path) in SHARED:
                    continue
                names = re.findall(r"{(\w+)}", path)
                assert set(names) <= set(ids), f"the oracle cannot fill {method.upper()} {path}: add its object"
                url = path.format(**{n: ids[n] for n in names})
                params = {"tenant": THEM} if any(p["name"] == "tenant" for p in operation.get("parameters", [])) else {}
                for role, key in ours.items():
                    answer = await call(api, method, url, params, body_for(method, path), bearer(key))
                    called += 1
                    where = f"{method.upper()} {url} as acme's {role.value}"
                    if not allowed_for(role, method, url):
                        assert answer.status_code == 403, f"{where}: {answer.status_code} {answer.text[:200]}"
                    else:
                        assert answer.status_code in (200, 201, 403, 404, 409, 422), f"{where}: {answer.text[:300]}"
                    leaked = [m for m in THEIR_MARKS if m in answer.text]
                    assert not leaked, f"{where} shows {leaked}: {answer.text[:300]}"
                    if answer.status_code < 300 and answer.headers["content-type"].startswith("application/json"):
                        tenants = set(tenants_in(answer.json()))
                        assert tenants <= {"acme"}, f"{where} shows tenants {tenants}: {answer.text[:300]}"
        assert called >= 4 * 15
        # Globex's objects are as they were: nothing acme called changed them.
        assert (
            await db.fetchval("SELECT status FROM approvals WHERE approval_id = $1", uuid.UUID(ids["approval_id"]))
            == "pending"
        )
        assert await db.fetchval("SELECT enabled FROM subscriptions WHERE name = 'their-hook'") is True
        assert await db.fetchval("SELECT revoked_at FROM api_keys WHERE id = $1", ids["key_id"]) is None
        assert await db.fetchval("SELECT redriven_at FROM dead_letters WHERE id = $1", ids["dead_letter_id"]) is None
        assert await db.fetchval("SELECT state FROM deliveries WHERE outbox_id = $1::uuid", ids["outbox_id"]) == "dead"


def tenants_in(value: Any) -> list[str]:
    """Every tenant an answer names (a `tenant` or `tenant_id` field anywhere in it)."""
    found, stack = [], [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            found.extend(str(v) for k, v in item.items() if k in ("tenant", "tenant_id") and v is not None)
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return found


def allowed_for(role: Role, method: str, url: str) -> bool:
    from nexus.auth.roles import Principal

    return allowed(Principal(0, "acme", frozenset({role})), required_roles(method.upper(), url))


async def call(
    api: httpx.AsyncClient, method: str, url: str, params: dict[str, str], body: Any, headers: dict[str, str]
) -> httpx.Response:
    """The answer to one call; a stream's first second only (it never ends by design)."""
    if not url.endswith("/stream"):
        return await api.request(method.upper(), url, params=params, json=body, headers=headers)
    async with api.stream(method.upper(), url, params=params, headers=headers) as response:
        text = ""
        if response.status_code == 200:
            lines = response.aiter_lines()
            for _ in range(3):  # the opening comment, then keepalives every 0.2 s: nothing else may come
                text += await anext(lines) + "\n"
        else:
            text = (await response.aread()).decode()
        return httpx.Response(response.status_code, headers=response.headers, text=text)
