"""REJECTED end to end over HTTP against a real `nexus serve` and PostgreSQL: every code, replays,
corrections, the refund process, the processes API, tenant limits and metrics."""

from __future__ import annotations

import subprocess
import sys
import uuid
from typing import Any

import asyncpg
import httpx
import pytest

from nexus.settings import Settings
from tests.conftest import api_headers, root_headers, settings_env
from tests.factories import plan_json, step_json

pytestmark = pytest.mark.slow


@pytest.fixture
async def api(start_gateway) -> Any:  # type: ignore[no-untyped-def]
    _, base = start_gateway("--no-dispatcher")
    async with httpx.AsyncClient(base_url=base, timeout=10, headers=api_headers()) as client:
        yield client


def pay(order: str, **data: Any) -> dict[str, Any]:
    return step_json(order, "p", 3, data={"payment_id": "pay-1", "amount": 10, "currency": "USD", **data})


async def test_each_code_single_envelope_is_422(api: httpx.AsyncClient, settings: Settings) -> None:
    """INVALID_TRANSITION, UNKNOWN_STEP, CHECK_FAILED (with its check) and AFTER_TERMINAL answer 422 with
    the code; nothing is written to the order or the outbox."""
    s1, s2, s3, s4, s5 = plan_json("o-codes", "p", 5)
    assert (await api.post("/v1/events", json=s1)).status_code == 200
    skipped = step_json("o-codes", "p", 2, event_type="PaymentProcessed", data={"amount": 10, "currency": "USD"})
    cases = [
        (skipped, "INVALID_TRANSITION", None),
        (step_json("o-codes", "p", 2, event_type="OrderTeleported"), "UNKNOWN_STEP", None),
    ]
    for event, code, check in cases:
        r = await api.post("/v1/events", json=event)
        body = r.json()
        assert r.status_code == 422 and body["code"] == code
        assert body["results"][0]["decision"] == "REJECTED" and body["results"][0]["check"] == check
    assert (
        "allowed next steps: InventoryValidated, ABORT_PLAN"
        in (await api.post("/v1/events", json=skipped)).json()["message"]
    )
    assert (await api.post("/v1/events", json=s2)).status_code == 200
    for event, check in [
        (pay("o-codes", amount=11), "payment_amount_matches_order"),
        (pay("o-codes", currency="EUR"), "payment_currency_matches_order"),
    ]:
        body = (await api.post("/v1/events", json=event)).json()
        assert (body["code"], body["check"]) == ("CHECK_FAILED", check)
    for event in (s3, s4, s5):
        assert (await api.post("/v1/events", json=event)).status_code == 200
    after = step_json("o-codes", "p", 6, event_type="OrderShipped")
    r = await api.post("/v1/events", json=after)
    assert r.status_code == 422 and r.json()["code"] == "AFTER_TERMINAL"
    order = (await api.get("/v1/orders/o-codes")).json()
    assert (order["status"], order["last_seq"], order["notifications"]) == ("completed", 5, 5)
    conn = await asyncpg.connect(settings.database_url)
    try:
        assert await conn.fetchval("SELECT count(*) FROM rejected_events WHERE order_id = 'o-codes'") == 5
        assert await conn.fetchval("SELECT count(*) FROM outbox o JOIN rejected_events r USING (event_id)") == 0
    finally:
        await conn.close()
    text = (await api.get("/metrics", headers=root_headers())).text
    assert 'nexus_blocked_actions_total{code="CHECK_FAILED"} 2.0' in text
    assert 'outcome="rejected"' in text


async def test_batch_results_replay_and_correction(api: httpx.AsyncClient) -> None:
    """In a batch, a rejected step is a 200 result with code, check and message; resent, the same answer;
    a corrected step (new event_id, same seq) applies."""
    s1, s2, s3 = plan_json("o-fix", "p", 3)
    wrong = pay("o-fix", amount=12)
    r = await api.post("/v1/events", json={"events": [s1, s2, wrong]})
    assert r.status_code == 200
    result = r.json()["results"][2]
    assert result["decision"] == "REJECTED" and result["code"] == "CHECK_FAILED"
    assert result["check"] == "payment_amount_matches_order" and result["message"]
    assert result["order"] == {"status": "inventory_validated", "last_seq": 2}
    again = (await api.post("/v1/events", json=wrong)).json()
    assert (again["code"], again["check"]) == ("CHECK_FAILED", "payment_amount_matches_order")
    fixed = (await api.post("/v1/events", json=s3)).json()["results"][0]
    assert fixed["decision"] == "APPLY" and fixed["order"]["last_seq"] == 3


@pytest.mark.processes
async def test_limit_per_tenant(api: httpx.AsyncClient, settings: Settings) -> None:
    """An order above the default limit is LIMIT_EXCEEDED; `nexus tenants set-limit` changes a tenant's."""
    big = step_json(
        "o-big",
        "p",
        1,
        data={
            "items": [{"product_id": "p", "quantity": 1, "unit_price": 150000}],
            "total_amount": 150000,
            "currency": "USD",
        },
    )
    r = await api.post("/v1/events", json=big)
    assert r.status_code == 422 and (r.json()["code"], r.json()["check"]) == ("LIMIT_EXCEEDED", "order_within_limit")
    done = subprocess.run(
        [sys.executable, "-m", "nexus.cli", "tenants", "set-limit", "default", "200000"],
        env=settings_env(settings),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    retry = dict(big, event_id=str(uuid.uuid4()))
    assert (await api.post("/v1/events", json=retry)).json()["results"][0]["decision"] == "APPLY"


async def test_refund_process_end_to_end(api: httpx.AsyncClient) -> None:
    """The refund process: the automatic path under the threshold, the review path above it, each
    branch's wrong turn rejected, and its states reported."""

    def ev(order: str, seq: int, event_type: str, **data: Any) -> dict[str, Any]:
        return step_json(order, "rp", seq, event_type=event_type, process="refund", data=data)

    small = [
        ev("r-small", 1, "RefundRequested", amount="40.00", currency="EUR", reason="broken"),
        ev("r-small", 2, "RefundAutoApproved"),
        ev("r-small", 3, "RefundPaid", amount="40.00", currency="EUR"),
    ]
    wrong_branch = ev("r-small", 2, "RefundReviewStarted")
    body = (await api.post("/v1/events", json={"events": [small[0], wrong_branch, *small[1:]]})).json()
    assert [r["decision"] for r in body["results"]] == ["APPLY", "REJECTED", "APPLY", "APPLY"]
    assert body["results"][1]["check"] == "above_auto_threshold"
    assert (await api.get("/v1/orders/r-small")).json()["status"] == "paid"
    big = [
        ev("r-big", 1, "RefundRequested", amount=250, currency="EUR", reason="lost"),
        ev("r-big", 2, "RefundAutoApproved"),
        ev("r-big", 2, "RefundReviewStarted"),
        ev("r-big", 3, "RefundReviewApproved", reviewer="ana"),
        ev("r-big", 4, "RefundPaid", amount=250, currency="EUR"),
    ]
    body = (await api.post("/v1/events", json={"events": big})).json()
    assert [r["decision"] for r in body["results"]] == ["APPLY", "REJECTED", "APPLY", "APPLY", "APPLY"]
    order = (await api.get("/v1/orders/r-big")).json()
    assert (order["status"], order["last_seq"], order["notifications"]) == ("paid", 4, 4)


async def test_processes_api(api: httpx.AsyncClient) -> None:
    """GET /v1/processes lists the registered definitions; GET /v1/processes/{name} shows one; 404 else."""
    listing = (await api.get("/v1/processes")).json()["processes"]
    assert {("order", 2), ("refund", 1)} <= {(p["name"], p["version"]) for p in listing}
    order = (await api.get("/v1/processes/order")).json()
    assert order["steps"]["PaymentProcessed"]["from"] == ["inventory_validated"]
    assert order["mermaid"].startswith("stateDiagram-v2")
    assert (await api.get("/v1/processes/nope")).status_code == 404


async def test_changed_definition_without_new_version_is_refused(start_gateway, settings: Settings, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A definition file changed without raising its version makes `nexus serve` refuse to start."""
    folder = tmp_path / "procs"
    folder.mkdir()
    text = (
        "name: tiny\nversion: 1\nstates: [a, b]\nterminal: [b]\nsteps:\n"
        "  Go: {from: [null], to: a}\n  End: {from: [a], to: b}\n"
    )
    (folder / "tiny.yaml").write_text(text)
    proc, _ = start_gateway("--no-dispatcher", settings_=settings.replace(process_dir=folder))
    proc.terminate()
    (folder / "tiny.yaml").write_text(text.replace("to: b}", "to: a}"))
    env = settings_env(settings.replace(process_dir=folder))
    done = subprocess.run(
        [sys.executable, "-m", "nexus.cli", "serve", "--no-dispatcher"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert "tiny v1 changed since it was registered" in done.stderr


async def test_max_rejections_aborts_the_plan(api: httpx.AsyncClient) -> None:
    """The refund process allows 3 rejections per plan: the third aborts it (policy_violation, 1 notification)."""
    bad = [
        step_json("r-policy", "rp", 1, event_type="RefundRequested", process="refund",
                  data={"amount": 0, "currency": "EUR", "reason": "x"})
        for _ in range(3)
    ]  # fmt: skip
    answers = [(await api.post("/v1/events", json=b)).json() for b in bad]
    assert [a["check"] for a in answers] == ["amount_positive"] * 3
    assert answers[2]["results"][0]["order"]["status"] == "aborted"
    order = (await api.get("/v1/orders/r-policy")).json()
    assert (order["status"], order["notifications"]) == ("aborted", 1)
    late = step_json("r-policy", "rp", 1, event_type="RefundRequested", process="refund",
                     data={"amount": 5, "currency": "EUR", "reason": "x"})  # fmt: skip
    assert (await api.post("/v1/events", json=late)).json()["results"][0]["decision"] == "DISCARD"


@pytest.mark.processes
def test_processes_list_and_show_cli(settings: Settings) -> None:
    """`nexus processes list` registers and lists the definitions; `show NAME --mermaid` draws one."""
    env = settings_env(settings)

    def nexus(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "nexus.cli", *args], env=env, capture_output=True, text=True, timeout=60
        )

    listed = nexus("processes", "list")
    assert listed.returncode == 0, listed.stderr
    assert "order" in listed.stdout and "refund" in listed.stdout
    shown = nexus("processes", "show", "refund", "--mermaid")
    assert shown.returncode == 0 and shown.stdout.startswith("stateDiagram-v2")
    assert "requested --> under_review: RefundReviewStarted" in shown.stdout
    assert nexus("processes", "show", "nope").returncode == 1


async def test_drained_step_rejected_and_successors_wait(api: httpx.AsyncClient, settings: Settings) -> None:
    """A buffered payment of the wrong amount is rejected when its gap fills; seq 4 stays buffered until
    the corrected payment arrives, then drains."""
    s1, s2, s3, s4 = plan_json("o-drain", "p", 4)
    wrong = pay("o-drain", amount=99)
    body = (await api.post("/v1/events", json={"events": [s1, wrong, s4]})).json()
    assert [r["decision"] for r in body["results"]] == ["APPLY", "BUFFER", "BUFFER"]
    assert (await api.post("/v1/events", json=s2)).json()["results"][0]["order"] == {
        "status": "inventory_validated",
        "last_seq": 2,
    }
    order = (await api.get("/v1/orders/o-drain")).json()
    assert (order["last_seq"], order["buffered"], order["notifications"]) == (2, [4], 2)
    again = (await api.post("/v1/events", json=wrong)).json()
    assert (again["code"], again["check"]) == ("CHECK_FAILED", "payment_amount_matches_order")
    drained = (await api.post("/v1/events", json=s3)).json()["results"][0]
    assert drained["decision"] == "APPLY" and drained["order"] == {"status": "shipped", "last_seq": 4}
    conn = await asyncpg.connect(settings.database_url)
    try:
        assert await conn.fetchval(
            "SELECT drained FROM rejected_events WHERE event_id = $1", uuid.UUID(wrong["event_id"])
        )
    finally:
        await conn.close()
