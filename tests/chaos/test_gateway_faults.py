"""The gateway under concurrency, a SIGKILL mid-burst, and PostgreSQL going away: nothing applied twice."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import httpx
import pytest

from tests.conftest import PostgresForTests, api_headers, root_headers
from tests.factories import plan_json
from tests.helpers import assert_plans_completed_once

pytestmark = pytest.mark.slow


def plans(n: int, prefix: str) -> list[dict[str, Any]]:
    return [e for i in range(n) for e in plan_json(f"{prefix}-{i:04d}", f"plan-{prefix}-{i}")]


async def send_all(
    bases: list[str], events: list[dict[str, Any]], *, tasks: int = 8, tolerate: bool = False
) -> list[int]:
    """Send events one per request from `tasks` concurrent clients, round-robin over gateways."""
    queue: asyncio.Queue[tuple[int, dict[str, Any]]] = asyncio.Queue()
    for i, e in enumerate(events):
        queue.put_nowait((i, e))
    statuses: list[int] = []

    async def client(k: int) -> None:
        async with httpx.AsyncClient(base_url=bases[k % len(bases)], timeout=10, headers=api_headers()) as api:
            while not queue.empty():
                _, event = queue.get_nowait()
                try:
                    statuses.append((await api.post("/v1/events", json=event)).status_code)
                except httpx.HTTPError:
                    if not tolerate:
                        raise
                    statuses.append(0)

    await asyncio.gather(*(client(k) for k in range(tasks)))
    return statuses


async def test_concurrent_clients_through_two_gateways(start_gateway, database_url: str) -> None:  # type: ignore[no-untyped-def]
    """8 clients send 200 plans' steps, shuffled and duplicated, via two gateway processes: one row per step."""
    _, base_a = start_gateway("--no-dispatcher")
    _, base_b = start_gateway("--no-dispatcher")
    events = plans(200, "conc") * 2
    random.Random(7).shuffle(events)
    statuses = await send_all([base_a, base_b], events, tasks=8)
    assert set(statuses) == {200}
    await assert_plans_completed_once(database_url, "conc", 200)


async def test_sigkill_mid_burst_then_resend(start_gateway, database_url: str) -> None:  # type: ignore[no-untyped-def]
    """SIGKILL the gateway during a burst, restart, resend everything: same final state, nothing twice."""
    proc, base = start_gateway("--no-dispatcher")
    events = plans(100, "kill")
    random.Random(11).shuffle(events)

    async def killer() -> None:
        async with httpx.AsyncClient(base_url=base, headers=api_headers()) as api:
            while True:
                text = (await api.get("/metrics", headers=root_headers())).text
                applied = sum(
                    float(line.rsplit(" ", 1)[1])
                    for line in text.splitlines()
                    if line.startswith("nexus_events_processed_total") and 'outcome="apply"' in line
                )
                if applied >= 100:
                    proc.kill()
                    return
                await asyncio.sleep(0.01)

    statuses, _ = await asyncio.gather(send_all([base], events, tolerate=True), killer())
    assert 0 in statuses, "the kill should have interrupted the burst"
    _, base2 = start_gateway("--no-dispatcher")
    statuses = await send_all([base2], events)
    assert set(statuses) == {200}
    await assert_plans_completed_once(database_url, "kill", 100)


async def test_postgres_down_and_back(start_gateway, database_url: str, pg: PostgresForTests) -> None:  # type: ignore[no-untyped-def]
    """With PostgreSQL stopped requests get 503 (retryable); after it returns, resending completes every plan."""
    _, base = start_gateway("--no-dispatcher")
    events = plans(60, "pgdown")
    random.Random(5).shuffle(events)
    half = len(events) // 2
    assert set(await send_all([base], events[:half])) == {200}
    pg.stop_server()
    try:
        async with httpx.AsyncClient(base_url=base, timeout=10, headers=api_headers()) as api:
            down = await api.post("/v1/events", json=events[half])
            assert down.status_code == 503
            assert down.json()["code"] == "DATABASE_UNAVAILABLE"
            assert down.json()["retryable"] is True
            assert (await api.get("/readyz")).status_code == 503
    finally:
        pg.resume()
    statuses = await send_all([base], events)
    assert set(statuses) == {200}
    await assert_plans_completed_once(database_url, "pgdown", 60)
