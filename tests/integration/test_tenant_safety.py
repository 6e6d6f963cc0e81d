"""Tenant safety over HTTP, on the app itself (ASGI, real PostgreSQL): names per tenant, key tenants,
strict admin bodies, NUL and hostile parameters, the one error shape, failed authentication."""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from nexus import metrics
from nexus.auth.keys import KeyRecord, create_key, hash_key, list_keys
from nexus.auth.roles import Role
from nexus.gateway import Gateway
from nexus.ingress.http import create_app
from nexus.settings import Settings
from nexus.store.database import Database
from tests.conftest import TEST_API_KEY, api_headers, root_headers
from tests.factories import step_json

DRIVER_WORDS = ("asyncpg", "Traceback", "SQLSTATE", "23505", "pkey", "subscriptions_", "UniqueViolation")


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def assert_error(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    """`status` with `code` in the one shape, its request id also in X-Request-ID, no driver text."""
    body: dict[str, Any] = response.json()
    assert (response.status_code, body.get("code")) == (status, code), response.text
    assert {"code", "message", "request_id"} <= set(body), body
    assert body["request_id"] == response.headers["x-request-id"]
    assert not any(word in response.text for word in DRIVER_WORDS), response.text
    return body


async def app_client(db: Database, settings: Settings) -> httpx.AsyncClient:
    app = create_app(db, Gateway(db), settings=settings)
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://api")


@pytest.fixture
async def api(db: Database) -> AsyncIterator[httpx.AsyncClient]:
    async with await app_client(db, db.settings) as client:
        yield client


@pytest.fixture
async def keys(db: Database) -> dict[str, str]:
    """Operators of acme and globex, an agent of acme (tenant keys)."""
    made = {}
    for name, tenant, roles in (
        ("acme_op", "acme", {Role.OPERATOR}),
        ("globex_op", "globex", {Role.OPERATOR}),
        ("acme_agent", "acme", {Role.AGENT}),
    ):
        made[name] = (await create_key(db, tenant, frozenset(roles), name))[1]
    return made


async def test_subscription_names_are_unique_per_tenant(api: httpx.AsyncClient, keys: dict[str, str]) -> None:
    """Two tenants (and the every-tenant namespace) may each name a subscription `hook`; the same name twice
    in one tenant is 409 without driver text; disabling by name reaches only the caller's own tenant's."""
    body = {"name": "hook", "url": "http://127.0.0.1:9/h"}
    for headers in (bearer(keys["acme_op"]), bearer(keys["globex_op"]), root_headers()):
        made = await api.post("/v1/subscriptions", json=body, headers=headers)
        assert made.status_code == 201, made.text
    again = await api.post("/v1/subscriptions", json=body, headers=bearer(keys["acme_op"]))
    assert_error(again, 409, "DATABASE_REJECTED")
    bound = await api.post("/v1/subscriptions", json={**body, "tenant": "acme"}, headers=root_headers())
    assert_error(bound, 409, "DATABASE_REJECTED")
    disabled = await api.post("/v1/subscriptions/hook/disable", headers=bearer(keys["globex_op"]))
    assert disabled.status_code == 200 and disabled.json()["tenant"] == "globex"
    listed = (await api.get("/v1/subscriptions", headers=root_headers())).json()["subscriptions"]
    assert {s["tenant"]: s["enabled"] for s in listed} == {"acme": True, "globex": False, "*": True}
    everyone = await api.post("/v1/subscriptions/hook/disable", headers=root_headers())
    assert everyone.status_code == 200 and everyone.json()["tenant"] == "*"


async def test_a_keys_tenant_is_an_identifier_and_old_odd_ones_keep_working(
    api: httpx.AsyncClient, db: Database
) -> None:
    """A new key's tenant must be an identifier or `*` (422 INVALID_IDENTIFIER, nothing stored); a key
    stored earlier with another tenant still authenticates, and `nexus keys list` marks it."""
    before = len(await list_keys(db))
    hostile = "t/../x\r\nX-Injected: 1"
    refused = await api.post("/v1/keys", json={"tenant": hostile, "roles": ["agent"]}, headers=root_headers())
    body = assert_error(refused, 422, "INVALID_IDENTIFIER")
    assert "X-Injected" not in body["message"]
    assert len(await list_keys(db)) == before
    made = await api.post("/v1/keys", json={"tenant": "*", "roles": ["operator"]}, headers=root_headers())
    assert made.status_code == 201 and made.json()["tenant"] == "*"
    old_key = "nxk_stored-before-tenants-were-checked-000000000000"
    await db.execute(
        "INSERT INTO api_keys (name, tenant_id, roles, key_hash) VALUES ('old', $1, $2, $3)",
        "odd tenant/1",
        ["agent"],
        hash_key(old_key),
    )
    assert_error(await api.get("/v1/orders/o-1", headers=bearer(old_key)), 404, "NOT_FOUND")
    lines = [k.line() for k in await list_keys(db) if k.name == "old"]
    assert lines and "INVALID-TENANT" in lines[0] and "'odd tenant/1'" in lines[0]
    assert "INVALID-TENANT" not in KeyRecord.of(await db.fetchrow("SELECT * FROM api_keys WHERE id = 1")).line()


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/keys", {"tenant": "acme", "roles": ["agent"]}),
        ("/v1/subscriptions", {"name": "h", "url": "http://127.0.0.1:9/h"}),
        ("/v1/approvals/00000000-0000-4000-8000-000000000001/approve", {}),
    ],
)
async def test_admin_bodies_are_strict_json(api: httpx.AsyncClient, path: str, body: dict[str, Any]) -> None:
    """Duplicate keys and NaN are 400 PARSE_ERROR, an unknown field is 422 INVALID_REQUEST and a NUL in a
    string 422, all before anything is stored; the messages do not repeat the input."""
    import json

    headers = root_headers(**{"content-type": "application/json"})
    text = json.dumps(body)
    duplicated = text[:-1] + (', "zz_dup": 1, "zz_dup": 2}' if body else '"zz_dup": 1, "zz_dup": 2}')
    assert (
        "zz_dup"
        not in assert_error(await api.post(path, content=duplicated, headers=headers), 400, "PARSE_ERROR")["message"]
    )
    nan = text[:-1] + (', "n": NaN}' if body else '"n": NaN}')
    assert_error(await api.post(path, content=nan, headers=headers), 400, "PARSE_ERROR")
    unknown = await api.post(path, json={**body, "admin_override": True}, headers=headers)
    assert_error(unknown, 422, "INVALID_REQUEST")
    nul = await api.post(path, json={**body, "name": "a\u0000b"}, headers=headers)
    assert nul.status_code == 422 and nul.json()["code"] in ("INVALID_REQUEST", "INVALID_IDENTIFIER")


async def test_nul_and_extreme_parameters_are_refused_before_the_database(api: httpx.AsyncClient) -> None:
    """A NUL in a step's data is 422 INVALID_EVENT; a NUL in a query parameter, and `since` values that
    leave the years 1-9999 in UTC, are 422 INVALID_PARAMETER; never a 5xx or driver text."""
    step = step_json("o-nul", "p-nul", 1, data={"customer_id": "c\u00001"})
    assert_error(await api.post("/v1/events", json=step, headers=api_headers()), 422, "INVALID_EVENT")
    for path in (
        "/v1/orders/o-1?tenant=%00",
        "/v1/orders/o-1/history?tenant=%00",
        "/v1/blocked-actions?order=a%00b",
        "/v1/blocked-actions/summary?plan=%00",
        "/v1/dead-letters?code=%00",
    ):
        assert_error(await api.get(path, headers=root_headers()), 422, "INVALID_PARAMETER")
    for since in ("0001-01-01T00:00+14:00", "9999-12-31T23:59-14:00", "0001-01-01T00:00:00+23:59"):
        answer = await api.get("/v1/blocked-actions", params={"since": since}, headers=root_headers())
        body = assert_error(answer, 422, "INVALID_PARAMETER")
        assert since not in body["message"]
    echoed = await api.get("/v1/blocked-actions", params={"limit": "<script>"}, headers=root_headers())
    assert "<script>" not in assert_error(echoed, 422, "INVALID_PARAMETER")["message"]


async def test_every_refusal_has_the_one_shape_and_a_request_id(
    db: Database, api: httpx.AsyncClient, keys: dict[str, str]
) -> None:
    """401, 403, 404, 405, 413, 422 and 429 all answer {code, message, request_id} with the same id in
    X-Request-ID; a caller's X-Request-ID is kept only when it is 1-64 characters of A-Za-z0-9._:-."""
    assert_error(await api.get("/v1/dead-letters"), 401, "UNAUTHENTICATED")
    assert_error(await api.get("/v1/dead-letters", headers=bearer(keys["acme_agent"])), 403, "FORBIDDEN")
    assert_error(await api.get("/metrics", headers=bearer(keys["acme_op"])), 403, "FORBIDDEN")
    assert_error(await api.get("/v1/nope", headers=api_headers()), 404, "NOT_FOUND")
    assert_error(await api.delete("/v1/dead-letters", headers=root_headers()), 405, "METHOD_NOT_ALLOWED")
    assert_error(await api.get("/v1/dead-letters?limit=x", headers=root_headers()), 422, "INVALID_REQUEST")
    big = await api.post("/v1/keys", content=b"{" + b" " * (2 << 20) + b"}", headers=root_headers())
    assert_error(big, 413, "PAYLOAD_TOO_LARGE")
    async with await app_client(db, db.settings.replace(rate_limit_admin=1.0, rate_limit_operator=1.0)) as limited:
        answers = [await limited.get("/v1/keys", headers=root_headers()) for _ in range(3)]
        assert_error(answers[-1], 429, "RATE_LIMITED")
    for given, kept in (
        ("trace-1.a:b_c", True),
        ("x" * 64, True),
        ("x" * 65, False),
        ("a@b", False),
        ("a b", False),
        ("ünï", False),
    ):
        answer = await api.get("/v1/dead-letters", headers={"X-Request-ID": given.encode()})
        rid = assert_error(answer, 401, "UNAUTHENTICATED")["request_id"]
        assert (rid == given) is kept, (given, rid)
        assert len(rid) <= 64


def failures(reason: str) -> float:
    return metrics.REGISTRY.get_sample_value("nexus_auth_failures_total", {"reason": reason}) or 0.0


async def test_failed_authentication_is_counted_logged_and_throttled(
    db: Database, keys: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    """Each failed authentication counts by reason (missing, malformed, unknown, revoked) and is logged
    without the key; past NEXUS_AUTH_FAILURES_PER_MINUTE from one address its failed attempts get 429
    RATE_LIMITED with Retry-After, while a valid key from the same address is still served."""
    revoked_record, revoked = await create_key(db, "acme", frozenset({Role.AGENT}), "gone")
    await db.execute("UPDATE api_keys SET revoked_at = now() WHERE id = $1", revoked_record.id)
    before = {r: failures(r) for r in ("missing", "malformed", "unknown", "revoked")}
    wrong = "nxk_wrong-key-0123456789"
    caplog.set_level(logging.WARNING, logger="nexus.auth.middleware")
    async with await app_client(db, db.settings.replace(auth_failures_per_minute=4.0)) as api:
        attempts: list[dict[str, str]] = [{}, {"Authorization": "Basic abc"}, bearer(wrong), bearer(revoked)]
        for headers in attempts:
            assert_error(await api.get("/v1/orders/o-1", headers=headers), 401, "UNAUTHENTICATED")
        throttled = await api.get("/v1/orders/o-1", headers=bearer(wrong))
        assert_error(throttled, 429, "RATE_LIMITED")
        assert int(throttled.headers["retry-after"]) >= 1
        assert (await api.get("/v1/orders/o-1", headers=bearer(keys["acme_agent"]))).status_code == 404
    assert {r: failures(r) - before[r] for r in before} == {"missing": 1, "malformed": 1, "unknown": 2, "revoked": 1}
    logged = [r for r in caplog.records if getattr(r, "action", None) == "auth_failure"]
    assert len(logged) == 5 and {getattr(r, "reason", None) for r in logged} == set(before)
    assert not any(wrong in r.getMessage() or wrong in str(r.__dict__) for r in caplog.records)
    assert not any(revoked in str(r.__dict__) for r in caplog.records)


async def test_failed_console_sign_ins_are_counted_and_throttled(db: Database) -> None:
    """Wrong keys at the console's sign-in form count as failed authentications of their address; past
    the allowance the form answers 429 without checking the key, and a right key still signs in."""
    before = failures("unknown")
    async with await app_client(db, db.settings.replace(auth_failures_per_minute=2.0)) as console:
        form = await console.get("/console/login")
        csrf = re.search(r'name="csrf" value="([^"]+)"', form.text)
        assert csrf is not None
        answers = [
            await console.post("/console/login", data={"csrf": csrf.group(1), "api_key": f"nxk_wrong-{n}"})
            for n in range(3)
        ]
        assert [a.status_code for a in answers] == [401, 401, 429]
        right = await console.post("/console/login", data={"csrf": csrf.group(1), "api_key": TEST_API_KEY})
        assert right.status_code == 303
    assert failures("unknown") - before == 3
