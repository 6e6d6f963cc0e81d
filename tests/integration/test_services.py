"""`nexus services`: ledgers, Idempotency-Key replay, compensations before their forward call, faults."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from nexus_lab.services import Faults, start_services
from tests.conftest import NexusProcess, free_port, wait_http


@pytest.mark.processes
async def test_services_process_records_charges_replays_keys_and_refunds(tmp_path: Path) -> None:
    """`nexus services` charges once per key (a replay answers the first charge id), refunds it once,
    and shows both in the payment ledger."""
    port = free_port()
    proc = NexusProcess(["services", "--port", str(port)], {"PATH": "/usr/bin:/bin"}, tmp_path / "s.out").start()
    try:
        base = f"http://127.0.0.1:{port}"
        wait_http(base + "/health", proc=proc)
        async with httpx.AsyncClient(base_url=base) as client:
            body = {"order_id": "o-1", "amount": 1250}
            first = await client.post("/payment/charges", json=body, headers={"Idempotency-Key": "k1"})
            again = await client.post("/payment/charges", json=body, headers={"Idempotency-Key": "k1"})
            refund = await client.post(
                "/payment/refunds", json={}, headers={"Idempotency-Key": "r1", "Compensates": "k1"}
            )
            refund_again = await client.post(
                "/payment/refunds", json={}, headers={"Idempotency-Key": "r1", "Compensates": "k1"}
            )
            ledger = (await client.get("/payment/ledger")).json()
    finally:
        proc.terminate()
    assert first.status_code == 201 and again.json() == first.json()
    assert (
        refund.status_code == 200 and refund.json()["status"] == "compensated" and refund_again.json() == refund.json()
    )
    assert [e["kind"] for e in ledger["entries"]] == ["charge", "refund"]
    assert ledger["entries"][1]["ref"] == first.json()["charge_id"]


async def test_a_refund_before_its_charge_refuses_the_charge_afterwards() -> None:
    """A refund that arrives first (the charge's outcome was unknown) cancels the key: the charge that
    arrives later is refused with 409 and the ledger holds no charge."""
    running = await start_services()
    try:
        async with httpx.AsyncClient(base_url=running.url) as client:
            refund = await client.post(
                "/payment/refunds", json={}, headers={"Idempotency-Key": "r", "Compensates": "c"}
            )
            charge = await client.post("/payment/charges", json={"amount": 5}, headers={"Idempotency-Key": "c"})
    finally:
        await running.aclose()
    assert refund.json()["status"] == "cancelled_before_forward"
    assert charge.status_code == 409 and charge.json()["error"] == "cancelled"
    assert [e["kind"] for e in running.services.ledgers["payment"].entries] == ["void"]


async def test_faults_are_reproducible_and_permanent_refusals_are_replayed() -> None:
    """With the same seed two runs fail the same attempts; a permanently refused key is refused again
    (422) on every retry, a transiently failed one is recorded once a retry passes."""

    async def run_once() -> list[int]:
        running = await start_services(Faults(fail_rate=0.5, permanent_fail_rate=0.3), seed="s")
        codes = []
        try:
            async with httpx.AsyncClient(base_url=running.url) as client:
                for i in range(12):
                    for _ in range(3):
                        r = await client.post("/shipping/shipments", json={}, headers={"Idempotency-Key": f"k{i}"})
                        codes.append(r.status_code)
        finally:
            await running.aclose()
        shipped = {e["key"] for e in running.services.ledgers["shipping"].entries}
        assert len(shipped) == len(running.services.ledgers["shipping"].entries)
        return codes

    first, second = await run_once(), await run_once()
    assert first == second
    assert {503, 422, 201} <= set(first)
    for i in range(12):
        attempts = first[3 * i : 3 * i + 3]
        if 422 in attempts:
            assert 201 not in attempts


async def test_faults_endpoint_takes_one_service_down_and_back() -> None:
    """`POST /_faults` with down=true answers 503 for that service only, until it is set back."""
    running = await start_services()
    try:
        async with httpx.AsyncClient(base_url=running.url) as client:
            await client.post("/_faults", json={"service": "payment", "down": True})
            down = await client.post("/payment/charges", json={}, headers={"Idempotency-Key": "a"})
            other = await client.post("/inventory/reservations", json={}, headers={"Idempotency-Key": "a"})
            await client.post("/_faults", json={"service": "payment", "down": False})
            up = await client.post("/payment/charges", json={}, headers={"Idempotency-Key": "a"})
    finally:
        await running.aclose()
    assert (down.status_code, other.status_code, up.status_code) == (503, 201, 201)
