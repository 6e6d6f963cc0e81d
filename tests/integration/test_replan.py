"""The plan swap end to end (real PostgreSQL, two real `nexus serve` processes), and the history
API and `nexus orders show` that tell it from the decision log."""

from __future__ import annotations

import json
import random
from typing import Any

import httpx
import pytest

from nexus.settings import Settings
from nexus.store.database import Database
from tests.conftest import api_headers, settings_env
from tests.factories import abort_json, replan_json, step_json
from tests.helpers import nexus_command

pytestmark = pytest.mark.slow

P, Q = "plan-a", "plan-b"
# `actor` and `actor_name` (who took the decision: docs/decision-log.md) joined the history's items.
HISTORY_KEYS = {
    "seq", "event_type", "event_id", "decision", "code", "check", "message", "at", "actor", "actor_name",
    "notification_id",
}  # fmt: skip


async def post(client: httpx.AsyncClient, body: Any) -> dict[str, Any]:
    response = await client.post("/v1/events", json=body, headers=api_headers())
    assert response.status_code in (200, 409), response.text
    result: dict[str, Any] = response.json()["results"][0]
    return result


@pytest.mark.parametrize("k", [1, 2, 3, 4])
async def test_swap_at_each_position_through_two_gateways(start_gateway, db: Database, k: int) -> None:  # type: ignore[no-untyped-def]
    """A REPLAN after old seq k, old stragglers before and after it, shuffled and duplicated over two
    gateways: new plan applies k+1..5, one REPLAN notification, stragglers DISCARD PLAN_SUPERSEDED."""
    rng = random.Random(k)
    _, base_a = start_gateway("--no-dispatcher")
    _, base_b = start_gateway("--no-dispatcher")
    order = f"o-swap-{k}"
    old = [step_json(order, P, s) for s in range(1, 6)]
    new = [step_json(order, Q, s) for s in range(k + 1, 6)]
    swap = replan_json(order, P, Q)
    head = old[:k] * 2
    rng.shuffle(head)
    early_stragglers = old[k + 1 : 5]  # buffered under the old plan, dropped by the REPLAN
    tail = [*new, *new, *old[k:], swap]
    rng.shuffle(tail)
    async with httpx.AsyncClient(base_url=base_a, timeout=10) as a, httpx.AsyncClient(base_url=base_b, timeout=10) as b:
        clients = [a, b]
        for body in [*head, *early_stragglers]:
            await post(rng.choice(clients), body)
        assert (await post(rng.choice(clients), swap))["decision"] == "APPLY"
        decisions: dict[str, set[tuple[str, str | None]]] = {}
        for body in tail:
            result = await post(rng.choice(clients), body)
            decisions.setdefault(body["plan_id"], set()).add((result["decision"], result["code"]))
        got = (await a.get(f"/v1/orders/{order}", headers=api_headers())).json()
    assert (got["plan_id"], got["status"], got["last_seq"], got["buffered"]) == (Q, "completed", 5, [])
    assert got["notifications"] == 6  # five steps and the REPLAN
    # every old-plan step after the swap: an expected straggler, never a dead letter
    assert decisions[P] <= {("DISCARD", "PLAN_SUPERSEDED"), ("DUPLICATE", None)}
    assert ("DISCARD", "PLAN_SUPERSEDED") in decisions[P]
    outbox = await db.fetch("SELECT position, plan_id, event_type, seq_id FROM outbox WHERE order_id = $1", order)
    rows = sorted((r["position"], r["plan_id"], r["event_type"], r["seq_id"]) for r in outbox)
    assert [r[0] for r in rows] == list(range(1, 7))
    assert rows[k] == (k + 1, P, "REPLAN", None)
    assert all(r[1] == P for r in rows[:k]) and all(r[1] == Q for r in rows[k + 1 :])
    assert [r[3] for r in rows if r[3] is not None] == [1, 2, 3, 4, 5]
    assert await db.fetchval("SELECT count(*) FROM dead_letters WHERE order_id = $1", order) == 0


async def test_history_lists_every_decision_with_its_notification(start_gateway) -> None:  # type: ignore[no-untyped-def]
    """GET /v1/orders/{id}/history and /v1/plans/{plan_id}/history: each decision, in order, exact keys."""
    _, base = start_gateway("--no-dispatcher")
    order = "o-history"
    s1, s2, s3 = (step_json(order, P, s) for s in (1, 2, 3))
    n3 = step_json(order, Q, 3)
    async with httpx.AsyncClient(base_url=base, timeout=10) as api:
        for body in (s1, s3, s2, s1, replan_json(order, P, Q), n3, step_json(order, P, 4), step_json(order, "zz", 4)):
            await post(api, body)
        response = await api.get(f"/v1/orders/{order}/history", headers=api_headers())
        plan = await api.get(f"/v1/plans/{Q}/history", headers=api_headers())
        missing = await api.get("/v1/orders/nope/history", headers=api_headers())
    assert response.status_code == 200
    items = response.json()["items"]
    assert all(set(i) == HISTORY_KEYS for i in items)
    summary = [(i["seq"], i["event_type"], i["decision"], i["code"]) for i in items]
    assert summary == [
        (1, "OrderCreated", "APPLY", None),
        (3, "PaymentProcessed", "BUFFER", None),
        (2, "InventoryValidated", "APPLY", None),
        (3, "PaymentProcessed", "APPLY", None),
        (1, "OrderCreated", "DUPLICATE", None),
        (None, "REPLAN", "APPLY", None),
        (3, "PaymentProcessed", "DUPLICATE", None),
        (4, "OrderShipped", "DISCARD", "PLAN_SUPERSEDED"),
        (4, "OrderShipped", "PLAN_MISMATCH", "PLAN_MISMATCH"),
    ]
    applied = [i for i in items if i["decision"] == "APPLY"]
    assert all(i["notification_id"] for i in applied)
    assert all(i["notification_id"] is None for i in items if i["decision"] != "APPLY")
    assert items[0]["event_id"] == s1["event_id"]
    assert plan.status_code == 200 and [i["event_id"] for i in plan.json()["items"]] == [n3["event_id"]]
    assert missing.status_code == 404 and {"code", "message", "request_id"} <= set(missing.json())


@pytest.mark.processes
async def test_orders_show_prints_the_timeline(settings: Settings, db: Database) -> None:
    """`nexus orders show ID` prints the order and one line per decision, and --json the history items."""
    from nexus.core.decide.items import Incoming
    from nexus.gateway import Gateway

    order = "o-show"
    await Gateway(db).submit(
        [Incoming.parse(b) for b in (step_json(order, P, 1), replan_json(order, P, Q), abort_json(order, Q))]
    )
    env = settings_env(settings)
    text = nexus_command("orders", "show", order, env=env)
    lines = text.strip().splitlines()
    assert "status aborted" in lines[0] and f"plan {Q}" in lines[0]
    assert ["APPLY" in line for line in lines[1:]] == [True, True, True]
    assert "REPLAN" in lines[2] and "ABORT_PLAN" in lines[3]
    raw = nexus_command("orders", "show", order, "--json", env=env)

    assert [i["event_type"] for i in json.loads(raw)["items"]] == ["OrderCreated", "REPLAN", "ABORT_PLAN"]
