"""Server-numbered steps over REST: POST /v1/plans and POST /v1/orders/{order_id}/steps, on real PostgreSQL."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from nexus.auth.keys import create_key
from nexus.auth.roles import Role
from nexus.gateway import Gateway
from nexus.ingress.http import create_app
from nexus.store.database import Database

CREATED = {"items": [{"product_id": "p", "quantity": 1, "unit_price": 10}], "total_amount": 10, "currency": "USD"}
PLAN = [
    ("OrderCreated", CREATED),
    ("InventoryValidated", {"warehouse_id": "w-1"}),
    ("PaymentProcessed", {"payment_id": "pay-1", "amount": 10, "currency": "USD"}),
    ("OrderShipped", {"carrier": "ups"}),
    ("OrderCompleted", {}),
]


@pytest.fixture
async def clients(db: Database) -> AsyncIterator[dict[str, httpx.AsyncClient]]:
    """API clients with agent keys of two tenants (acme, globex) and an operator key spanning every tenant."""
    app = create_app(db, Gateway(db))
    out = {}
    for name, tenant, roles in (
        ("acme", "acme", {Role.AGENT}),
        ("globex", "globex", {Role.AGENT}),
        ("ops", None, {Role.OPERATOR, Role.AGENT}),
    ):
        _, key = await create_key(db, tenant or "*", frozenset(roles))
        out[name] = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://api", headers={"Authorization": f"Bearer {key}"}
        )
    yield out
    for client in out.values():
        await client.aclose()


async def _step(client: httpx.AsyncClient, order_id: str, step: str, data: Any, key: str | None = None) -> Any:
    body = {"step": step, "data": data, **({"idempotency_key": key} if key else {})}
    return await client.post(f"/v1/orders/{order_id}/steps", json=body)


async def test_a_plan_runs_to_completion_with_server_numbers(clients: dict[str, httpx.AsyncClient]) -> None:
    """A started plan's five steps, proposed without numbers, take seq 1..5 and complete the order."""
    acme = clients["acme"]
    started = await acme.post("/v1/plans", json={"process": "order", "order_id": "o-1"})
    assert started.status_code == 201, started.text
    assert started.json()["order_id"] == "o-1" and started.json()["plan_id"].startswith("plan-")
    for seq, (step, data) in enumerate(PLAN, start=1):
        answer = await _step(acme, "o-1", step, data)
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert (body["decision"], body["seq_id"], body["order"]["last_seq"]) == ("APPLY", seq, seq)
    order = (await acme.get("/v1/orders/o-1")).json()
    assert (order["status"], order["plan_id"]) == ("completed", started.json()["plan_id"])


async def test_plan_errors_order_exists_and_unknown_process(clients: dict[str, httpx.AsyncClient]) -> None:
    """A second plan for an order is 409 ORDER_EXISTS; an unknown process 422 UNKNOWN_PROCESS; a step of an
    order never started 404 NOT_FOUND: each in the error shape."""
    acme = clients["acme"]
    assert (await acme.post("/v1/plans", json={"order_id": "o-2"})).status_code == 201
    again = await acme.post("/v1/plans", json={"order_id": "o-2"})
    assert again.status_code == 409 and again.json()["code"] == "ORDER_EXISTS" and again.json()["request_id"]
    unknown = await acme.post("/v1/plans", json={"process": "nope"})
    assert unknown.status_code == 422 and unknown.json()["code"] == "UNKNOWN_PROCESS"
    missing = await _step(acme, "never", "OrderCreated", CREATED)
    assert missing.status_code == 404 and missing.json()["code"] == "NOT_FOUND"


async def test_a_keyed_repeat_is_a_duplicate_with_the_first_verdict(clients: dict[str, httpx.AsyncClient]) -> None:
    """The same idempotency key answers DUPLICATE with the first verdict under `first`, APPLY or REJECTED,
    and takes no new number; the corrected step under a new key applies at the waiting number."""
    acme = clients["acme"]
    await acme.post("/v1/plans", json={"order_id": "o-3"})
    first = (await _step(acme, "o-3", "OrderCreated", CREATED, key="k1")).json()
    repeat = (await _step(acme, "o-3", "OrderCreated", CREATED, key="k1")).json()
    assert repeat["decision"] == "DUPLICATE" and repeat["event_id"] == first["event_id"]
    assert repeat["first"]["decision"] == "APPLY" and repeat["seq_id"] == 1
    bad = await _step(acme, "o-3", "PaymentProcessed", {"amount": 10}, key="k2")
    assert bad.status_code == 422 and bad.json()["decision"] == "REJECTED"
    assert bad.json()["code"] == "INVALID_TRANSITION" and "InventoryValidated" in bad.json()["message"]
    bad_again = await _step(acme, "o-3", "PaymentProcessed", {"amount": 10}, key="k2")
    assert bad_again.status_code == 200
    assert bad_again.json()["decision"] == "DUPLICATE"
    assert bad_again.json()["first"] == {
        "decision": "REJECTED",
        "code": "INVALID_TRANSITION",
        "check": None,
        "message": bad.json()["message"],
    }
    fixed = (await _step(acme, "o-3", "InventoryValidated", {}, key="k3")).json()
    assert (fixed["decision"], fixed["seq_id"]) == ("APPLY", 2)


async def test_an_unkeyed_repeat_of_the_last_step_within_the_window(clients: dict[str, httpx.AsyncClient]) -> None:
    """Without a key, the same step and data as the last applied step is a DUPLICATE; other data is new."""
    acme = clients["acme"]
    await acme.post("/v1/plans", json={"order_id": "o-4"})
    assert (await _step(acme, "o-4", "OrderCreated", CREATED)).json()["decision"] == "APPLY"
    repeat = (await _step(acme, "o-4", "OrderCreated", CREATED)).json()
    assert (repeat["decision"], repeat["first"]["decision"], repeat["seq_id"]) == ("DUPLICATE", "APPLY", 1)
    other = await _step(acme, "o-4", "OrderCreated", {**CREATED, "user_id": "u2"})
    assert other.json()["decision"] == "REJECTED" and other.json()["seq_id"] == 2


async def test_parallel_proposals_take_consecutive_numbers(clients: dict[str, httpx.AsyncClient]) -> None:
    """Steps proposed at once, each under its own key, take distinct consecutive numbers (none buffered)."""
    acme = clients["acme"]
    await acme.post("/v1/plans", json={"order_id": "o-5", "process": "order"})
    await _step(acme, "o-5", "OrderCreated", CREATED)
    # every one is a valid next step only once: one applies, the others are REJECTED and free their number
    answers = await asyncio.gather(
        *(_step(acme, "o-5", "InventoryValidated", {"warehouse_id": f"w-{i}"}, key=f"p{i}") for i in range(6))
    )
    decisions = sorted(a.json()["decision"] for a in answers)
    assert decisions == ["APPLY"] + ["REJECTED"] * 5
    assert {a.json()["seq_id"] for a in answers} == {2, 3}
    order = (await acme.get("/v1/orders/o-5")).json()
    assert (order["last_seq"], order["buffered"]) == (2, [])


async def test_another_tenant_sees_nothing(clients: dict[str, httpx.AsyncClient]) -> None:
    """globex cannot step, abort or read acme's order (404), and may start its own order of the same id;
    a key spanning every tenant may not propose steps (403)."""
    acme, globex = clients["acme"], clients["globex"]
    await acme.post("/v1/plans", json={"order_id": "o-6"})
    assert (await _step(globex, "o-6", "OrderCreated", CREATED)).status_code == 404
    assert (await globex.post("/v1/orders/o-6/abort", json={"reason": "x"})).status_code == 404
    assert (await globex.post("/v1/plans", json={"order_id": "o-6"})).status_code == 201
    spanning = await _step(clients["ops"], "o-6", "OrderCreated", CREATED)
    assert spanning.status_code == 403 and spanning.json()["code"] == "FORBIDDEN"


async def test_abort_and_replan_without_numbers(clients: dict[str, httpx.AsyncClient]) -> None:
    """replan swaps the order's plan (the next step continues it at last_seq + 1); abort ends it (manual)."""
    acme = clients["acme"]
    await acme.post("/v1/plans", json={"order_id": "o-7"})
    await _step(acme, "o-7", "OrderCreated", CREATED)
    replanned = await acme.post("/v1/orders/o-7/replan", json={"reason": "the warehouse changed"})
    assert replanned.status_code == 200 and replanned.json()["decision"] == "APPLY", replanned.text
    new_plan = replanned.json()["plan_id"]
    step = (await _step(acme, "o-7", "InventoryValidated", {})).json()
    assert (step["decision"], step["seq_id"]) == ("APPLY", 2)
    assert (await acme.get("/v1/orders/o-7")).json()["plan_id"] == new_plan
    aborted = await acme.post("/v1/orders/o-7/abort", json={"reason": "customer cancelled"})
    assert aborted.json()["decision"] == "APPLY" and aborted.json()["order"]["status"] == "aborted"
    late = (await _step(acme, "o-7", "PaymentProcessed", {"amount": 10})).json()
    assert late["decision"] == "DISCARD"


async def test_a_held_step_keeps_its_number(clients: dict[str, httpx.AsyncClient], db: Database) -> None:
    """A payment HELD for approval (202, approval_id) keeps seq 3: the next proposal takes 4 and waits
    (BUFFER); once approved both apply; a keyed repeat of the held step answers DUPLICATE with first HELD."""
    acme = clients["acme"]
    big = {"items": [{"product_id": "p", "quantity": 1, "unit_price": 1500}], "total_amount": 1500, "currency": "USD"}
    assert (await acme.post("/v1/plans", json={"order_id": "o-8", "process": "order_reviewed"})).status_code == 201
    assert (await _step(acme, "o-8", "OrderCreated", big)).json()["decision"] == "APPLY"
    assert (await _step(acme, "o-8", "InventoryValidated", {})).json()["decision"] == "APPLY"
    pay = {"payment_id": "pay", "amount": 1500, "currency": "USD"}
    held = await _step(acme, "o-8", "PaymentProcessed", pay, key="pay")
    assert held.status_code == 202, held.text
    assert (held.json()["decision"], held.json()["seq_id"]) == ("HELD", 3) and held.json()["approval_id"]
    after = (await _step(acme, "o-8", "OrderShipped", {"carrier": "ups"})).json()
    assert (after["decision"], after["seq_id"]) == ("BUFFER", 4)
    again = (await _step(acme, "o-8", "PaymentProcessed", pay, key="pay")).json()
    assert (again["decision"], again["first"]["decision"], again["seq_id"]) == ("DUPLICATE", "HELD", 3)
    _, approver_key = await create_key(db, "acme", frozenset({Role.APPROVER}))
    approved = await acme.post(
        f"/v1/approvals/{held.json()['approval_id']}/approve", headers={"Authorization": f"Bearer {approver_key}"}
    )
    assert approved.status_code == 200, approved.text
    order = (await acme.get("/v1/orders/o-8")).json()
    assert (order["status"], order["last_seq"], order["buffered"]) == ("shipped", 4, [])


async def test_group_committed_proposals_of_one_order_are_numbered_one_transaction_at_a_time(db: Database) -> None:
    """Proposals sharing a group-commit batch: different orders are decided together; a second proposal of
    the same order is numbered from the state the first left, so a REJECTED first frees its number (none
    buffered)."""
    from nexus.ingress import steps_api
    from nexus.ingress.batcher import GroupCommitter

    gateway = Gateway(db)
    committer = GroupCommitter(gateway, workers=1, window_ms=200)
    committer.start()
    _, key = await create_key(db, "acme", frozenset({Role.AGENT}))
    principal = await create_app(db, gateway).state.keys.lookup(key)
    try:
        for order_id in ("g-1", "g-2"):
            caller = steps_api.StepCaller(db, gateway, principal, committer)
            await steps_api.start_plan(caller, steps_api.StartPlan(order_id=order_id))

        async def propose(order_id: str, step: str, data: dict[str, Any]) -> dict[str, Any]:
            request = steps_api.ProposeStep(step=step, data=data)
            caller = steps_api.StepCaller(db, gateway, principal, committer)
            return (await steps_api.propose_step(caller, order_id, request))[1]

        # in one batch: a wrong first step of g-1 (REJECTED), the right one after it, and g-2's first step
        answers = await asyncio.gather(
            propose("g-1", "InventoryValidated", {}),
            propose("g-1", "OrderCreated", CREATED),
            propose("g-2", "OrderCreated", CREATED),
        )
    finally:
        await committer.stop()
    assert [(a["decision"], a["seq_id"]) for a in answers] == [("REJECTED", 1), ("APPLY", 1), ("APPLY", 1)]
    for order_id in ("g-1", "g-2"):
        order = await db.fetchrow("SELECT last_seq FROM orders WHERE tenant_id = 'acme' AND order_id = $1", order_id)
        assert order["last_seq"] == 1
    assert await db.fetchval("SELECT count(*) FROM pending_events") == 0
