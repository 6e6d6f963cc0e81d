"""Sagas under crashes: the executor SIGKILLed between a service's effect and the write of its result,
and a broken build (a key that changes between attempts) that the saga checker must catch; and the short
version of the saga scenarios of `nexus chaos` these do not already cover (a service down, a late answer,
PostgreSQL restarted, an outage after the pivot, an outage during compensation), each judged by the saga
checker from PostgreSQL and the services' ledgers."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from nexus.settings import Settings
from nexus.store.database import Database
from nexus_lab.chaos.harness import ChaosSession
from nexus_lab.chaos.result import ScenarioResult
from nexus_lab.chaos.runner import run_scenario
from nexus_lab.chaos.scenarios import SCENARIOS
from nexus_lab.saga_checker import check_sagas_live
from nexus_lab.services import SERVICES
from tests.conftest import NexusProcess, api_headers, fast_settings, free_port, settings_env, wait_http
from tests.factories import step_json

BROKEN = Path(__file__).parent / "broken"


async def _killed_between_call_and_write(database_url: str, tmp_path: Path, launcher: list[str]) -> list[str]:
    """Run one order to its charge, SIGKILL `nexus serve` while the payment service holds the (already
    recorded) charge's answer, restart it, let the saga finish; return the saga checker's findings."""
    port = free_port()
    services = NexusProcess(["services", "--port", str(port)], {"PATH": "/usr/bin:/bin"}, tmp_path / "s.log")
    services.start()
    base = f"http://127.0.0.1:{port}"
    settings: Settings = fast_settings(
        database_url, saga_poll_s=0.05, saga_lease_s=1.0, saga_call_timeout_s=10.0, saga_retry_base_ms=10
    )
    gateway_port = free_port()
    env = settings_env(settings.replace(http_port=gateway_port))
    env.update({f"NEXUS_SERVICE_{name.upper()}_URL": f"{base}/{name}" for name in SERVICES})
    url = f"http://127.0.0.1:{gateway_port}"
    gateway = NexusProcess(["serve"], env, tmp_path / "serve.log")
    gateway.cmd = [*launcher, "serve"]
    try:
        wait_http(base + "/health", proc=services)
        gateway.start()
        wait_http(url + "/healthz", proc=gateway)
        # The charge is recorded at once, its answer comes 1.5 s later: the kill lands in between.
        httpx.post(base + "/_faults", json={"service": "payment", "hang_rate": 1, "hang_ms": 1500})
        with httpx.Client(base_url=url, headers=api_headers(), timeout=10) as client:
            client.post("/v1/events", json={"events": [step_json("k1", "p-k1", s, process="fulfilment")
                                                       for s in (1, 2, 3)]})  # fmt: skip
            deadline = time.monotonic() + 20
            while not httpx.get(base + "/payment/ledger").json()["entries"]:
                assert time.monotonic() < deadline, "the charge never reached the service"
                time.sleep(0.05)
            gateway.kill()
            httpx.post(base + "/_faults", json={"service": "payment", "hang_rate": 0})
            gateway.start()
            wait_http(url + "/healthz", proc=gateway)
            for s in (4, 5):
                client.post("/v1/events", json=step_json("k1", "p-k1", s, process="fulfilment"))
            deadline = time.monotonic() + 30
            while client.get("/v1/orders/k1").json().get("status") != "completed":
                assert time.monotonic() < deadline, client.get("/v1/orders/k1").json()
                time.sleep(0.1)
        db = await Database(settings).open(migrate=False)
        try:
            return await check_sagas_live(db, base)
        finally:
            await db.close()
    finally:
        gateway.kill()
        services.kill()


async def test_executor_killed_between_call_and_write_repeats_the_call_with_the_same_key(
    database_url: str, tmp_path: Path
) -> None:
    """SIGKILLed while the service held the answer of a charge it had recorded, the restarted executor
    repeats the call with the same key: the service answers the first charge, the ledger holds one, and
    every saga invariant holds."""
    problems = await _killed_between_call_and_write(database_url, tmp_path, [sys.executable, "-m", "nexus_cli"])
    assert problems == []


@pytest.mark.slow
async def test_checker_catches_a_key_that_changes_between_attempts(database_url: str, tmp_path: Path) -> None:
    """The broken build derives a new key per attempt: the repeated call charges again, and the saga
    checker reports two effects in effect for the order."""
    launcher = [sys.executable, str(BROKEN / "serve_key_per_attempt.py")]
    problems = await _killed_between_call_and_write(database_url, tmp_path, launcher)
    assert any("2 effects in effect" in p for p in problems), problems


async def test_executor_killed_during_compensation_compensates_once(database_url: str, tmp_path: Path) -> None:
    """SIGKILLed while the inventory service held the answer of a release it had recorded, the restarted
    executor repeats the release with the same key: one release in the ledger, the plan aborted once,
    and every saga invariant holds."""
    port = free_port()
    services = NexusProcess(["services", "--port", str(port)], {"PATH": "/usr/bin:/bin"}, tmp_path / "s.log")
    services.start()
    base = f"http://127.0.0.1:{port}"
    settings: Settings = fast_settings(
        database_url, saga_poll_s=0.05, saga_lease_s=1.0, saga_call_timeout_s=10.0, saga_retry_base_ms=10
    )
    gateway_port = free_port()
    env = settings_env(settings.replace(http_port=gateway_port))
    env.update({f"NEXUS_SERVICE_{name.upper()}_URL": f"{base}/{name}" for name in SERVICES})
    url = f"http://127.0.0.1:{gateway_port}"
    gateway = NexusProcess(["serve"], env, tmp_path / "serve.log")
    try:
        wait_http(base + "/health", proc=services)
        gateway.start()
        wait_http(url + "/healthz", proc=gateway)
        with httpx.Client(base_url=url, headers=api_headers(), timeout=10) as client:
            client.post("/v1/events", json={"events": [step_json("c1", "p-c1", s, process="fulfilment")
                                                       for s in (1, 2)]})  # fmt: skip
            _until(lambda: httpx.get(base + "/inventory/ledger").json()["entries"], "the reservation")
            httpx.post(base + "/_faults", json={"service": "inventory", "hang_rate": 1, "hang_ms": 1500})
            httpx.post(base + "/_faults", json={"service": "payment", "permanent_fail_rate": 1})
            _until(lambda: client.get("/v1/orders/c1").json().get("status") == "inventory_validated", "step 2")
            client.post("/v1/events", json=step_json("c1", "p-c1", 3, process="fulfilment"))
            _until(lambda: len(httpx.get(base + "/inventory/ledger").json()["entries"]) == 2, "the release")
            gateway.kill()
            httpx.post(base + "/_faults", json={"service": "inventory", "hang_rate": 0})
            gateway.start()
            wait_http(url + "/healthz", proc=gateway)
            _until(lambda: client.get("/v1/orders/c1").json().get("status") == "aborted", "the abort")
            order = client.get("/v1/orders/c1").json()
        assert order["saga"]["status"] == "COMPENSATED"
        kinds = [e["kind"] for e in httpx.get(base + "/inventory/ledger").json()["entries"]]
        assert kinds == ["reserve", "release"]
        db = await Database(settings).open(migrate=False)
        try:
            assert await check_sagas_live(db, base) == []
            aborts = await db.fetchval(
                "SELECT count(*) FROM outbox WHERE order_id = 'c1' AND event_type = 'ABORT_PLAN'"
            )
            assert aborts == 1
        finally:
            await db.close()
    finally:
        gateway.kill()
        services.kill()


def _until(condition: Any, what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what} never happened"
        time.sleep(0.05)


async def run_short(session: ChaosSession, name: str) -> ScenarioResult:
    result = await run_scenario(session, SCENARIOS[name], plans=6, seed="ci", settle_timeout_s=45)
    assert result.error is None, result.error
    assert result.invariants_ok, "\n".join([*result.failures[:20], result.check_text])
    assert result.fault_proved, f"{name} injected no {result.proof!r}: {result.faults}"
    return result


@pytest.mark.slow
async def test_a_service_down_for_a_while_opens_the_breaker_and_the_sagas_complete(
    chaos_session: ChaosSession,
) -> None:
    """The payment service answers 503 for seconds: the executors' breaker opens, and once it is back every
    saga completes or compensates, each effect once (saga checker)."""
    result = await run_short(chaos_session, "saga-service-down")
    assert result.faults["service down"] == 1


@pytest.mark.slow
async def test_answers_after_the_timeout_are_settled_by_compensation_with_the_same_key(
    chaos_session: ChaosSession,
) -> None:
    """Reservations answered after the client's timeout: given up as unknown, each is settled by a
    release naming its key (never guessed), and the ledgers end as before those sagas."""
    await run_short(chaos_session, "saga-late-answer")


@pytest.mark.slow
async def test_postgres_restarted_mid_saga_loses_and_repeats_no_effect(chaos_session: ChaosSession) -> None:
    """PostgreSQL stopped while sagas are open and started again: the executors and their LISTEN connection
    come back, every saga settles, and no effect happened twice in effect."""
    result = await run_short(chaos_session, "saga-postgres-restart")
    assert result.faults["sagas open at the stop"] > 0


@pytest.mark.slow
async def test_an_outage_after_the_pivot_is_waited_out_and_every_saga_completes(chaos_session: ChaosSession) -> None:
    """The invoice service (after the pivot) answers 503 to every call for 8 s, longer than the attempt count
    lasts (breaker threshold raised): the invoices are retried with the same key within the budget, and every
    saga completes, none escalated, each effect once in the ledgers."""
    result = await run_short(chaos_session, "saga-post-pivot-outage")
    assert result.elapsed_s < 30, result.elapsed_s


@pytest.mark.slow
async def test_an_outage_during_compensation_is_waited_out_and_every_saga_is_compensated(
    chaos_session: ChaosSession,
) -> None:
    """Every charge declined while the inventory service answers 503 to every release for 8 s: the releases
    are retried within the budget, and every saga is compensated once, none FAILED."""
    result = await run_short(chaos_session, "saga-compensation-outage")
    assert result.elapsed_s < 30, result.elapsed_s
