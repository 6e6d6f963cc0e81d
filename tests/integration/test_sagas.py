"""Sagas end to end in one process: a real gateway on real PostgreSQL, real executors, real HTTP services."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from nexus import metrics
from nexus.core.decide.items import Incoming
from nexus.gateway import Gateway
from nexus.ingress.http import refresh_db_gauges
from nexus.processes import builtin_catalog
from nexus.saga.executor import SagaExecutor
from nexus.settings import Settings
from nexus.store.database import Database
from nexus_lab.saga_checker import check_sagas_live
from nexus_lab.services import SERVICES, RunningServices, start_services
from nexus_wire.codes import Decision
from tests.conftest import fast_settings, free_port
from tests.factories import abort_json, step_json

PLAN = "plan-s"


@pytest.fixture
async def services() -> AsyncIterator[RunningServices]:
    running = await start_services()
    yield running
    await running.aclose()


def saga_settings(database_url: str, services: RunningServices, **overrides: Any) -> Settings:
    urls = ",".join(f"{name}={services.url_of(name)}" for name in SERVICES)
    values: dict[str, Any] = {
        "service_urls": urls,
        "saga_retry_base_ms": 5,
        "saga_retry_max_ms": 20,
        "saga_max_attempts": 3,
        "saga_call_timeout_s": 1.0,
        "saga_lease_s": 2.0,
    }
    return fast_settings(database_url, **{**values, **overrides})


class Harness:
    def __init__(self, db: Database, settings: Settings, services: RunningServices) -> None:
        self.db = db
        self.services = services
        self.gateway = Gateway(db, catalog=builtin_catalog())
        self.executor = SagaExecutor(db, self.gateway, settings, "test-executor")

    async def send(self, order: str, *seqs: int, **data: Any) -> list[dict[str, Any]]:
        items = [Incoming.parse(step_json(order, PLAN, s, process="fulfilment", **data)) for s in seqs]
        return [o.as_json() for o in await self.gateway.submit(items)]

    async def settle(self, rounds: int = 200) -> None:
        """Run the executor until nothing is due for a while."""
        idle = 0
        for _ in range(rounds):
            if await self.executor.run_once():
                idle = 0
            else:
                idle += 1
                if idle > 5:
                    return
                await asyncio.sleep(0.03)

    async def order(self, order: str) -> Any:
        return await self.db.fetchrow("SELECT * FROM orders WHERE tenant_id = 'default' AND order_id = $1", order)

    async def notifications(self, order: str) -> list[tuple[str, str]]:
        rows = await self.db.fetch(
            "SELECT event_type, payload->>'status' AS status FROM outbox WHERE order_id = $1 ORDER BY position", order
        )
        return [(r["event_type"], r["status"]) for r in rows]

    async def saga(self, order: str) -> tuple[str, list[tuple[int, str]]]:
        status = await self.db.fetchval("SELECT status FROM sagas WHERE order_id = $1", order)
        steps = await self.db.fetch("SELECT seq, status FROM saga_steps WHERE order_id = $1 ORDER BY seq", order)
        return status, [(r["seq"], r["status"]) for r in steps]

    def kinds(self, service: str) -> list[str]:
        return [e["kind"] for e in self.services.services.ledgers[service].entries]


@pytest.fixture
async def harness(database_url: str, services: RunningServices) -> AsyncIterator[Harness]:
    settings = saga_settings(database_url, services)
    db = await Database(settings).open(migrate=False)
    h = Harness(db, settings, services)
    yield h
    await h.executor.aclose()
    await db.close()


async def test_all_effects_succeed_and_each_step_waits_for_its_effect(harness: Harness) -> None:
    """Seed path 1: every effect once, in order; a step with an effect answers APPLY with the order's
    previous status and `effect` running, its successor BUFFER, and the status moves once it succeeded."""
    created, reserve, charge = await harness.send("o1", 1, 2, 3)
    assert created["decision"] == "APPLY" and created["order"]["status"] == "created"
    assert reserve["decision"] == "APPLY" and reserve["order"] == {"status": "created", "last_seq": 2}
    assert reserve["effect"] == {"step": "InventoryValidated", "seq": 2, "status": "running", "attempts": 0}
    assert charge["decision"] == "BUFFER"
    again = await harness.send("o1", 2)
    assert again[0]["decision"] == "DUPLICATE"
    await harness.settle()
    assert (await harness.order("o1"))["status"] == "payment_processed"
    await harness.send("o1", 4, 5)
    await harness.settle()
    order = await harness.order("o1")
    assert (order["status"], order["last_seq"]) == ("completed", 5)
    assert await harness.saga("o1") == ("COMPLETED", [(s, "COMPLETED") for s in (2, 3, 4, 5)])
    assert [harness.kinds(s) for s in SERVICES] == [["reserve"], ["charge"], ["ship"], ["invoice"]]
    assert await harness.notifications("o1") == [
        ("OrderCreated", "created"), ("InventoryValidated", "inventory_validated"),
        ("PaymentProcessed", "payment_processed"), ("OrderShipped", "shipped"),
        ("OrderCompleted", "completed")]  # fmt: skip
    charge_entry = harness.services.services.ledgers["payment"].entries[0]
    assert charge_entry["amount"] == 10 and charge_entry["traceparent"]
    assert await check_sagas_live(harness.db, harness.services.url) == []


@pytest.mark.parametrize(
    ("failing", "seqs", "compensated"),
    [("inventory", 2, []), ("payment", 3, ["inventory"]), ("shipping", 4, ["payment", "inventory"])],
)
async def test_a_permanent_failure_before_the_pivot_compensates_in_reverse_and_aborts(
    harness: Harness, failing: str, seqs: int, compensated: list[str]
) -> None:
    """Seed path 2 at each position up to the pivot: the completed steps are compensated in reverse
    order, each once, then the plan is aborted with effect_failed; one notification per compensation."""
    harness.services.services.faults[failing].permanent_fail_rate = 1.0
    await harness.send("o2", *range(1, seqs + 1))
    await harness.settle()
    await harness.send("o2", *range(seqs + 1, 6))
    await harness.settle()
    order = await harness.order("o2")
    assert order["status"] == "aborted"
    status, steps = await harness.saga("o2")
    assert status == "COMPENSATED"
    assert dict(steps)[seqs] == "FAILED"
    assert all(st == "COMPENSATED" for seq, st in steps if seq < seqs)
    undo = {"inventory": "release", "payment": "refund"}
    for service in compensated:
        assert harness.kinds(service)[1:] == [undo[service]]
    # reverse order: the later step's compensation happened first
    times = [harness.services.services.ledgers[s].entries[-1]["at"] for s in compensated]
    assert times == sorted(times)
    notes = await harness.notifications("o2")
    assert [e for e, _ in notes].count("EffectCompensated") == len(compensated)
    assert notes[-1][0] == "ABORT_PLAN"
    abort = await harness.db.fetchval("SELECT payload->'event'->'data'->>'abort_code' FROM outbox WHERE order_id='o2' "
                                      "AND event_type='ABORT_PLAN'")  # fmt: skip
    assert abort == "effect_failed"
    assert await check_sagas_live(harness.db, harness.services.url) == []


async def test_after_the_pivot_only_the_budget_escalates_and_a_redrive_starts_a_new_one(
    database_url: str, services: RunningServices
) -> None:
    """A retriable step (after the pivot) whose service stays down is retried past the attempt count until
    its small budget ends, then escalates (nothing compensated); redriven once the service is back, it
    completes."""
    from nexus.saga.admin import redrive

    settings = saga_settings(database_url, services, saga_retry_budget_s=0.3, saga_breaker_threshold=1000)
    db = await Database(settings).open(migrate=False)
    h = Harness(db, settings, services)
    try:
        services.services.faults["invoice"].down = True
        await h.send("o3", 1, 2, 3, 4)
        await h.settle()
        await h.send("o3", 5)
        await h.settle()
        status, steps = await h.saga("o3")
        assert status == "ESCALATED" and dict(steps)[5] == "FAILED"
        assert await db.fetchval("SELECT attempts FROM saga_steps WHERE order_id = 'o3' AND seq = 5") > 3
        assert h.kinds("payment") == ["charge"] and h.kinds("inventory") == ["reserve"]
        services.services.faults["invoice"].down = False
        assert await redrive(db, "default", "o3") == "RUNNING"
        await h.settle()
        assert (await h.saga("o3"))[0] == "COMPLETED"
        assert (await h.order("o3"))["status"] == "completed"
    finally:
        await h.executor.aclose()
        await db.close()


async def test_time_held_by_an_open_breaker_counts_against_the_budget_not_the_attempts(
    database_url: str, services: RunningServices
) -> None:
    """The invoice service down, its breaker opening at the first failure with a 1 s cooldown and a 0.5 s
    budget: the saga waits out the cooldown uncounted, and its first call after it finds the budget spent
    and escalates, after two attempts in all."""
    settings = saga_settings(
        database_url, services, saga_retry_budget_s=0.5, saga_breaker_threshold=1, saga_breaker_cooldown_s=1.0
    )
    db = await Database(settings).open(migrate=False)
    h = Harness(db, settings, services)
    try:
        await h.send("k2", 1, 2, 3, 4)
        await h.settle()
        services.services.faults["invoice"].down = True
        await h.send("k2", 5)
        await h.settle(rounds=20)
        assert await db.fetchval("SELECT attempts FROM saga_steps WHERE order_id = 'k2' AND seq = 5") == 1
        await asyncio.sleep(1.1)
        await h.settle(rounds=20)
        status, steps = await h.saga("k2")
        assert (status, dict(steps)[5]) == ("ESCALATED", "FAILED")
        assert await db.fetchval("SELECT attempts FROM saga_steps WHERE order_id = 'k2' AND seq = 5") == 2
    finally:
        await h.executor.aclose()
        await db.close()


async def test_after_the_pivot_an_outage_longer_than_the_count_is_waited_out_visibly(
    database_url: str, services: RunningServices
) -> None:
    """With the invoice service answering 503 for longer than NEXUS_SAGA_MAX_ATTEMPTS (breaker threshold
    raised), the saga keeps retrying with the same key, shows next_attempt_at and retrying_since, is listed
    by `--retrying`; once the service is back it completes by itself, invoiced once."""
    from nexus.saga.admin import list_sagas, order_saga

    settings = saga_settings(database_url, services, saga_breaker_threshold=1000)
    db = await Database(settings).open(migrate=False)
    h = Harness(db, settings, services)
    try:
        await h.send("r1", 1, 2, 3, 4)
        await h.settle()
        services.services.faults["invoice"].down = True
        await h.send("r1", 5)
        await h.settle(rounds=40)
        status, steps = await h.saga("r1")
        assert status == "RUNNING" and dict(steps)[5] == "RUNNING"
        view = await order_saga(db, "default", "r1")
        assert view is not None and view["steps"][-1]["attempts"] > 3 and view["steps"][-1]["error"]
        assert view["next_attempt_at"] is not None and view["retrying_since"] is not None
        listed = await list_sagas(db, retrying=True)
        assert [(s["order_id"], s["retrying_service"]) for s in listed] == [("r1", "invoice")]
        await refresh_db_gauges(db)
        exposed = metrics.exposition().decode()
        assert 'nexus_saga_retrying{service="invoice"} 1.0' in exposed
        assert 'nexus_saga_retrying_oldest_seconds{service="invoice"}' in exposed
        services.services.faults["invoice"].down = False
        await h.settle()
        assert (await h.saga("r1"))[0] == "COMPLETED"
        assert (await h.order("r1"))["status"] == "completed"
        assert h.kinds("invoice") == ["invoice"]
        assert await list_sagas(db, retrying=True) == []
        await refresh_db_gauges(db)
        assert 'nexus_saga_retrying{service="invoice"} 0.0' in metrics.exposition().decode()
        view = await order_saga(db, "default", "r1")
        assert view is not None and view["retrying_since"] is None
    finally:
        await h.executor.aclose()
        await db.close()


async def test_agent_abort_past_the_pivot_is_rejected_and_before_it_compensates(harness: Harness) -> None:
    """ABORT_PLAN after the pivot completed is REJECTED with PAST_PIVOT; before it, the abort applies and
    what completed is compensated once."""
    await harness.send("o4", 1, 2, 3, 4)
    await harness.settle()
    late = await harness.gateway.submit([Incoming.parse(abort_json("o4", PLAN, 4))])
    assert late[0].decision is Decision.REJECTED and late[0].code is not None and late[0].code.value == "PAST_PIVOT"
    await harness.send("o5", 1, 2, 3)
    await harness.settle()
    early = await harness.gateway.submit([Incoming.parse(abort_json("o5", PLAN, 3))])
    assert early[0].decision is Decision.APPLY
    await harness.settle()
    assert (await harness.saga("o5"))[0] == "COMPENSATED"
    assert harness.kinds("payment") == ["charge", "charge", "refund"]
    assert [e for e, _ in await harness.notifications("o5")][-2:] == ["EffectCompensated", "EffectCompensated"]


async def test_order_status_shows_the_saga(harness: Harness) -> None:
    """The saga view (used by GET /v1/orders/{id}) lists the saga and each step's status and result."""
    from nexus.saga.admin import order_saga

    await harness.send("o6", 1, 2)
    await harness.settle()
    view = await order_saga(harness.db, "default", "o6")
    assert view is not None and view["status"] == "RUNNING"
    step = view["steps"][0]
    assert (step["step"], step["status"], step["attempts"]) == ("InventoryValidated", "COMPLETED", 1)
    assert step["result"]["reservation_id"].startswith("reserve-")
    assert json.dumps(view)
    assert step["step"] == "InventoryValidated"


async def test_services_get_requests_with_keys(services: RunningServices) -> None:
    """Sanity: the ledgers endpoint answers every service's book."""
    async with httpx.AsyncClient(base_url=services.url) as client:
        books = (await client.get("/ledgers")).json()
    assert set(books) == set(SERVICES)


async def test_an_answer_after_the_timeout_is_settled_by_its_compensation_with_the_same_key(
    database_url: str, services: RunningServices
) -> None:
    """A reservation the service recorded but answered after the client's timeout is never guessed: the
    retries (same key) time out too, the step is given up as uncertain and compensated naming its key (its
    hanging compensation retried, not failed); the ledger ends with the reservation released, and every saga
    invariant holds."""
    settings = saga_settings(
        database_url, services, saga_call_timeout_s=0.2, saga_max_attempts=2, saga_breaker_cooldown_s=0.2
    )
    db = await Database(settings).open(migrate=False)
    h = Harness(db, settings, services)
    try:
        services.services.faults["inventory"].hang_rate = 1.0
        services.services.faults["inventory"].hang_ms = 600
        await h.send("t1", 1, 2)
        await h.settle()
        status, steps = await h.saga("t1")
        assert dict(steps)[2] == "FAILED" and status == "COMPENSATING"  # its release retried within the budget
        services.services.faults["inventory"].hang_rate = 0.0
        await asyncio.sleep(0.3)
        await h.settle()
        assert (await h.saga("t1"))[0] == "COMPENSATED"
        assert (await h.order("t1"))["status"] == "aborted"
        assert h.kinds("inventory") == ["reserve", "release"]
        assert await check_sagas_live(db, services.url) == []
    finally:
        await h.executor.aclose()
        await db.close()


async def test_a_service_down_opens_its_breaker_and_calls_wait_uncounted(
    database_url: str, services: RunningServices
) -> None:
    """A payment service that is down fails `threshold` calls, then its breaker opens: no call reaches it
    while open; once it is back and the cooldown is over, the charge goes through once."""
    settings = saga_settings(
        database_url, services, saga_max_attempts=50, saga_breaker_threshold=2, saga_breaker_cooldown_s=0.5
    )
    db = await Database(settings).open(migrate=False)
    h = Harness(db, settings, services)
    try:
        services.services.faults["payment"].down = True
        await h.send("b1", 1, 2, 3)
        await h.settle(rounds=30)
        assert h.executor.breakers["payment"].state.value in ("open", "half_open")
        reached = sum(services.services.ledgers["payment"].attempts.values())
        for _ in range(10):
            await h.executor.run_once()
        assert sum(services.services.ledgers["payment"].attempts.values()) <= reached + 1  # at most one probe
        services.services.faults["payment"].down = False
        await asyncio.sleep(0.6)
        await h.settle()
        assert (await h.order("b1"))["status"] == "payment_processed"
        assert h.kinds("payment") == ["charge"]
    finally:
        await h.executor.aclose()
        await db.close()


async def test_service_calls_follow_the_outbound_policy(database_url: str, services: RunningServices) -> None:
    """With private URLs not allowed, the configured services (on 127.0.0.1) are still called: they are
    trusted configuration, as NEXUS_WEBHOOK_URL is; a URL aimed inside at any other address is refused by
    the guard without a request, and a port nothing listens on is a retryable connection failure."""
    settings = saga_settings(database_url, services, allow_private_urls=None)
    db = await Database(settings).open(migrate=False)
    h = Harness(db, settings, services)
    try:
        await h.send("g1", 1, 2, 3)
        await h.settle()
        assert (await h.order("g1"))["status"] == "payment_processed"
        assert h.kinds("payment") == ["charge"]
        outcome, _, error, _ = await h.executor.call_service("http://127.0.0.2:9/x", {}, "k", None, None)
        assert outcome.value == "refused" and error is not None and "outbound guard" in error
        open_settings = saga_settings(database_url, services, allow_private_urls="true")
        other = SagaExecutor(db, h.gateway, open_settings, "open-executor")
        try:
            outcome, _, error, _ = await other.call_service(f"http://127.0.0.1:{free_port()}/x", {}, "k", None, None)
        finally:
            await other.aclose()
        assert outcome.value == "retryable" and error is not None and error.startswith("connection failed")
    finally:
        await h.executor.aclose()
        await db.close()
