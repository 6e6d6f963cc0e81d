"""Every row of the decisions table, end to end over HTTP against a real `nexus serve` and PostgreSQL."""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg
import httpx
import pytest

from nexus.settings import Settings
from tests.conftest import api_headers, root_headers
from tests.factories import abort_json, plan_json, step_json

pytestmark = pytest.mark.slow


@pytest.fixture
async def api(start_gateway) -> Any:  # type: ignore[no-untyped-def]
    _, base = start_gateway("--no-dispatcher")
    async with httpx.AsyncClient(base_url=base, timeout=10, headers=api_headers()) as client:
        yield client


async def post(api: httpx.AsyncClient, body: Any) -> tuple[int, dict[str, Any]]:
    response = await api.post("/v1/events", json=body)
    return response.status_code, response.json()


async def decision(api: httpx.AsyncClient, event: dict[str, Any]) -> str:
    _, body = await post(api, event)
    return str(body["results"][0]["decision"])


async def test_apply_buffer_and_drain(api: httpx.AsyncClient) -> None:
    """In-order steps APPLY, a gap BUFFERs, and filling the gap drains the buffer in order."""
    s1, s2, s3, s4 = plan_json("o-apply", "p", 4)
    assert await decision(api, s1) == "APPLY"
    assert await decision(api, s3) == "BUFFER"
    assert await decision(api, s4) == "BUFFER"
    order = (await api.get("/v1/orders/o-apply")).json()
    assert order["buffered"] == [3, 4] and order["last_seq"] == 1
    status, body = await post(api, s2)
    assert status == 200
    assert body["results"][0] == {
        "event_id": s2["event_id"],
        "decision": "APPLY",
        "code": None,
        "order": {"status": "shipped", "last_seq": 4},
    }
    order = (await api.get("/v1/orders/o-apply")).json()
    assert order == {
        "order_id": "o-apply",
        "plan_id": "p",
        "status": "shipped",
        "last_seq": 4,
        "buffered": [],
        "notifications": 4,
        "tombstone": False,
    }


async def test_duplicates_write_nothing(api: httpx.AsyncClient, database_url: str) -> None:
    """A repeated step, an old step and a repeated buffered step are DUPLICATE and write no notification."""
    s1, s2, s3 = plan_json("o-dup", "p", 3)
    await post(api, s1)
    await post(api, s3)
    assert await decision(api, s1) == "DUPLICATE"
    assert await decision(api, dict(s1, event_id="1b4e28ba-2fa1-11d2-883f-0016d3cca427")) == "DUPLICATE"
    assert await decision(api, s3) == "DUPLICATE"
    await post(api, s2)
    conn = await asyncpg.connect(database_url)
    try:
        rows = await conn.fetch("SELECT seq_id, position FROM outbox WHERE order_id = 'o-dup' ORDER BY position")
    finally:
        await conn.close()
    assert [(r["seq_id"], r["position"]) for r in rows] == [(1, 1), (2, 2), (3, 3)]


async def test_abort_live_order_then_zombies_are_discarded(api: httpx.AsyncClient) -> None:
    """ABORT_PLAN on a live order applies (buffer dropped, one notification); later steps are DISCARD."""
    s1, s2, s3 = plan_json("o-abort", "p", 3)
    await post(api, s1)
    await post(api, s3)
    _status, body = await post(api, abort_json("o-abort", "p", 1))
    assert body["results"][0]["decision"] == "APPLY"
    assert body["results"][0]["order"] == {"status": "aborted", "last_seq": 1}
    assert await decision(api, s2) == "DISCARD"
    assert await decision(api, abort_json("o-abort", "p", 1)) == "DUPLICATE"
    order = (await api.get("/v1/orders/o-abort")).json()
    assert (order["status"], order["buffered"], order["notifications"]) == ("aborted", [], 2)


async def test_abort_before_any_event_is_a_tombstone(api: httpx.AsyncClient) -> None:
    """ABORT_PLAN first leaves an aborted tombstone; the plan's later steps are DISCARD."""
    assert await decision(api, abort_json("o-tomb", "p")) == "TOMBSTONE"
    assert await decision(api, step_json("o-tomb", "p", 1)) == "DISCARD"
    order = (await api.get("/v1/orders/o-tomb")).json()
    assert (order["status"], order["last_seq"], order["notifications"], order["tombstone"]) == (
        "aborted",
        0,
        0,
        True,
    )


async def test_abort_on_completed_order_is_duplicate(api: httpx.AsyncClient) -> None:
    """ABORT_PLAN on a completed order is DUPLICATE and the order stays completed."""
    _, body = await post(api, {"events": plan_json("o-done", "p")})
    assert [r["decision"] for r in body["results"]] == ["APPLY"] * 5
    assert await decision(api, abort_json("o-done", "p", 5)) == "DUPLICATE"
    assert (await api.get("/v1/orders/o-done")).json()["status"] == "completed"


async def test_other_plan_is_plan_mismatch_and_dead_lettered(api: httpx.AsyncClient) -> None:
    """A step of another plan for the order answers 409 PLAN_MISMATCH and is listed as a dead letter."""
    await post(api, step_json("o-pm", "p", 1))
    intruder = step_json("o-pm", "other-plan", 2)
    status, body = await post(api, intruder)
    assert status == 409
    assert body["code"] == "PLAN_MISMATCH"
    assert body["results"][0]["decision"] == "PLAN_MISMATCH"
    letters = (await api.get("/v1/dead-letters", params={"code": "PLAN_MISMATCH"})).json()["dead_letters"]
    assert [d["event_id"] for d in letters] == [intruder["event_id"]]
    assert (await api.get("/v1/orders/o-pm")).json()["last_seq"] == 1


async def test_malformed_input_is_dead_lettered_and_the_batch_goes_on(api: httpx.AsyncClient) -> None:
    """Not-JSON is 400 PARSE_ERROR, an invalid envelope 422 INVALID_EVENT; in a batch the rest is decided."""
    response = await api.post("/v1/events", content=b"{this is not json", headers={"content-type": "application/json"})
    assert response.status_code == 400
    assert response.json()["code"] == "PARSE_ERROR"
    bad = step_json("o-bad", "p", 1, seq_id=0)  # (a type out of its turn is the process's: REJECTED)
    status, body = await post(api, bad)
    assert (status, body["code"], body["results"][0]["decision"]) == (422, "INVALID_EVENT", "DEAD_LETTER")
    good = plan_json("o-batch", "p", 2)
    status, body = await post(api, {"events": [good[0], {"event_type": "Nope"}, good[1]]})
    assert status == 200
    assert [(r["decision"], r["code"]) for r in body["results"]] == [
        ("APPLY", None),
        ("DEAD_LETTER", "INVALID_EVENT"),
        ("APPLY", None),
    ]
    codes = [d["code"] for d in (await api.get("/v1/dead-letters")).json()["dead_letters"]]
    assert codes == ["PARSE_ERROR", "INVALID_EVENT", "INVALID_EVENT"]


async def test_nul_bytes_are_dead_lettered_not_lost(api: httpx.AsyncClient) -> None:
    """A body with a NUL byte, and a step whose data holds NUL (which jsonb refuses: INVALID_EVENT, decided
    before the database), are kept as dead letters; the neighbour applies."""
    response = await api.post(
        "/v1/events", content=b'{"event_id": "\x00"}', headers={"content-type": "application/json"}
    )
    assert (response.status_code, response.json()["code"]) == (400, "PARSE_ERROR")
    poisoned = step_json("o-nul", "p", 1)
    poisoned["data"]["note"] = "\u0000"
    neighbour = step_json("o-nul-neighbour", "p", 1)
    status, body = await post(api, {"events": [poisoned, neighbour]})
    assert status == 200
    assert [(r["decision"], r["code"]) for r in body["results"]] == [
        ("DEAD_LETTER", "INVALID_EVENT"),
        ("APPLY", None),
    ]
    codes = [d["code"] for d in (await api.get("/v1/dead-letters")).json()["dead_letters"]]
    assert codes == ["PARSE_ERROR", "INVALID_EVENT"]
    assert (await api.get("/v1/orders/o-nul")).status_code == 404


async def test_oversized_body_is_413(api: httpx.AsyncClient) -> None:
    """A body over 1 MiB is refused with 413 before it is parsed."""
    response = await api.post(
        "/v1/events", content=b"x" * (1024 * 1024 + 1), headers={"content-type": "application/json"}
    )
    assert response.status_code == 413
    assert response.json()["code"] == "PAYLOAD_TOO_LARGE"


async def test_status_endpoints(api: httpx.AsyncClient) -> None:
    """Unknown orders are 404; plans, health, readiness, OpenAPI and metrics answer."""
    assert (await api.get("/v1/orders/nope")).status_code == 404
    await post(api, {"events": plan_json("o-plan-a", "shared-plan", 2)})
    plan = (await api.get("/v1/plans/shared-plan")).json()
    assert [o["order_id"] for o in plan["orders"]] == ["o-plan-a"] and plan["terminal"] is False
    assert (await api.get("/v1/plans/nope")).status_code == 404
    assert (await api.get("/healthz")).json() == {"status": "ok"}
    assert (await api.get("/readyz")).json() == {"status": "ready"}
    assert "/v1/events" in (await api.get("/openapi.json")).json()["paths"]
    text = (await api.get("/metrics", headers=root_headers())).text
    assert 'nexus_events_processed_total{kind="OrderCreated",outcome="apply"} 1.0' in text
    assert 'nexus_events_processed_total{kind="OrderShipped",outcome="discard"} 0.0' in text
    assert "nexus_events_drained_total 0.0" in text


async def test_redrive_dead_letter(api: httpx.AsyncClient) -> None:
    """A dead letter redriven after its cause is gone is applied, and marked redriven."""
    s1, s2 = plan_json("o-redrive", "p", 2)
    await post(api, s1)
    await post(api, dict(s2, plan_id="wrong"))  # PLAN_MISMATCH: dead letter
    [letter] = (await api.get("/v1/dead-letters")).json()["dead_letters"]
    result = (await api.post(f"/v1/dead-letters/{letter['id']}/redrive")).json()["result"]
    assert result["decision"] == "PLAN_MISMATCH"  # still the wrong plan: nothing changes
    assert (await api.post("/v1/dead-letters/999999/redrive")).status_code == 404
    [again] = [d for d in (await api.get("/v1/dead-letters")).json()["dead_letters"] if d["id"] == letter["id"]]
    assert again["redriven_at"] is not None


async def test_buffer_timeout_dead_letters_once(start_gateway, settings: Settings) -> None:  # type: ignore[no-untyped-def]
    """A gap that never fills is dead-lettered once with BUFFER_TIMEOUT and leaves the buffer."""
    _, base = start_gateway("--no-dispatcher", settings_=settings.replace(buffer_timeout_s=0.5))
    async with httpx.AsyncClient(base_url=base, timeout=10, headers=api_headers()) as api:
        await post(api, step_json("o-gap", "p", 1))
        await post(api, step_json("o-gap", "p", 3))
        for _ in range(100):
            letters = (await api.get("/v1/dead-letters", params={"code": "BUFFER_TIMEOUT"})).json()["dead_letters"]
            if letters:
                break
            await asyncio.sleep(0.1)
        await asyncio.sleep(1.0)  # several more sweeps: still exactly one
        letters = (await api.get("/v1/dead-letters", params={"code": "BUFFER_TIMEOUT"})).json()["dead_letters"]
        assert [(d["order_id"], d["source"]) for d in letters] == [("o-gap", "buffer")]
        order = (await api.get("/v1/orders/o-gap")).json()
        assert order["buffered"] == [] and order["last_seq"] == 1
