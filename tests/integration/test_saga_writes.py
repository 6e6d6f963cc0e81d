"""The sagas' rows written as the fold decides them, on a real PostgreSQL (no executor running): an abort's
turn to compensation only from the status read, a retrying saga's `retrying_since` kept from its first
retried failure until it is no longer retrying, and a call's attempt marked as core/saga.py `call_mark` says."""

from __future__ import annotations

import json

from nexus.core.decide.items import EffectOutcome, EffectResult, Incoming
from nexus.core.decide.saga_abort import SagaTurn
from nexus.core.saga import Action, SagaStatus, StepStatus, call_mark
from nexus.gateway import Gateway
from nexus.saga.recording import Call, SagaRecorder
from nexus.settings import Settings
from nexus.store import sagas as saga_records
from nexus.store.database import Database
from tests.factories import abort_json, step_json


async def _saga_of(db: Database, gateway: Gateway, order: str) -> None:
    """An order of the fulfilment process whose step 2 waits for its effect: its saga PENDING."""
    steps = [step_json(order, "p", s, process="fulfilment") for s in (1, 2)]
    outcomes = await gateway.submit([Incoming.parse(json.dumps(s)) for s in steps])
    assert [o.decision.value for o in outcomes] == ["APPLY", "APPLY"]
    assert await _status(db, order) == "PENDING"


async def _status(db: Database, order: str) -> str:
    return str(await db.fetchval("SELECT status FROM sagas WHERE order_id = $1", order))


async def test_an_abort_turns_a_pending_saga_and_leaves_an_escalated_one(db: Database) -> None:
    """An abort of an order whose saga is PENDING turns it COMPENSATING; of one whose saga an operator left
    ESCALATED, leaves it ESCALATED."""
    gateway = Gateway(db)
    await _saga_of(db, gateway, "w-pending")
    await _saga_of(db, gateway, "w-escalated")
    await db.execute("UPDATE sagas SET status = 'ESCALATED' WHERE order_id = 'w-escalated'")
    aborts = [abort_json(o, "p", process="fulfilment") for o in ("w-pending", "w-escalated")]
    outcomes = await gateway.submit([Incoming.parse(json.dumps(a)) for a in aborts])
    assert [o.decision.value for o in outcomes] == ["APPLY", "APPLY"]
    assert (await _status(db, "w-pending"), await _status(db, "w-escalated")) == ("COMPENSATING", "ESCALATED")


async def test_a_turn_writes_only_over_the_status_it_was_decided_from(db: Database) -> None:
    """A turn decided from RUNNING meets a saga changed meanwhile (PENDING): nothing is written."""
    gateway = Gateway(db)
    await _saga_of(db, gateway, "w-raced")
    turn = SagaTurn("default", "w-raced", SagaStatus.COMPENSATING, SagaStatus.RUNNING)
    async with db.pool.acquire() as conn, conn.transaction():
        await saga_records.record(conn, [], gateway.catalog, {}, gateway.saga_secret, [turn])
    assert await _status(db, "w-raced") == "PENDING"


async def test_retrying_since_is_kept_across_retried_failures_and_cleared_after(db: Database) -> None:
    """Two retried failures of the same call: `retrying_since` is set by the first and kept by the second
    (the saga retrying since its first failure); a failure not retried (compensation) clears it."""
    gateway = Gateway(db)
    await _saga_of(db, gateway, "w-retry")
    failed = EffectOutcome(
        "default", "w-retry", 2, "InventoryValidated", "inventory", True, EffectResult.FAILED, StepStatus.RUNNING,
        error="503", retry_s=0.5, keep=False,
    )  # fmt: skip
    since = []
    for _ in range(2):
        async with db.pool.acquire() as conn, conn.transaction():
            await gateway.fold_effects(conn, [failed], 5.0, "test")
        row = await db.fetchrow("SELECT retrying_since, retrying_service FROM sagas WHERE order_id = 'w-retry'")
        assert row["retrying_service"] == "inventory"
        since.append(row["retrying_since"])
    assert since[0] is not None and since[0] == since[1]
    given_up = EffectOutcome(
        "default", "w-retry", 2, "InventoryValidated", "inventory", True, EffectResult.FAILED, StepStatus.FAILED,
        error="refused", keep=False,
    )  # fmt: skip
    async with db.pool.acquire() as conn, conn.transaction():
        await gateway.fold_effects(conn, [given_up], 5.0, "test")
    row = await db.fetchrow("SELECT status, retrying_since, retrying_service FROM sagas WHERE order_id = 'w-retry'")
    assert (row["status"], row["retrying_since"], row["retrying_service"]) == ("COMPENSATING", None, None)


def _call(order: str, action: Action, status: StepStatus) -> Call:
    """A call of the order's step 2 in `action`'s direction, marked as the core marks it from `status`."""
    return Call("default", order, 2, action, f"key-{action.value}", None, {}, None, "no URL", call_mark(action, status))


async def test_a_marked_call_leaves_its_step_running_uncertain_and_counted(db: Database, settings: Settings) -> None:
    """Each forward attempt marked before its call makes the step RUNNING and uncertain (a crash after the call
    leaves it so) and counts one attempt; a compensation's mark counts its own and keeps both."""
    gateway = Gateway(db)
    await _saga_of(db, gateway, "w-mark")
    recorder = SagaRecorder(db, gateway, settings, "test")
    read = "SELECT status, uncertain, attempts, compensation_attempts FROM saga_steps WHERE order_id = 'w-mark'"
    assert tuple(await db.fetchrow(read)) == ("PENDING", False, 0, 0)
    first, _ = await recorder.marks.submit(_call("w-mark", Action.FORWARD, StepStatus.PENDING))
    assert (first, tuple(await db.fetchrow(read))) == (1, ("RUNNING", True, 1, 0))
    second, _ = await recorder.marks.submit(_call("w-mark", Action.FORWARD, StepStatus.RUNNING))
    assert (second, tuple(await db.fetchrow(read))) == (2, ("RUNNING", True, 2, 0))
    back, _ = await recorder.marks.submit(_call("w-mark", Action.COMPENSATE, StepStatus.RUNNING))
    assert (back, tuple(await db.fetchrow(read))) == (1, ("RUNNING", True, 2, 1))
