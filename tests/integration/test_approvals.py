"""Human approval end to end against a real `nexus serve`: held steps answered 202 with successors
waiting, approval (API and `nexus approvals`), denial, expiry, and the decision log naming who answered."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from nexus.auth.keys import create_key
from nexus.auth.roles import Role
from nexus.settings import Settings
from nexus.store.database import Database
from tests.conftest import api_headers, settings_env
from tests.factories import step_json
from tests.helpers import nexus_command
from tests.unit.test_approvals import approval_yaml

pytestmark = pytest.mark.slow


@pytest.fixture
def approval_settings(settings: Settings, tmp_path: Path) -> Settings:
    folder = tmp_path / "processes"
    folder.mkdir()
    (folder / "approved.yaml").write_text(approval_yaml(expires_s=600), encoding="utf-8")
    (folder / "soon.yaml").write_text(approval_yaml(expires_s=1.5, name="soon"), encoding="utf-8")
    return settings.replace(process_dir=folder, approval_sweep_s=0.1)


@pytest.fixture
async def api(start_gateway, approval_settings: Settings) -> Any:  # type: ignore[no-untyped-def]
    _, base = start_gateway("--no-dispatcher", settings_=approval_settings)
    async with httpx.AsyncClient(base_url=base, timeout=10) as client:
        yield client


def big(order: str, seq: int, amount: int = 5000, process: str = "approved") -> dict[str, Any]:
    body = step_json(order, "p-ap", seq, process=process)
    if seq == 1:
        body["data"].update(items=[{"product_id": "p", "quantity": 1, "unit_price": amount}], total_amount=amount)
    if seq == 3:
        body["data"]["amount"] = amount
    return body


async def held_order(
    api: httpx.AsyncClient, order: str, process: str = "approved", headers: dict[str, str] | None = None
) -> tuple[str, dict[str, Any]]:
    """An order whose payment is held, with shipping and completion waiting in the buffer."""
    headers = headers or api_headers()
    for body in (big(order, 1, process=process), big(order, 2, process=process)):
        assert (await api.post("/v1/events", json=body, headers=headers)).json()["results"][0]["decision"] == "APPLY"
    payment = big(order, 3, process=process)
    single = await api.post("/v1/events", json=payment, headers=headers)
    assert single.status_code == 202
    result = single.json()["results"][0]
    assert result["decision"] == "HELD" and result["approval_id"]
    later = [big(order, 4, process=process), big(order, 5, process=process)]
    batch = await api.post("/v1/events", json={"events": later}, headers=headers)
    assert [r["decision"] for r in batch.json()["results"]] == ["BUFFER", "BUFFER"]
    return result["approval_id"], payment


async def test_approval_applies_the_step_and_drains_successors(api: httpx.AsyncClient, db: Database) -> None:
    """Approve: the held payment applies, shipping and completion drain; the log records who approved."""
    approval_id, payment = await held_order(api, "o-ok")
    listed = (await api.get("/v1/approvals", headers=api_headers())).json()["approvals"]
    assert [(a["approval_id"], a["order_id"], a["seq"], a["status"]) for a in listed] == [
        (approval_id, "o-ok", 3, "pending")
    ]
    order = (await api.get("/v1/orders/o-ok", headers=api_headers())).json()
    assert (order["last_seq"], order["buffered"], order["notifications"]) == (2, [4, 5], 2)
    answer = await api.post(f"/v1/approvals/{approval_id}/approve", headers=api_headers())
    assert answer.status_code == 200 and answer.json()["result"]["decision"] == "APPLY"
    again = await api.post(f"/v1/approvals/{approval_id}/approve", headers=api_headers())
    assert again.status_code == 409 and again.json()["code"] == "APPROVAL_NOT_PENDING"
    order = (await api.get("/v1/orders/o-ok", headers=api_headers())).json()
    assert (order["status"], order["last_seq"], order["buffered"], order["notifications"]) == ("completed", 5, [], 5)
    key_id = await db.fetchval("SELECT id FROM api_keys WHERE name = 'tests'")  # tests/conftest.py
    key = f"key:{key_id}"
    rows = await db.fetch(
        "SELECT seq, decision, actor, actor_name FROM decision_log WHERE order_id = 'o-ok' ORDER BY position"
    )
    assert [tuple(r) for r in rows][-5:] == [
        (4, "BUFFER", key, "tests"),  # the agent's steps, by its key
        (5, "BUFFER", key, "tests"),
        (3, "APPLY", key, "tests"),  # the approver's answer (the same key here) and what it drained
        (4, "APPLY", key, "tests"),
        (5, "APPLY", key, "tests"),
    ]
    history = (await api.get("/v1/orders/o-ok/history", headers=api_headers())).json()["items"]
    assert [(i["actor"], i["actor_name"]) for i in history][-1] == (key, "tests")
    resent = await api.post("/v1/events", json=payment, headers=api_headers())
    assert resent.json()["results"][0]["decision"] == "DUPLICATE"
    assert (await api.get("/v1/approvals", headers=api_headers())).json()["approvals"] == []


async def test_denial_rejects_and_successors_keep_waiting(api: httpx.AsyncClient, db: Database) -> None:
    """Deny: REJECTED APPROVAL_DENIED (resent: the same), successors stay buffered, a corrected step applies."""
    approval_id, payment = await held_order(api, "o-no")
    answer = await api.post(f"/v1/approvals/{approval_id}/deny", headers=api_headers())
    result = answer.json()["result"]
    assert (result["decision"], result["code"]) == ("REJECTED", "APPROVAL_DENIED")
    resent = await api.post("/v1/events", json=payment, headers=api_headers())
    assert resent.status_code == 422 and resent.json()["results"][0]["code"] == "APPROVAL_DENIED"
    order = (await api.get("/v1/orders/o-no", headers=api_headers())).json()
    assert (order["last_seq"], order["buffered"]) == (2, [4, 5])
    history = (await api.get("/v1/orders/o-no/history", headers=api_headers())).json()["items"]
    assert ("REJECTED", "APPROVAL_DENIED") in [(i["decision"], i["code"]) for i in history]
    from nexus.store.queries import query

    counts = await db.fetchrow(query("checker.sql", "lifecycle"), ["o-no"])  # the checker's accounting
    assert tuple(counts) == (0, 0, 0, 1, 0)  # superseded, timed out, held, denied, approved


async def test_an_unanswered_approval_expires_as_a_denial(api: httpx.AsyncClient, db: Database) -> None:
    """Not answered within expires_s: denied by the expiry sweeper (REJECTED APPROVAL_DENIED)."""
    approval_id, _ = await held_order(api, "o-late", process="soon")
    for _ in range(100):
        status = await db.fetchval("SELECT status FROM approvals WHERE approval_id = $1::uuid", approval_id)
        if status != "pending":
            break
        await asyncio.sleep(0.1)
    assert status == "expired"
    row = await db.fetchrow(
        "SELECT decision, code, actor FROM decision_log WHERE order_id = 'o-late' ORDER BY position DESC LIMIT 1"
    )
    assert tuple(row) == ("REJECTED", "APPROVAL_DENIED", "system:expiry")  # type: ignore[arg-type]
    late = await api.post(f"/v1/approvals/{approval_id}/approve", headers=api_headers())
    assert late.status_code == 409


@pytest.mark.processes
async def test_nexus_approvals_cli_lists_and_approves(api: httpx.AsyncClient, approval_settings: Settings) -> None:
    """`nexus approvals list` shows the held step; `nexus approvals approve ID --by` applies it as that person."""
    approval_id, _ = await held_order(api, "o-cli")
    env = settings_env(approval_settings)

    def nexus(*args: str) -> str:
        return nexus_command("approvals", *args, env=env)

    assert approval_id in nexus("list")
    assert "APPLY" in nexus("--by", "carol", "approve", approval_id)
    history = (await api.get("/v1/orders/o-cli/history", headers=api_headers())).json()["items"]
    assert [i["decision"] for i in history][-3:] == ["APPLY", "APPLY", "APPLY"]


async def test_a_batch_answers_held_steps_200_with_their_approval_id(api: httpx.AsyncClient) -> None:
    """In a batch, a held step is a per-event result HELD with its approval_id; the request is 200."""
    response = await api.post(
        "/v1/events", json={"events": [big("o-batch", s) for s in (1, 2, 3)]}, headers=api_headers()
    )
    assert response.status_code == 200
    results = response.json()["results"]
    assert [r["decision"] for r in results] == ["APPLY", "APPLY", "HELD"]
    listed = (await api.get("/v1/approvals", headers=api_headers())).json()["approvals"]
    assert results[2]["approval_id"] in [a["approval_id"] for a in listed]
    assert "approval_id" not in results[0]


async def test_approvals_stay_within_their_tenant(api: httpx.AsyncClient, db: Database) -> None:
    """Another tenant's approver neither lists nor answers an approval (404, as for an unknown one); a key
    without the approver role is refused 403; the tenant's own approver applies it, named in the log."""
    keys, ids = {}, {}
    for name, tenant, roles in (
        ("acme-agent", "acme", {Role.AGENT}),
        ("acme-operator", "acme", {Role.OPERATOR}),
        ("acme-approver", "acme", {Role.APPROVER}),
        ("globex-approver", "globex", {Role.APPROVER}),
    ):
        record, key = await create_key(db, tenant, frozenset(roles), name=name)
        keys[name] = {"Authorization": f"Bearer {key}"}
        ids[name] = record.id
    approval_id, _ = await held_order(api, "o-t", headers=keys["acme-agent"])
    assert (await api.get("/v1/approvals", headers=keys["globex-approver"])).json()["approvals"] == []
    assert (await api.get("/v1/approvals", headers=api_headers())).json()["approvals"] == []  # tenant default
    listed = (await api.get("/v1/approvals", headers=keys["acme-operator"])).json()["approvals"]
    assert [(a["approval_id"], a["tenant_id"]) for a in listed] == [(approval_id, "acme")]
    foreign = await api.post(f"/v1/approvals/{approval_id}/approve", headers=keys["globex-approver"])
    unknown = await api.post(f"/v1/approvals/{uuid.uuid4()}/approve", headers=keys["globex-approver"])
    assert (foreign.status_code, foreign.json()["code"]) == (unknown.status_code, unknown.json()["code"])
    assert (foreign.status_code, foreign.json()["code"]) == (404, "NOT_FOUND")
    denied = await api.post(f"/v1/approvals/{approval_id}/deny", headers=keys["globex-approver"])
    assert denied.status_code == 404
    for refused in ("acme-agent", "acme-operator"):
        answer = await api.post(f"/v1/approvals/{approval_id}/approve", headers=keys[refused])
        assert (answer.status_code, answer.json()["code"]) == (403, "FORBIDDEN"), refused
    assert await db.fetchval("SELECT status FROM approvals WHERE approval_id = $1::uuid", approval_id) == "pending"
    answer = await api.post(f"/v1/approvals/{approval_id}/approve", headers=keys["acme-approver"])
    assert answer.status_code == 200 and answer.json()["result"]["decision"] == "APPLY"
    rows = await db.fetch(
        "SELECT seq, actor, actor_name FROM decision_log WHERE tenant_id = 'acme' AND order_id = 'o-t'"
        " AND decision = 'APPLY' ORDER BY position"
    )
    approver = f"key:{ids['acme-approver']}"
    assert [tuple(r) for r in rows][-3:] == [
        (3, approver, "acme-approver"),
        (4, approver, "acme-approver"),
        (5, approver, "acme-approver"),
    ]
