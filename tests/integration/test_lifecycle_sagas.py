"""Sagas meet a deadline and a REPLAN arriving at an order with an open saga, on the
`fulfilment` process with real executors and the real effect services (the fixtures of test_sagas)."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
from typing import Any

from nexus.core.decide.items import Incoming
from nexus.store.database import Database
from nexus_lab.saga_checker import check_sagas_live
from nexus_lab.services import RunningServices
from tests.factories import replan_json, step_json
from tests.integration.test_sagas import PLAN, Harness, harness, saga_settings, services

__all__ = ["harness", "services"]


def soon(seconds: float) -> str:
    return (dt.datetime.now(dt.UTC) + dt.timedelta(seconds=seconds)).isoformat()


async def submit(h: Harness, *bodies: dict[str, Any]) -> list[dict[str, Any]]:
    return [o.as_json() for o in await h.gateway.submit([Incoming.parse(b) for b in bodies])]


async def past(deadline_s: float, started: float) -> None:
    await asyncio.sleep(max(0.0, started + deadline_s - asyncio.get_running_loop().time()) + 0.2)


async def test_a_deadline_mid_saga_compensates_what_completed_in_reverse_once(harness: Harness) -> None:
    """The plan's deadline passes after the reservation and the charge completed (before the pivot): the
    sweeper aborts it (abort_code timeout) and the charge is refunded, then the reservation released, each
    once; a second sweep and a late step change nothing."""
    started = asyncio.get_running_loop().time()
    first = step_json("d1", PLAN, 1, process="fulfilment", deadline=soon(2.0))
    await submit(harness, first, *(step_json("d1", PLAN, s, process="fulfilment") for s in (2, 3)))
    await harness.settle()
    assert (await harness.order("d1"))["status"] == "payment_processed"
    assert await harness.gateway.abort_overdue() == 0  # not due yet
    await past(2.0, started)
    assert await harness.gateway.abort_overdue() == 1
    assert await harness.gateway.abort_overdue() == 0  # once
    await harness.settle()
    assert (await harness.order("d1"))["status"] == "aborted"
    assert await harness.saga("d1") == ("COMPENSATED", [(2, "COMPENSATED"), (3, "COMPENSATED")])
    assert harness.kinds("inventory") == ["reserve", "release"]
    assert harness.kinds("payment") == ["charge", "refund"]
    ledgers = harness.services.services.ledgers
    assert ledgers["payment"].entries[-1]["at"] <= ledgers["inventory"].entries[-1]["at"]  # reverse order
    notes = [e for e, _ in await harness.notifications("d1")]
    assert notes[3:] == ["ABORT_PLAN", "EffectCompensated", "EffectCompensated"]
    code = await harness.db.fetchval(
        "SELECT payload->'event'->'data'->>'abort_code' FROM outbox WHERE order_id = 'd1' AND event_type = 'ABORT_PLAN'"
    )
    assert code == "timeout"
    [late] = await submit(harness, step_json("d1", PLAN, 4, process="fulfilment"))
    assert late["decision"] == "DISCARD"
    await harness.settle()
    assert harness.kinds("shipping") == []
    assert await check_sagas_live(harness.db, harness.services.url) == []


async def test_once_the_pivot_completed_a_deadline_no_longer_applies(harness: Harness) -> None:
    """Shipped (the pivot) before its deadline: the deadline is dropped, the sweeper skips the order even
    if one is left past due, nothing is compensated, and the last step applies after the deadline."""
    started = asyncio.get_running_loop().time()
    first = step_json("d2", PLAN, 1, process="fulfilment", deadline=soon(2.0))
    await submit(harness, first, *(step_json("d2", PLAN, s, process="fulfilment") for s in (2, 3, 4)))
    await harness.settle()
    order = await harness.order("d2")
    assert (order["status"], order["deadline_at"]) == ("shipped", None)
    await past(2.0, started)
    assert await harness.gateway.abort_overdue() == 0
    # Even a deadline left in the row (an older gateway, a REPLAN's): past the pivot the sweep's abort is a
    # DUPLICATE, never an abort nor a PAST_PIVOT rejection counted against the plan.
    await harness.db.execute("UPDATE orders SET deadline_at = now() - interval '1 second' WHERE order_id = 'd2'")
    assert await harness.gateway.abort_overdue() == 0
    decisions = await harness.db.fetch(
        "SELECT decision, code FROM decision_log WHERE order_id = 'd2' AND event_type = 'ABORT_PLAN'"
    )
    assert [(r["decision"], r["code"]) for r in decisions] == [("DUPLICATE", None)]
    [last] = await submit(harness, step_json("d2", PLAN, 5, process="fulfilment"))
    assert last["decision"] == "APPLY"
    await harness.settle()
    assert (await harness.order("d2"))["status"] == "completed"
    assert await harness.saga("d2") == ("COMPLETED", [(s, "COMPLETED") for s in (2, 3, 4, 5)])
    assert harness.kinds("inventory") == ["reserve"] and harness.kinds("payment") == ["charge"]


async def test_a_replan_mid_saga_keeps_completed_effects_and_the_new_plan_continues(harness: Harness) -> None:
    """After the reservation and the charge, a REPLAN: nothing is compensated, the old plan's straggler is
    DISCARD PLAN_SUPERSEDED, and the new plan's next steps run their effects (ship, invoice) once."""
    await harness.send("r1", 1, 2, 3)
    await harness.settle()
    [swap] = await submit(harness, replan_json("r1", PLAN, "plan-b"))
    assert swap["decision"] == "APPLY" and swap["order"] == {"status": "payment_processed", "last_seq": 3}
    [straggler] = await submit(harness, step_json("r1", PLAN, 4, process="fulfilment"))
    assert (straggler["decision"], straggler["code"]) == ("DISCARD", "PLAN_SUPERSEDED")
    ship, invoice = await submit(harness, *(step_json("r1", "plan-b", s, process="fulfilment") for s in (4, 5)))
    assert (ship["decision"], ship["effect"]["step"], invoice["decision"]) == ("APPLY", "OrderShipped", "BUFFER")
    await harness.settle()
    order = await harness.order("r1")
    assert (order["status"], order["plan_id"], order["last_seq"]) == ("completed", "plan-b", 5)
    assert await harness.saga("r1") == ("COMPLETED", [(s, "COMPLETED") for s in (2, 3, 4, 5)])
    assert [harness.kinds(s) for s in ("inventory", "payment", "shipping", "invoice")] == [
        ["reserve"], ["charge"], ["ship"], ["invoice"]]  # fmt: skip
    assert await check_sagas_live(harness.db, harness.services.url) == []


async def test_a_replan_while_an_effect_runs_keeps_it_and_the_new_plan_waits_for_it(harness: Harness) -> None:
    """A REPLAN arrives while the reservation is in flight: the new plan's next step waits for it (BUFFER);
    the reservation completes and its step applies, the order staying on the new plan, whose steps then
    run their own effects, each once."""
    for order in ("r2", "r3"):
        await harness.send(order, 1, 2)  # the reservation is not performed yet (no executor ran)
        [swap] = await submit(harness, replan_json(order, PLAN, "plan-b"))
        assert swap["decision"] == "APPLY" and swap["effect"]["step"] == "InventoryValidated"
    [charge] = await submit(harness, step_json("r3", "plan-b", 3, process="fulfilment"))
    assert charge["decision"] == "BUFFER"  # r3: the new plan's step waits for the old plan's effect
    await harness.settle()
    for order, expected in (("r2", ("inventory_validated", "plan-b", 2)), ("r3", ("payment_processed", "plan-b", 3))):
        row = await harness.order(order)
        assert (row["status"], row["plan_id"], row["last_seq"]) == expected, order
    results = await submit(harness, *(step_json("r2", "plan-b", s, process="fulfilment") for s in (3, 4, 5)))
    assert [r["decision"] for r in results] == ["APPLY", "BUFFER", "BUFFER"]
    await submit(harness, *(step_json("r3", "plan-b", s, process="fulfilment") for s in (4, 5)))
    await harness.settle()
    for order in ("r2", "r3"):
        assert (await harness.order(order))["status"] == "completed"
        assert await harness.saga(order) == ("COMPLETED", [(s, "COMPLETED") for s in (2, 3, 4, 5)])
    assert [len(harness.kinds(s)) for s in ("inventory", "payment", "shipping", "invoice")] == [2, 2, 2, 2]
    assert not {"release", "refund"} & {k for s in ("inventory", "payment") for k in harness.kinds(s)}
    assert await check_sagas_live(harness.db, harness.services.url) == []


async def test_a_long_poll_answers_when_an_effect_completes(harness: Harness) -> None:
    """The executor's outcome wakes the order's waiters at its commit: a long poll on the status answers
    once the reservation completed, long before its wait ends, with the saga in the answer (GET's shape)."""
    from nexus.ingress.http import read_order
    from nexus.lifecycle.waiting import DecisionListener, wait_for_order
    from nexus.settings import Settings

    listener = DecisionListener(harness.db.url, Settings())
    task = asyncio.create_task(listener.run())
    try:
        await asyncio.wait_for(listener.connected.wait(), 10)
        await harness.send("w1", 1, 2)
        loop = asyncio.get_running_loop()
        started = loop.time()
        poll = asyncio.create_task(
            wait_for_order(
                listener, lambda: read_order(harness.db, "default", "w1"), "default", "w1", 30, after_status="created"
            )
        )
        await asyncio.sleep(0.3)
        while not poll.done() and loop.time() - started < 30:
            if not await harness.executor.run_once():  # the reservation, then nothing due
                await asyncio.sleep(0.05)
        order = await poll
        assert order is not None and order["status"] == "inventory_validated"
        assert loop.time() - started < 10
        again = await read_order(harness.db, "default", "w1")
        assert again is not None
        for seen in (order, again):  # when the saga is next due moves on as the executor works it
            seen["saga"].pop("next_attempt_at")
        assert order == again
        assert order["saga"]["steps"][0]["status"] == "COMPLETED"
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_a_step_buffered_behind_a_retrying_effect_does_not_expire(
    database_url: str, services: RunningServices
) -> None:
    """OrderCompleted buffered behind a shipment whose service answers 503 for longer than the buffer
    timeout is not dead-lettered (its wait counts from the effect's end); once shipping is back, the
    shipment completes and the buffered step applies."""
    settings = saga_settings(database_url, services, saga_max_attempts=10_000, saga_breaker_threshold=1000)
    db = await Database(settings).open(migrate=False)
    h = Harness(db, settings, services)
    try:
        await h.send("b2", 1, 2, 3)
        await h.settle()
        services.services.faults["shipping"].down = True
        ship, done = await h.send("b2", 4, 5)
        assert (ship["decision"], done["decision"]) == ("APPLY", "BUFFER")
        await h.settle(rounds=30)
        await asyncio.sleep(0.6)
        assert await h.gateway.expire_buffered(0.5) == []
        assert [r["seq_id"] for r in await db.fetch("SELECT seq_id FROM pending_events WHERE order_id = 'b2'")] == [5]
        services.services.faults["shipping"].down = False
        await h.settle()
        assert (await h.order("b2"))["status"] == "completed"
        assert h.kinds("shipping") == ["ship"] and h.kinds("invoice") == ["invoice"]
    finally:
        await h.executor.aclose()
        await db.close()
