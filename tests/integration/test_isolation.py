"""One isolation policy of a failed batch at every door (issue 33, item 1): a request the database refuses,
sent with neighbours through `/v1/events`, the steps API, MCP's backend or Kafka, costs one dead letter that
keeps its payload and order id (redrivable) and one bounded log line; its neighbours are applied."""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from nexus.auth.keys import create_key
from nexus.auth.roles import Principal, Role
from nexus.gateway import Gateway
from nexus.ingress.http import create_app, read_order
from nexus.ingress.mcp_api import GatewayBackend
from nexus.settings import Settings
from nexus.store.database import Database
from tests.conftest import root_headers
from tests.factories import step_json
from tests.integration.kafka_helpers import kafka_settings, producer, running_ingress, wait_committed_to_end

__all__ = ["kafka_settings"]  # the fixture, imported for pytest

TENANT = "acme"
CREATED = step_json("x", "p", 1)["data"]
REFUSAL = "refused: " + "x" * 5000
"""The database's words for the poisoned order: long, so that a log line quoting them is not bounded."""
LONGEST_LINE = 2000
"""The most characters the values of one log line of the isolation may add up to."""


@pytest.fixture
async def poisoned(db: Database) -> AsyncIterator[None]:
    """The database refuses any notification of an order whose id starts with `poison` (then no longer)."""
    await db.execute(
        "CREATE FUNCTION poison() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
        f" IF NEW.order_id LIKE 'poison%' THEN RAISE EXCEPTION '{REFUSAL}'; END IF; RETURN NEW; END $$"
    )
    await db.execute("CREATE TRIGGER poison BEFORE INSERT ON outbox FOR EACH ROW EXECUTE FUNCTION poison()")
    yield


@pytest.fixture
async def app_and_key(db: Database) -> AsyncIterator[tuple[httpx.AsyncClient, Any, Principal]]:
    """The API in process, its app, and the principal of its agent key (tenant acme)."""
    app = create_app(db, Gateway(db))
    record, key = await create_key(db, TENANT, frozenset({Role.AGENT}))
    headers = {"Authorization": f"Bearer {key}"}
    principal = Principal(record.id, TENANT, frozenset({Role.AGENT}))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://api", headers=headers) as c:
        yield c, app, principal


def ids(door: str) -> tuple[str, list[str]]:
    """The poisoned order's id and two neighbours' of a door."""
    tag = uuid.uuid4().hex[:6]
    return f"poison-{door}-{tag}", [f"fine-{door}-{tag}-{i}" for i in range(2)]


async def through_events(api: httpx.AsyncClient, poison: str, fine: list[str]) -> None:
    events = [step_json(o, f"p-{o}", 1, tenant_id=TENANT) for o in (fine[0], poison, fine[1])]
    answer = await api.post("/v1/events", json={"events": events})
    assert [r["decision"] for r in answer.json()["results"]] == ["APPLY", "DEAD_LETTER", "APPLY"], answer.text


async def through_steps(api: httpx.AsyncClient, poison: str, fine: list[str]) -> None:
    for order_id in (poison, *fine):
        assert (await api.post("/v1/plans", json={"order_id": order_id})).status_code == 201
    step = {"step": "OrderCreated", "data": CREATED}
    answers = await asyncio.gather(*(api.post(f"/v1/orders/{o}/steps", json=step) for o in (fine[0], poison, fine[1])))
    assert [a.json()["decision"] for a in answers] == ["APPLY", "DEAD_LETTER", "APPLY"]


async def through_mcp(db: Database, app: Any, principal: Principal, poison: str, fine: list[str]) -> None:
    state = app.state
    backend = GatewayBackend(db, state.gateway, db.settings, None, principal, read_order, state.submitter)
    for order_id in (poison, *fine):
        await backend.start_plan("order", order_id, None)
    answers = await asyncio.gather(
        *(backend.propose_step(o, "OrderCreated", CREATED, None) for o in (fine[0], poison, fine[1]))
    )
    assert [body["decision"] for _, body in answers] == ["APPLY", "DEAD_LETTER", "APPLY"]


async def through_kafka(s: Settings, poison: str, fine: list[str]) -> None:
    async with producer(s) as p:
        for order_id in (fine[0], poison, fine[1]):
            await p.send(step_json(order_id, f"p-{order_id}", 1, tenant_id=TENANT))
    async with running_ingress(s):
        await wait_committed_to_end(s.kafka_group, s.kafka_topic, timeout=60)


async def check(
    db: Database, api: httpx.AsyncClient, poison: str, fine: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    """Neighbours applied; the poisoned one one dead letter with payload and order id, redrivable once the
    database takes it; one bounded log line per isolated request, no traceback."""
    for order_id in fine:
        assert await db.fetchval("SELECT last_seq FROM orders WHERE order_id = $1", order_id) == 1
    rows = await db.fetch("SELECT id, order_id, payload, code FROM dead_letters WHERE payload LIKE '%poison%'")
    assert [(r["order_id"], r["code"]) for r in rows] == [(poison, "DATABASE_REJECTED")]
    assert json.loads(rows[0]["payload"])["order_id"] == poison
    lines = [r for r in caplog.records if getattr(r, "action", None) in ("isolate", "isolate_item")]
    assert [getattr(r, "order_id", None) for r in lines if r.action == "isolate_item"] == [poison]
    assert not [r for r in caplog.records if r.exc_info and r.levelno >= logging.INFO]
    for record in lines:
        assert sum(len(str(v)) for v in record.__dict__.values()) < LONGEST_LINE + 1000, record.__dict__
    await db.execute("DROP TRIGGER poison ON outbox")
    redriven = await api.post(f"/v1/dead-letters/{rows[0]['id']}/redrive", headers=root_headers())
    assert redriven.status_code == 200, redriven.text
    assert await db.fetchval("SELECT last_seq FROM orders WHERE order_id = $1", poison) == 1


@pytest.mark.parametrize("door", ["events", "steps", "mcp"])
async def test_a_poisoned_request_costs_one_dead_letter_and_one_line(
    db: Database,
    poisoned: None,
    app_and_key: tuple[httpx.AsyncClient, Any, Principal],
    door: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Through `/v1/events`, the steps API and MCP's backend: neighbours applied, the poisoned request one
    dead letter keeping payload and order id (redriven once the database takes it), one bounded log line."""
    api, app, principal = app_and_key
    poison, fine = ids(door)
    caplog.set_level(logging.INFO, logger="nexus.gateway")
    if door == "events":
        await through_events(api, poison, fine)
    elif door == "steps":
        await through_steps(api, poison, fine)
    else:
        await through_mcp(db, app, principal, poison, fine)
    await check(db, api, poison, fine, caplog)


@pytest.mark.kafka
async def test_a_poisoned_kafka_record_costs_one_dead_letter_and_one_line(
    db: Database,
    poisoned: None,
    app_and_key: tuple[httpx.AsyncClient, Any, Principal],
    kafka_settings: Settings,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A Kafka slice with one record the database refuses: the others applied, the refused one one dead letter
    (table and DLQ topic) keeping payload and order id, one bounded log line, no traceback."""
    api, _, _ = app_and_key
    poison, fine = ids("kafka")
    caplog.set_level(logging.INFO, logger="nexus.gateway")
    await through_kafka(kafka_settings.replace(kafka_tenant=TENANT), poison, fine)
    await check(db, api, poison, fine, caplog)
