"""One answer per situation at every door: the same decision, code and wording whether a step comes as one
envelope (`POST /v1/events`), in a batch, as a numbered step (`POST /v1/orders/{id}/steps`, which MCP's
`propose_step` calls) or as a Kafka record; each message names the field, never the value it carried."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import httpx
import pytest

from nexus.auth.keys import create_key
from nexus.auth.roles import Role
from nexus.gateway import Gateway
from nexus.ingress.http import create_app
from nexus.kafka_io import read_topic
from nexus.settings import Settings
from nexus.store.database import Database
from tests.factories import step_json
from tests.integration.kafka_helpers import (
    BOOTSTRAP,
    kafka_settings,
    producer,
    running_ingress,
    wait_committed_to_end,
)

__all__ = ["kafka_settings"]  # the fixture, imported for pytest

SECRET = "SECRET-VALUE"  # noqa: S105 - not a password: a value no answer may repeat
"""A value a message must never repeat."""
CREATED = step_json("x", "p-1", 1)["data"]
BAD_DATA = {**CREATED, "currency": SECRET}
HUGE = "99999999999999999999999999999.99"
"""An amount the schema's pattern takes but no minor unit holds (over 28 digits in cents)."""
HUGE_DATA = {**CREATED, "total_amount": HUGE}
TENANT = "acme"
DATA_WORDS = "data.currency: String should match pattern '^[A-Z]{3}$'"
HUGE_WORDS = "data.total_amount: Input should be an amount of at most 28 digits in the currency's minor unit"
TENANT_WORDS = f"tenant_id: the envelope names another tenant than this caller's ({TENANT})"

# situation -> (decision, code, the words its message holds); None: refused as a whole, nothing decided.
TABLE: dict[str, tuple[str | None, str, str]] = {
    "invalid_json": ("DEAD_LETTER", "PARSE_ERROR", "not JSON"),
    "invalid_envelope": ("DEAD_LETTER", "INVALID_EVENT", "plan_id: Field required"),
    "invalid_data": ("DEAD_LETTER", "INVALID_EVENT", DATA_WORDS),
    "huge_amount": ("DEAD_LETTER", "INVALID_EVENT", HUGE_WORDS),
    "unknown_step": ("REJECTED", "UNKNOWN_STEP", "Teleported is not a step of process order"),
    "plan_mismatch": ("PLAN_MISMATCH", "PLAN_MISMATCH", "follows plan p-1, not p-2"),
    "tenant_mismatch": (None, "TENANT_MISMATCH", TENANT_WORDS),
    "oversize": (None, "PAYLOAD_TOO_LARGE", "body exceeds"),
}  # fmt: skip
# What differs by door, and why: a numbered step's body is a request, not an envelope, so its malformed JSON
# or fields are the request's (refused as a whole, as every REST body's); nor can it name a plan or a tenant.
STEPS_API: dict[str, tuple[str | None, str, str]] = {
    **TABLE,
    "invalid_json": (None, "PARSE_ERROR", "not JSON"),
    "invalid_envelope": (None, "INVALID_REQUEST", "body.data: Input should be a valid dictionary"),
}
STEPS_SITUATIONS = ("invalid_json", "invalid_envelope", "invalid_data", "huge_amount", "unknown_step", "oversize")
# One envelope of a batch is an item: a whole-body problem (not JSON, too large) is the single door's.
BATCH_SITUATIONS = (
    "invalid_envelope", "invalid_data", "huge_amount", "unknown_step", "plan_mismatch", "tenant_mismatch",
)  # fmt: skip


def envelope(order_id: str, situation: str) -> dict[str, Any]:
    """The envelope (seq 2, after OrderCreated of plan p-1) a situation sends."""
    body = step_json(order_id, "p-1", 2, tenant_id=TENANT)
    if situation == "invalid_envelope":
        del body["plan_id"]
    elif situation == "invalid_data":
        body.update(seq_id=1, event_type="OrderCreated", data=BAD_DATA)
    elif situation == "huge_amount":
        body.update(seq_id=1, event_type="OrderCreated", data=HUGE_DATA)
    elif situation == "unknown_step":
        body["event_type"] = "Teleported"
    elif situation == "plan_mismatch":
        body["plan_id"] = "p-2"
    elif situation == "tenant_mismatch":
        body["tenant_id"] = "globex"
    return body


def raw_body(order_id: str, situation: str, limit: int) -> bytes:
    if situation == "invalid_json":
        return b'{"event_id": '
    if situation == "oversize":
        return json.dumps({**envelope(order_id, "unknown_step"), "data": {"pad": "x" * limit}}).encode()
    return json.dumps(envelope(order_id, situation)).encode()


@pytest.fixture
async def api(db: Database) -> AsyncIterator[httpx.AsyncClient]:
    """The API with an agent key of tenant acme."""
    app = create_app(db, Gateway(db))
    _, key = await create_key(db, TENANT, frozenset({Role.AGENT}))
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://api", headers=headers) as c:
        yield c


async def begun(api: httpx.AsyncClient) -> str:
    """A new order of plan p-1 with its first step applied."""
    order_id = f"o-{uuid.uuid4().hex[:8]}"
    answer = await api.post("/v1/events", json=step_json(order_id, "p-1", 1, tenant_id=TENANT))
    assert answer.json()["results"][0]["decision"] == "APPLY"
    return order_id


def said(answer: dict[str, Any]) -> str:
    return str(answer.get("message") or answer.get("error") or "")


async def single(api: httpx.AsyncClient, db: Database, situation: str) -> tuple[str | None, str, str]:
    order_id = await begun(api)
    response = await api.post("/v1/events", content=raw_body(order_id, situation, db.settings.max_body_bytes))
    body = response.json()
    results = body.get("results") or [{}]
    assert response.status_code >= 400 and body["code"] == (results[0].get("code") or body["code"])
    return results[0].get("decision"), body["code"], body["message"]


async def batch(api: httpx.AsyncClient, situation: str) -> tuple[str | None, str, str]:
    order_id = await begun(api)
    response = await api.post("/v1/events", json={"events": [envelope(order_id, situation)]})
    body = response.json()
    if "results" not in body:  # refused as a whole
        return None, body["code"], body["message"]
    [result] = body["results"]
    return result["decision"], result["code"], said(result)


async def numbered(api: httpx.AsyncClient, db: Database, situation: str) -> tuple[str | None, str, str]:
    order_id = f"o-{uuid.uuid4().hex[:8]}"
    assert (await api.post("/v1/plans", json={"order_id": order_id})).status_code == 201
    proposal: Any = {"step": "OrderCreated", "data": BAD_DATA}
    if situation == "unknown_step":
        proposal = {"step": "Teleported", "data": {}}
    elif situation == "huge_amount":
        proposal = {"step": "OrderCreated", "data": HUGE_DATA}
    elif situation == "invalid_envelope":
        proposal = {"step": "OrderCreated", "data": SECRET}
    elif situation == "oversize":
        proposal = {"step": "OrderCreated", "data": {"pad": "x" * db.settings.max_body_bytes}}
    content = b'{"step": ' if situation == "invalid_json" else json.dumps(proposal).encode()
    response = await api.post(f"/v1/orders/{order_id}/steps", content=content)
    body = response.json()
    assert response.status_code >= 400
    return body.get("decision"), body["code"], body["message"]


@pytest.mark.parametrize("situation", list(TABLE))
async def test_one_envelope_answers_as_the_table_says(api: httpx.AsyncClient, db: Database, situation: str) -> None:
    """`POST /v1/events` with one envelope: the table's decision, code and words; never the value."""
    decision, code, message = await single(api, db, situation)
    assert (decision, code) == TABLE[situation][:2] and TABLE[situation][2] in message
    assert SECRET not in message and HUGE not in message


@pytest.mark.parametrize("situation", BATCH_SITUATIONS)
async def test_a_batch_item_answers_as_the_table_says(api: httpx.AsyncClient, situation: str) -> None:
    """`POST /v1/events` with `{"events": [...]}`: each item as one envelope is answered."""
    decision, code, message = await batch(api, situation)
    assert (decision, code) == TABLE[situation][:2] and TABLE[situation][2] in message
    assert SECRET not in message and HUGE not in message


@pytest.mark.parametrize("situation", STEPS_SITUATIONS)
async def test_a_numbered_step_answers_as_the_table_says(api: httpx.AsyncClient, db: Database, situation: str) -> None:
    """`POST /v1/orders/{id}/steps` (and so MCP's propose_step): invalid data is DEAD_LETTER INVALID_EVENT with
    the field's path, as an envelope's; only what makes the request itself malformed differs (STEPS_API)."""
    decision, code, message = await numbered(api, db, situation)
    assert (decision, code) == STEPS_API[situation][:2] and STEPS_API[situation][2] in message
    assert SECRET not in message and HUGE not in message


@pytest.mark.kafka
async def test_kafka_answers_as_the_table_says(kafka_settings: Settings) -> None:
    """A Kafka record of each situation it can carry: dead letters on the DLQ topic with the table's code and
    words (`x-dlq-code`, `x-dlq-error`), a REJECTED step in the decision log with the same."""
    s = kafka_settings.replace(kafka_tenant=TENANT)
    situations = [situation for situation in TABLE if situation != "oversize"]
    order_ids = {situation: f"k-{situation}-{uuid.uuid4().hex[:6]}" for situation in situations}
    async with producer(s) as p:
        for situation, order_id in order_ids.items():
            await p.send(step_json(order_id, "p-1", 1, tenant_id=TENANT))
            await p.send(raw_body(order_id, situation, s.max_body_bytes), key=order_id)
    async with running_ingress(s):
        await wait_committed_to_end(s.kafka_group, s.kafka_topic, timeout=60)
    dlq = {r.key.decode(): r.headers for r in await read_topic(BOOTSTRAP, s.kafka_dlq_topic) if r.key}
    conn = await asyncpg.connect(s.database_url)
    try:
        rejected = await conn.fetchrow(
            "SELECT decision, code, message FROM decision_log WHERE order_id = $1 AND seq = 2",
            order_ids["unknown_step"],
        )
    finally:
        await conn.close()
    assert rejected is not None
    answers = {"unknown_step": (rejected["decision"], rejected["code"], rejected["message"])}
    for situation in situations:
        if situation != "unknown_step":
            headers = dlq[order_ids[situation]]
            answers[situation] = (TABLE[situation][0], headers["x-dlq-code"], headers["x-dlq-error"])
    for situation, (decision, code, message) in answers.items():
        assert (decision, code) == TABLE[situation][:2], situation
        assert TABLE[situation][2] in message and SECRET not in message and HUGE not in message, situation
