"""Outbound webhooks: the URL guard at creation and at connect time, a subscription aimed at
the gateway's own API, per-tenant subscriptions and the CloudEvents format."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import httpx
import pytest

from nexus.auth.keys import create_key
from nexus.auth.roles import Role
from nexus.core.decide.items import Incoming
from nexus.delivery.subscriptions import add_subscription
from nexus.gateway import Gateway
from nexus.ingress.http import create_app
from nexus.ingress.tenants import bind
from nexus.settings import Settings
from nexus.store.database import Database
from nexus_lab.sink import start_sink
from tests.conftest import api_headers
from tests.factories import plan_json
from tests.integration.test_delivery import SECRET, dispatching, wait_until

SSRF_URLS = [
    "http://127.0.0.1:8080/v1/subscriptions/default/disable",
    "http://localhost/hook",
    "http://2130706433/hook",
    "http://0177.0.0.1/hook",
    "http://0x7f.0.0.1/hook",
    "http://127.1/hook",
    "http://0.0.0.0/hook",
    "http://[::1]/hook",
    "http://[::ffff:127.0.0.1]/hook",
    "http://169.254.169.254/latest/meta-data/",
    "http://10.0.0.1/hook",
    "http://100.64.0.1/hook",
    "http://admin:pw@example.com/hook",
    "gopher://example.com/",
]


@pytest.fixture
async def strict_db(settings: Settings) -> AsyncIterator[Database]:
    """The test database with the outbound guard fully on (no private networks allowed)."""
    database = await Database(settings.replace(allow_private_urls=None)).open(migrate=False)
    yield database
    await database.close()


@pytest.mark.parametrize("url", SSRF_URLS)
async def test_subscription_api_refuses_internal_urls(strict_db: Database, url: str) -> None:
    """POST /v1/subscriptions with an internal target in any notation, or credentials, is 422 UNSAFE_URL."""
    app = create_app(strict_db, Gateway(strict_db))
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://api", headers=api_headers()
    ) as api:
        answer = await api.post("/v1/subscriptions", json={"name": "evil", "url": url})
    assert answer.status_code == 422, answer.text
    assert answer.json()["code"] == "UNSAFE_URL"
    assert await strict_db.fetchval("SELECT count(*) FROM subscriptions") == 0


async def test_a_name_resolving_to_loopback_is_refused_at_connect_time(strict_db: Database, settings: Settings) -> None:
    """A stored URL whose name resolves to 127.0.0.1 (as after DNS rebinding) is never called: the
    delivery dies at once with the guard's reason and the receiver gets nothing."""
    sink = await start_sink(secret=SECRET)
    try:
        port = sink.url.rsplit(":", 1)[1]
        # Written past the creation check, as a name that resolved elsewhere when it was created would be.
        await strict_db.execute(
            "INSERT INTO subscriptions (name, url, secret) VALUES ('rebound', $1, $2)",
            f"http://localhost:{port}/h",
            SECRET,
        )
        await Gateway(strict_db).submit([Incoming.parse(e) for e in plan_json("o-1", "p-1", 1)])
        async with dispatching(strict_db, settings.replace(allow_private_urls=None)):
            await wait_until(
                lambda: _count(strict_db, "SELECT count(*) FROM deliveries WHERE state = 'dead'"), 10, "dead delivery"
            )
        reason = await strict_db.fetchval("SELECT dead_reason FROM deliveries")
        assert "outbound guard" in reason and "127.0.0.1" in reason
        assert await strict_db.fetchval("SELECT attempts FROM deliveries") == 1
        assert sink.sink.records == []
    finally:
        await sink.aclose()


async def test_an_address_literal_aimed_inside_is_refused_before_sending(
    strict_db: Database, settings: Settings
) -> None:
    """A stored URL naming 127.0.0.1 itself (no name for a resolver to check) is never called either: the
    dispatcher's client checks address literals before each request."""
    sink = await start_sink(secret=SECRET)
    try:
        await strict_db.execute(
            "INSERT INTO subscriptions (name, url, secret) VALUES ('literal', $1, $2)", sink.url + "/h", SECRET
        )
        await Gateway(strict_db).submit([Incoming.parse(e) for e in plan_json("o-2", "p-2", 1)])
        async with dispatching(strict_db, settings.replace(allow_private_urls=None)):
            await wait_until(
                lambda: _count(strict_db, "SELECT count(*) FROM deliveries WHERE state = 'dead'"), 10, "dead delivery"
            )
        reason = await strict_db.fetchval("SELECT dead_reason FROM deliveries")
        assert "outbound guard" in reason and "127.0.0.1" in reason
        assert sink.sink.records == []
    finally:
        await sink.aclose()


async def _count(db: Database, sql: str) -> bool:
    return bool(await db.fetchval(sql))


async def test_a_webhook_aimed_at_the_gateways_own_api_changes_nothing(start_gateway, db: Database) -> None:  # type: ignore[no-untyped-def]
    """Refused at creation with the guard on; and even where private URLs are allowed (development), the
    webhook carries no key, so the gateway answers 401 and the other subscriber stays enabled."""
    sink = await start_sink(secret=SECRET)
    try:
        _, base = start_gateway()
        async with httpx.AsyncClient(base_url=base, headers=api_headers(), timeout=10) as api:
            victim = await api.post("/v1/subscriptions", json={"name": "victim", "url": sink.url + "/v"})
            assert victim.status_code == 201
            evil = await api.post(
                "/v1/subscriptions", json={"name": "evil", "url": f"{base}/v1/subscriptions/victim/disable"}
            )
            assert evil.status_code == 201  # this test's gateway allows private URLs (NEXUS_ALLOW_PRIVATE_URLS)
            await api.post("/v1/events", json={"events": plan_json("o-1", "p-1", 2)})
            deadline = time.monotonic() + 20
            while await db.fetchval("SELECT count(*) FROM deliveries WHERE state = 'pending'") and (
                time.monotonic() < deadline
            ):
                await asyncio.sleep(0.1)
            subs = {s["name"]: s for s in (await api.get("/v1/subscriptions")).json()["subscriptions"]}
        assert subs["victim"]["enabled"] is True
        assert len(sink.sink.records) == 2
        statuses = await db.fetch(
            "SELECT d.state, d.last_status FROM deliveries d JOIN subscriptions s ON s.id = d.subscription_id "
            "WHERE s.name = 'evil'"
        )
        assert [(r["state"], r["last_status"]) for r in statuses] == [("dead", 401), ("dead", 401)]
    finally:
        await sink.aclose()


async def test_subscriptions_get_their_tenants_notifications_in_their_format(db: Database, settings: Settings) -> None:
    """acme's subscription (CloudEvents) gets only acme's notifications, globex's only globex's, and an
    operator's spanning subscription gets both; every body is signed and verifies."""
    sinks = {name: await start_sink(secret=SECRET) for name in ("acme", "globex", "all")}
    try:
        await add_subscription(db, "acme", sinks["acme"].url + "/h", SECRET, tenant_id="acme", fmt="cloudevents")
        await add_subscription(db, "globex", sinks["globex"].url + "/h", SECRET, tenant_id="globex")
        await add_subscription(db, "all", sinks["all"].url + "/h", SECRET)
        items = [bind(Incoming.parse(e), "acme") for e in plan_json("o-1", "p-a", 2)]
        items += [bind(Incoming.parse(e), "globex") for e in plan_json("o-1", "p-g", 3)]
        await Gateway(db).submit([i for i in items if i is not None])
        async with dispatching(db, settings):
            await wait_until(
                lambda: _count(db, "SELECT count(*) = 0 FROM deliveries WHERE state = 'pending'"), 15, "delivered"
            )
        got = {name: s.sink.records for name, s in sinks.items()}
        assert len(got["acme"]) == 2 and len(got["globex"]) == 3 and len(got["all"]) == 5
        assert all(r["signature_valid"] for records in got.values() for r in records)
        event = got["acme"][0]["body"]
        assert event["specversion"] == "1.0" and event["type"] == "nexus.order.OrderCreated"
        assert event["tenantid"] == "acme" and event["data"]["plan_id"] == "p-a" and event["subject"] == "o-1"
        assert {r["body"]["tenant_id"] for r in got["globex"]} == {"globex"}
        assert {r["body"]["tenant_id"] for r in got["all"]} == {"acme", "globex"}
    finally:
        for s in sinks.values():
            await s.aclose()


async def test_listing_subscriptions_never_shows_secrets_or_url_tokens(db: Database) -> None:
    """GET /v1/subscriptions shows the URL with its query values redacted and no secret."""
    _, key = await create_key(db, "default", frozenset({Role.OPERATOR}))
    app = create_app(db, Gateway(db))
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://api", headers={"Authorization": f"Bearer {key}"}
    ) as api:
        made = await api.post(
            "/v1/subscriptions", json={"name": "t", "url": "http://127.0.0.1:9/c?token=s3cret", "secret": SECRET}
        )
        assert made.status_code == 201 and "s3cret" not in made.text
        listed = (await api.get("/v1/subscriptions")).text
    assert "s3cret" not in listed and SECRET not in listed and "token=***" in listed
