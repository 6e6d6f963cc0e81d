"""Deadlines end to end: two real gateways racing the sweep abort a plan once (one notification),
a deadline passing while a step sits in the buffer, and the clipped deadline said in the answer."""

from __future__ import annotations

import asyncio
import datetime as dt
from pathlib import Path
from typing import Any

import httpx
import pytest

from nexus.settings import Settings
from nexus.store.database import Database
from tests.conftest import api_headers
from tests.factories import step_json
from tests.unit.test_deadlines import timed_yaml

pytestmark = pytest.mark.slow


@pytest.fixture
def timed_settings(settings: Settings, tmp_path: Path) -> Settings:
    folder = tmp_path / "processes"
    folder.mkdir()
    (folder / "timed.yaml").write_text(timed_yaml(default_s=3600, max_s=7200), encoding="utf-8")
    return settings.replace(process_dir=folder, deadline_sweep_s=0.05)


def timed_step(order: str, seq: int, **extra: Any) -> dict[str, Any]:
    return step_json(order, "p-t", seq, process="timed", **extra)


async def post(api: httpx.AsyncClient, body: Any) -> dict[str, Any]:
    response = await api.post("/v1/events", json=body, headers=api_headers())
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()["results"][0]
    return result


async def until(check: Any, timeout: float = 15.0) -> None:
    for _ in range(int(timeout / 0.1)):
        if await check():
            return
        await asyncio.sleep(0.1)
    raise AssertionError("condition not met in time")


async def test_two_gateways_racing_the_sweep_abort_once(start_gateway, timed_settings: Settings, db: Database) -> None:  # type: ignore[no-untyped-def]
    """Many overdue plans, two gateways sweeping every 50 ms: each plan aborted once (timeout), one notification."""
    _, base_a = start_gateway("--no-dispatcher", settings_=timed_settings)
    start_gateway("--no-dispatcher", settings_=timed_settings)
    soon = (dt.datetime.now(dt.UTC) + dt.timedelta(seconds=2)).isoformat()
    orders = [f"o-race-{i}" for i in range(20)]
    async with httpx.AsyncClient(base_url=base_a, timeout=10) as api:
        response = await api.post(
            "/v1/events", json={"events": [timed_step(o, 1, deadline=soon) for o in orders]}, headers=api_headers()
        )
        assert {r["decision"] for r in response.json()["results"]} == {"APPLY"}

        async def all_aborted() -> bool:
            n = await db.fetchval("SELECT count(*) FROM orders WHERE order_id = ANY($1) AND status = 'aborted'", orders)
            return bool(n == len(orders))

        await until(all_aborted)
        await asyncio.sleep(0.5)  # more sweeps of both gateways: none may write again
        late = await post(api, timed_step(orders[0], 2))
    assert late["decision"] == "DISCARD"
    rows = await db.fetch(
        "SELECT order_id, count(*) AS n, min(payload->'event'->'data'->>'abort_code') AS code FROM outbox"
        " WHERE order_id = ANY($1) AND event_type = 'ABORT_PLAN' GROUP BY order_id",
        orders,
    )
    assert sorted((r["order_id"], r["n"], r["code"]) for r in rows) == sorted((o, 1, "timeout") for o in orders)
    counts = await db.fetch("SELECT count(*) AS n FROM outbox WHERE order_id = ANY($1) GROUP BY order_id", orders)
    assert {r["n"] for r in counts} == {2}  # the first step and the abort
    applied = await db.fetchval(
        "SELECT count(*) FROM decision_log WHERE order_id = ANY($1) AND event_type = 'ABORT_PLAN'"
        " AND decision = 'APPLY'",
        orders,
    )
    assert applied == len(orders)


async def test_deadline_passing_while_a_step_is_buffered(start_gateway, timed_settings: Settings, db: Database) -> None:  # type: ignore[no-untyped-def]
    """The sweeper aborts a plan whose next step never came while a later one waits in the buffer; the
    buffered step is dropped and the late gap-filler is DISCARD; the abort and the drop are logged as
    `system:deadline`."""
    _, base = start_gateway("--no-dispatcher", settings_=timed_settings)
    soon = (dt.datetime.now(dt.UTC) + dt.timedelta(seconds=1)).isoformat()
    async with httpx.AsyncClient(base_url=base, timeout=10) as api:
        await post(api, timed_step("o-buf", 1, deadline=soon))
        assert (await post(api, timed_step("o-buf", 3)))["decision"] == "BUFFER"

        async def aborted() -> bool:
            return bool(await db.fetchval("SELECT status FROM orders WHERE order_id = 'o-buf'") == "aborted")

        await until(aborted)
        order = (await api.get("/v1/orders/o-buf", headers=api_headers())).json()
        gap = await post(api, timed_step("o-buf", 2))
        history = (await api.get("/v1/orders/o-buf/history", headers=api_headers())).json()["items"]
    assert order["buffered"] == [] and order["last_seq"] == 1
    assert gap["decision"] == "DISCARD"
    key_id = await db.fetchval("SELECT id FROM api_keys WHERE name = 'tests'")
    key = f"key:{key_id}"
    assert [(i["event_type"], i["decision"], i["actor"]) for i in history][-3:] == [
        ("ABORT_PLAN", "APPLY", "system:deadline"),  # the sweeper's abort, and the buffered step it drops
        ("PaymentProcessed", "DISCARD", "system:deadline"),
        ("InventoryValidated", "DISCARD", key),  # the agent's late step
    ]


async def test_the_answer_says_when_a_deadline_was_clipped(start_gateway, timed_settings: Settings) -> None:  # type: ignore[no-untyped-def]
    """A first step asking beyond max_s gets the clipped deadline and deadline_clipped true; a default one false."""
    _, base = start_gateway("--no-dispatcher", settings_=timed_settings)
    far = (dt.datetime.now(dt.UTC) + dt.timedelta(days=30)).isoformat()
    async with httpx.AsyncClient(base_url=base, timeout=10) as api:
        clipped = await post(api, timed_step("o-clip", 1, deadline=far))
        default = await post(api, timed_step("o-default", 1))
        second = await post(api, timed_step("o-default", 2))
    limit = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=7200)
    assert clipped["deadline_clipped"] is True
    assert abs((dt.datetime.fromisoformat(clipped["deadline"]) - limit).total_seconds()) < 60
    assert default["deadline_clipped"] is False
    assert "deadline" not in second
