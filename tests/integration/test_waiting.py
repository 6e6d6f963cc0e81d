"""Waiting for an order (long poll, SSE, the SDK's wait) against a real `nexus serve`, answered
on the commit through LISTEN/NOTIFY, and surviving a PostgreSQL restart."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import httpx
import pytest

from nexus.auth.keys import create_key
from nexus.auth.roles import Role
from nexus.store.database import Database
from nexus_client import AsyncNexusClient, ClientConfig
from tests.conftest import TEST_API_KEY, PostgresForTests, api_headers
from tests.factories import step_json

pytestmark = pytest.mark.slow


async def post(api: httpx.AsyncClient, body: Any) -> dict[str, Any]:
    response = await api.post("/v1/events", json=body, headers=api_headers())
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()["results"][0]
    return result


async def later(delay: float, api: httpx.AsyncClient, body: Any) -> float:
    await asyncio.sleep(delay)
    await post(api, body)
    return time.monotonic()


@pytest.fixture
async def api(start_gateway) -> Any:  # type: ignore[no-untyped-def]
    _, base = start_gateway("--no-dispatcher")
    async with httpx.AsyncClient(base_url=base, timeout=30) as client:
        yield client


async def test_long_poll_answers_on_the_commit(api: httpx.AsyncClient) -> None:
    """?wait=20&after_seq=1 answers as soon as seq 2 commits, long before its 20 s end."""
    await post(api, step_json("o-lp", "p", 1))
    started = time.monotonic()
    poll = asyncio.create_task(api.get("/v1/orders/o-lp?wait=20&after_seq=1", headers=api_headers()))
    committed = await later(0.5, api, step_json("o-lp", "p", 2))
    response = await poll
    answered = time.monotonic()
    assert response.status_code == 200 and response.json()["last_seq"] == 2
    assert answered - started < 5 and answered - committed < 2


async def test_long_poll_on_status_and_its_timeout(api: httpx.AsyncClient) -> None:
    """?after_status=X answers once the status differs; with no change it answers after S with the state."""
    await post(api, step_json("o-st", "p", 1))
    started = time.monotonic()
    quiet = await api.get("/v1/orders/o-st?wait=1&after_status=created", headers=api_headers())
    assert 0.9 <= time.monotonic() - started < 5
    assert quiet.status_code == 200 and quiet.json()["status"] == "created"
    poll = asyncio.create_task(api.get("/v1/orders/o-st?wait=20&after_status=created", headers=api_headers()))
    await later(0.3, api, step_json("o-st", "p", 2))
    response = await poll
    assert response.json()["status"] == "inventory_validated"
    assert time.monotonic() - started < 10


async def test_long_poll_on_an_order_that_does_not_exist_yet(api: httpx.AsyncClient) -> None:
    """A long poll may start before the order's first step: it answers when the step commits."""
    poll = asyncio.create_task(api.get("/v1/orders/o-new?wait=20&after_seq=0", headers=api_headers()))
    await later(0.3, api, step_json("o-new", "p", 1))
    response = await asyncio.wait_for(poll, 5)
    assert response.status_code == 200 and response.json()["last_seq"] == 1
    missing = await api.get("/v1/orders/o-none?wait=0.2&after_seq=0", headers=api_headers())
    assert missing.status_code == 404


async def read_events(response: httpx.Response, count: int) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    current: dict[str, Any] = {}
    async for line in response.aiter_lines():
        if line.startswith("id: "):
            current["id"] = int(line[4:])
        elif line.startswith("data: "):
            current["data"] = json.loads(line[6:])
        elif line == "" and "data" in current:
            events.append(current)
            current = {}
            if len(events) == count:
                break
    return events


async def test_stream_sends_each_decision_as_it_commits(api: httpx.AsyncClient) -> None:
    """GET /v1/orders/{id}/stream: one SSE event per decision, in order, ids the log positions; resumable."""
    s1, s2, s3 = (step_json("o-sse", "p", n) for n in (1, 2, 3))
    await post(api, s1)
    async with api.stream("GET", "/v1/orders/o-sse/stream", headers=api_headers()) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        reader = asyncio.create_task(read_events(response, 4))
        await later(0.3, api, s3)
        await later(0.3, api, s2)
        events = await asyncio.wait_for(reader, 10)
    assert [e["id"] for e in events] == [1, 2, 3, 4]
    assert [(e["data"]["seq"], e["data"]["decision"]) for e in events] == [
        (1, "APPLY"),
        (3, "BUFFER"),
        (2, "APPLY"),
        (3, "APPLY"),
    ]
    headers = api_headers(**{"Last-Event-ID": "3"})
    async with api.stream("GET", "/v1/orders/o-sse/stream", headers=headers) as response:
        [resumed] = await asyncio.wait_for(read_events(response, 1), 10)
    assert resumed["id"] == 4


async def test_waiting_survives_a_postgres_restart(api: httpx.AsyncClient, pg: PostgresForTests) -> None:
    """After PostgreSQL restarts, a long poll and a stream still answer on the next commit."""
    await post(api, step_json("o-pg", "p", 1))
    await asyncio.to_thread(pg.stop_server)
    try:
        await asyncio.sleep(1.0)
    finally:
        await asyncio.to_thread(pg.resume)
    poll = asyncio.create_task(api.get("/v1/orders/o-pg?wait=30&after_seq=1", headers=api_headers()))
    async with api.stream("GET", "/v1/orders/o-pg/stream?after=1", headers=api_headers()) as response:
        reader = asyncio.create_task(read_events(response, 1))
        await asyncio.sleep(2.0)  # the listener reconnects on its backoff schedule
        started = time.monotonic()
        for _ in range(50):  # the gateway's pool may hand out a dead connection once
            result = await api.post("/v1/events", json=step_json("o-pg", "p", 2), headers=api_headers())
            if result.status_code == 200:
                break
            await asyncio.sleep(0.2)
        [event] = await asyncio.wait_for(reader, 15)
        response_poll = await asyncio.wait_for(poll, 15)
    assert event["data"]["seq"] == 2 and event["data"]["decision"] == "APPLY"
    assert response_poll.json()["last_seq"] == 2
    assert time.monotonic() - started < 15


async def test_sdk_wait_uses_the_long_poll(start_gateway) -> None:  # type: ignore[no-untyped-def]
    """The SDK's wait() returns on the commit through the long poll: within a second, in at most 3 requests."""
    _, base = start_gateway("--no-dispatcher")
    requests: list[str] = []

    async def count(request: httpx.Request) -> None:
        requests.append(str(request.url))

    config = ClientConfig(gateway_url=base, api_key=TEST_API_KEY)
    async with httpx.AsyncClient(base_url=base, timeout=30) as api, AsyncNexusClient(config) as client:
        client._http.event_hooks["request"].append(count)
        await post(api, step_json("o-sdk", "p", 1))
        waiting = asyncio.create_task(client.wait("o-sdk", after_seq=1, timeout=20))
        committed = await later(1.0, api, step_json("o-sdk", "p", 2))
        order = await waiting
    assert order.last_seq == 2
    assert time.monotonic() - committed < 1.5
    gets = [u for u in requests if "/v1/orders/o-sdk" in u]
    assert len(gets) <= 3 and any("wait=" in u for u in gets)


async def test_waiting_and_history_stay_within_the_tenant(api: httpx.AsyncClient, db: Database) -> None:
    """Two tenants' orders with one id: a long poll is answered by its tenant's commit, not the other's; a
    long poll answers in the plain GET's shape; history and stream show the caller's tenant only."""
    heads, sent = {}, {}
    for tenant in ("acme", "globex"):
        _, key = await create_key(db, tenant, frozenset({Role.AGENT}))
        heads[tenant] = {"Authorization": f"Bearer {key}"}
        sent[tenant] = [step_json("o-tw", "p", 1), step_json("o-tw", "p", 2)]
        answer = await api.post("/v1/events", json=sent[tenant][0], headers=heads[tenant])
        assert answer.json()["results"][0]["decision"] == "APPLY"
    poll = asyncio.create_task(api.get("/v1/orders/o-tw?wait=2&after_seq=1", headers=heads["acme"]))
    await later(0.3, api, step_json("o-tw", "p", 1))  # the default tenant's own o-tw
    await api.post("/v1/events", json=sent["globex"][1], headers=heads["globex"])
    unmoved = await poll
    assert unmoved.json()["last_seq"] == 1  # default's and globex's commits did not answer acme's poll
    plain = await api.get("/v1/orders/o-tw", headers=heads["acme"])
    assert unmoved.json() == plain.json()  # the long poll answers in the plain GET's shape
    poll = asyncio.create_task(api.get("/v1/orders/o-tw?wait=20&after_seq=1", headers=heads["acme"]))
    await asyncio.sleep(0.3)
    started = time.monotonic()
    await api.post("/v1/events", json=sent["acme"][1], headers=heads["acme"])
    moved = await asyncio.wait_for(poll, 10)
    assert moved.json()["last_seq"] == 2 and time.monotonic() - started < 5
    for tenant in ("acme", "globex"):
        items = (await api.get("/v1/orders/o-tw/history", headers=heads[tenant])).json()["items"]
        assert [i["event_id"] for i in items] == [e["event_id"] for e in sent[tenant]]
        async with api.stream("GET", "/v1/orders/o-tw/stream", headers=heads[tenant]) as response:
            events = await asyncio.wait_for(read_events(response, 2), 10)
        assert [e["data"]["event_id"] for e in events] == [e["event_id"] for e in sent[tenant]]
    _, other = await create_key(db, "initech", frozenset({Role.AGENT}))
    nobody = await api.get("/v1/orders/o-tw/history", headers={"Authorization": f"Bearer {other}"})
    assert nobody.status_code == 404
