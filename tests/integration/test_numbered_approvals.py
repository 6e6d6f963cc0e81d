"""Server-numbered steps behind a denied or expired approval, over the real HTTP API on real PostgreSQL: no
order is left waiting for a number nobody can send."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from nexus.auth.keys import create_key
from nexus.auth.roles import Role
from nexus.gateway import Gateway
from nexus.ingress.http import create_app
from nexus.lifecycle import approvals
from nexus.store.database import Database

BIG = {"items": [{"product_id": "p", "quantity": 1, "unit_price": 1500}], "total_amount": 1500, "currency": "USD"}
PAY = {"payment_id": "pay", "amount": 1500, "currency": "USD"}


@pytest.fixture
async def api(db: Database) -> AsyncIterator[tuple[httpx.AsyncClient, dict[str, str]]]:
    """An API client with an agent key of tenant acme, and the headers of an approver of acme."""
    gateway = Gateway(db)
    _, agent = await create_key(db, "acme", frozenset({Role.AGENT}))
    _, approver = await create_key(db, "acme", frozenset({Role.APPROVER}))
    client = httpx.AsyncClient(
        transport=httpx.ASGITransport(app=create_app(db, gateway)),
        base_url="http://api",
        headers={"Authorization": f"Bearer {agent}"},
    )
    yield client, {"Authorization": f"Bearer {approver}"}
    await client.aclose()


async def _step(client: httpx.AsyncClient, order_id: str, step: str, data: Any) -> dict[str, Any]:
    answer = await client.post(f"/v1/orders/{order_id}/steps", json={"step": step, "data": data})
    assert answer.status_code in (200, 202), answer.text
    body: dict[str, Any] = answer.json()
    return body


async def _held_with_successors(client: httpx.AsyncClient, order_id: str) -> str:
    """The issue's order: steps 1, 2 applied, the payment HELD at 3, shipping and completion BUFFER 4, 5."""
    assert (await client.post("/v1/plans", json={"order_id": order_id, "process": "order_reviewed"})).status_code == 201
    answers = [
        await _step(client, order_id, "OrderCreated", BIG),
        await _step(client, order_id, "InventoryValidated", {}),
        await _step(client, order_id, "PaymentProcessed", PAY),
        await _step(client, order_id, "OrderShipped", {"carrier": "ups"}),
        await _step(client, order_id, "OrderCompleted", {}),
    ]
    assert [(a["decision"], a["seq_id"]) for a in answers] == [
        ("APPLY", 1), ("APPLY", 2), ("HELD", 3), ("BUFFER", 4), ("BUFFER", 5),
    ]  # fmt: skip
    return str(answers[2]["approval_id"])


async def _log(db: Database, order_id: str) -> list[tuple[Any, ...]]:
    rows = await db.fetch(
        "SELECT seq, event_type, decision, code FROM decision_log WHERE tenant_id = 'acme' AND order_id = $1"
        " ORDER BY position",
        order_id,
    )
    return [tuple(r) for r in rows]


async def test_a_denied_step_frees_its_number_and_its_numbered_successors_are_discarded(
    api: tuple[httpx.AsyncClient, dict[str, str]], db: Database
) -> None:
    """Denying the held payment DISCARDs the buffered shipping and completion (APPROVAL_DENIED, one log
    record each, no notification), and the next proposal takes seq 3 (the issue's scenario)."""
    client, approver = api
    approval_id = await _held_with_successors(client, "o-deny")
    denied = await client.post(f"/v1/approvals/{approval_id}/deny", headers=approver)
    assert denied.status_code == 200, denied.text
    assert (denied.json()["result"]["decision"], denied.json()["result"]["code"]) == ("REJECTED", "APPROVAL_DENIED")
    order = (await client.get("/v1/orders/o-deny")).json()
    assert (order["last_seq"], order["buffered"], order["notifications"]) == (2, [], 2)
    assert (await _log(db, "o-deny"))[-3:] == [
        (3, "PaymentProcessed", "REJECTED", "APPROVAL_DENIED"),
        (4, "OrderShipped", "DISCARD", "APPROVAL_DENIED"),
        (5, "OrderCompleted", "DISCARD", "APPROVAL_DENIED"),
    ]
    again = await _step(client, "o-deny", "PaymentProcessed", PAY)
    assert (again["decision"], again["seq_id"]) == ("HELD", 3)
    approved = await client.post(f"/v1/approvals/{again['approval_id']}/approve", headers=approver)
    assert approved.json()["result"]["decision"] == "APPLY"
    shipped = await _step(client, "o-deny", "OrderShipped", {"carrier": "ups"})
    assert (shipped["decision"], shipped["seq_id"]) == ("APPLY", 4)


async def test_an_expired_approval_frees_its_number_too(
    api: tuple[httpx.AsyncClient, dict[str, str]], db: Database
) -> None:
    """An approval that expires unanswered settles the same way: successors DISCARDed, the number free."""
    client, _ = api
    approval_id = await _held_with_successors(client, "o-expire")
    await db.execute(
        "UPDATE approvals SET expires_at = now() - interval '1 second' WHERE approval_id = $1", uuid.UUID(approval_id)
    )
    assert await approvals.expire(Gateway(db)) == 1
    order = (await client.get("/v1/orders/o-expire")).json()
    assert (order["last_seq"], order["buffered"]) == (2, [])
    assert [r[2:] for r in (await _log(db, "o-expire"))[-2:]] == [("DISCARD", "APPROVAL_DENIED")] * 2
    again = await _step(client, "o-expire", "PaymentProcessed", PAY)
    assert (again["decision"], again["seq_id"]) == ("HELD", 3)


async def test_envelope_clients_keep_their_buffered_steps_after_a_denial(
    api: tuple[httpx.AsyncClient, dict[str, str]], db: Database
) -> None:
    """Steps a client numbered itself (/v1/events) stay buffered after a denial: its new seq 3, approved,
    drains them."""
    client, approver = api

    def envelope(seq: int, step: str, data: Any) -> dict[str, Any]:
        return {
            "event_id": str(uuid.uuid4()), "event_type": step, "plan_id": "plan-env", "order_id": "o-env",
            "seq_id": seq, "timestamp": "2026-01-01T00:00:00Z", "schema_version": "1.0", "data": data,
            "process": "order_reviewed",
        }  # fmt: skip

    steps = [
        envelope(1, "OrderCreated", BIG), envelope(2, "InventoryValidated", {}), envelope(3, "PaymentProcessed", PAY),
        envelope(4, "OrderShipped", {"carrier": "ups"}), envelope(5, "OrderCompleted", {}),
    ]  # fmt: skip
    results = (await client.post("/v1/events", json={"events": steps})).json()["results"]
    assert [r["decision"] for r in results] == ["APPLY", "APPLY", "HELD", "BUFFER", "BUFFER"]
    denied = await client.post(f"/v1/approvals/{results[2]['approval_id']}/deny", headers=approver)
    assert denied.json()["result"]["decision"] == "REJECTED"
    assert (await client.get("/v1/orders/o-env")).json()["buffered"] == [4, 5]
    resent = (await client.post("/v1/events", json=envelope(3, "PaymentProcessed", PAY))).json()["results"][0]
    assert resent["decision"] == "HELD"
    approved = await client.post(f"/v1/approvals/{resent['approval_id']}/approve", headers=approver)
    assert approved.json()["result"]["decision"] == "APPLY"
    order = (await client.get("/v1/orders/o-env")).json()
    assert (order["status"], order["last_seq"], order["buffered"]) == ("completed", 5, [])
