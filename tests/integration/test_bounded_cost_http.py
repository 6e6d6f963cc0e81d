"""Bounded check cost over HTTP against a real `nexus serve`: the list limit, a tenant's own, the linear rule."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import asyncpg
import httpx
import pytest

from nexus.settings import Settings
from tests.conftest import api_headers, settings_env
from tests.factories import step_json

pytestmark = pytest.mark.slow


@pytest.fixture
async def api(start_gateway) -> Any:  # type: ignore[no-untyped-def]
    _, base = start_gateway("--no-dispatcher")
    async with httpx.AsyncClient(base_url=base, timeout=30, headers=api_headers()) as client:
        yield client


def created(order: str, n: int) -> dict[str, Any]:
    items = [{"product_id": f"p{i}", "quantity": 1 + i % 3, "unit_price": 1} for i in range(n)]
    total = sum(i["quantity"] for i in items)
    return step_json(order, "p", 1, data={"items": items, "total_amount": total, "currency": "USD"})


def nexus(settings: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nexus.cli", *args],
        env=settings_env(settings),
        capture_output=True,
        text=True,
        timeout=60,
    )


async def test_a_list_over_max_list_items_is_422_and_writes_nothing(api: httpx.AsyncClient, settings: Settings) -> None:
    """1,001 items answer 422 LIMIT_EXCEEDED with check max_list_items; the order is not created."""
    r = await api.post("/v1/events", json=created("o-long", 1001))
    body = r.json()
    assert r.status_code == 422 and (body["code"], body["check"]) == ("LIMIT_EXCEEDED", "max_list_items")
    assert (await api.get("/v1/orders/o-long")).status_code == 404
    conn = await asyncpg.connect(settings.database_url)
    try:
        assert await conn.fetchval("SELECT count(*) FROM outbox WHERE order_id = 'o-long'") == 0
    finally:
        await conn.close()


async def test_1000_items_reserved_in_reverse_apply_and_a_repeated_line_is_refused(api: httpx.AsyncClient) -> None:
    """At the limit, the reversed reservation of the issue applies; p1 x3 reserved twice for p1 x3 + p2 x2 does not."""
    first = created("o-wide", 1000)
    assert (await api.post("/v1/events", json=first)).json()["results"][0]["decision"] == "APPLY"
    reserved = first["data"]["items"][::-1]
    step = step_json("o-wide", "p", 2, data={"warehouse_id": "w", "reserved_items": reserved})
    assert (await api.post("/v1/events", json=step)).json()["results"][0]["decision"] == "APPLY"

    items = [{"product_id": "p1", "quantity": 3, "unit_price": 1}, {"product_id": "p2", "quantity": 2, "unit_price": 1}]
    two = step_json("o-multi", "p", 1, data={"items": items, "total_amount": 5, "currency": "USD"})
    assert (await api.post("/v1/events", json=two)).status_code == 200
    twice = [items[0]] * 2
    r = await api.post("/v1/events", json=step_json("o-multi", "p", 2, data={"reserved_items": twice}))
    assert r.status_code == 422 and r.json()["check"] == "reserved_items_match_order"


async def test_a_tenants_own_list_limit_lowers_the_processs(api: httpx.AsyncClient, settings: Settings) -> None:
    """`nexus tenants set-limit default --max-list-items 3`: 4 items are refused, 3 apply; 0 removes it."""
    done = nexus(settings, "tenants", "set-limit", "default", "--max-list-items", "3")
    assert done.returncode == 0, done.stderr
    assert "max_list_items 3" in nexus(settings, "tenants", "list").stdout
    r = await api.post("/v1/events", json=created("o-four", 4))
    assert r.status_code == 422 and r.json()["check"] == "max_list_items" and "at most 3" in r.json()["message"]
    assert (await api.post("/v1/events", json=created("o-three", 3))).status_code == 200
    assert nexus(settings, "tenants", "set-limit", "default", "--max-list-items", "0").returncode == 0
    assert (await api.post("/v1/events", json=created("o-four-again", 4))).status_code == 200
