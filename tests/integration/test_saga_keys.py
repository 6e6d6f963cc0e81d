"""The saga calls' Idempotency-Keys: fixed when a step is recorded, whatever happens to the secret afterwards.

Real PostgreSQL, real executors, the lab's services over real HTTP (their ledgers are the judges).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from nexus.core.saga import Action, idempotency_key
from nexus.store.database import Database
from nexus.store.saga_keys import LEGACY_CONSTANT
from nexus_lab.services import RunningServices, start_services
from tests.integration.test_sagas import Harness, saga_settings

BEFORE, AFTER, HOOK = "secret-before", "secret-after", "hook"


@pytest.fixture
async def services() -> AsyncIterator[RunningServices]:
    running = await start_services()
    yield running
    await running.aclose()


async def _started(database_url: str, services: RunningServices, **secrets: Any) -> Harness:
    settings = saga_settings(database_url, services, saga_call_timeout_s=0.2, saga_max_attempts=6, **secrets)
    return Harness(await Database(settings).open(migrate=False), settings, services)


async def _stop(h: Harness) -> None:
    await h.executor.aclose()
    await h.db.close()


async def _run_until(h: Harness, done: Any, rounds: int = 300) -> None:
    for _ in range(rounds):
        if done():
            return
        if not await h.executor.run_once():
            await asyncio.sleep(0.02)
    raise AssertionError("the executor never got there")


async def _keys(h: Harness, order: str, seq: int) -> Any:
    sql = "SELECT forward_key, compensation_key FROM saga_steps WHERE order_id = $1 AND seq = $2"
    return await h.db.fetchrow(sql, order, seq)


@pytest.mark.parametrize("rotated", ["saga_secret", "webhook_secret"])
async def test_a_secret_rotated_between_a_forward_failure_and_its_retry_charges_once(
    database_url: str, services: RunningServices, rotated: str
) -> None:
    """A charge the service recorded but answered after the timeout is retried by an executor restarted with
    another NEXUS_SAGA_SECRET (or webhook secret): the retry carries the recorded key, the ledger charges once."""
    payment = services.services.faults["payment"]
    payment.hang_rate, payment.hang_ms = 1.0, 600
    first = await _started(database_url, services, **{rotated: "secret-before"})
    try:
        await first.send("r1", 1, 2, 3)
        await _run_until(first, lambda: first.kinds("payment"))  # the charge is in the ledger, its answer late
    finally:
        await _stop(first)
    payment.hang_rate = 0.0
    second = await _started(database_url, services, **{rotated: "secret-after"})  # the restart, rotated
    try:
        await second.settle()
        assert (await second.order("r1"))["status"] == "payment_processed"
        assert second.kinds("payment") == ["charge"]
        assert list(services.services.ledgers["payment"].attempts) == [(await _keys(second, "r1", 3))[0]]
    finally:
        await _stop(second)


async def test_a_compensation_retried_after_a_rotation_keeps_its_key(
    database_url: str, services: RunningServices
) -> None:
    """A release answered late and retried by an executor restarted with another secret carries the key
    recorded with its step: the service sees one compensation key, and releases once."""
    services.services.faults["payment"].permanent_fail_rate = 1.0
    inventory = services.services.faults["inventory"]
    inventory.hang_rate, inventory.hang_ms, inventory.hang_forwards = 1.0, 600, False
    first = await _started(database_url, services, saga_secret=BEFORE)
    try:
        await first.send("r2", 1, 2, 3)
        await _run_until(first, lambda: "release" in first.kinds("inventory"))
    finally:
        await _stop(first)
    inventory.hang_rate = 0.0
    second = await _started(database_url, services, saga_secret=AFTER)
    try:
        await second.settle()
        assert (await second.order("r2"))["status"] == "aborted"
        assert second.kinds("inventory") == ["reserve", "release"]
        forward_key, compensation_key = await _keys(second, "r2", 2)
        assert set(services.services.ledgers["inventory"].attempts) == {forward_key, compensation_key}
    finally:
        await _stop(second)


async def test_without_a_saga_secret_the_keys_come_from_a_random_stored_secret_shared_by_every_instance(
    database_url: str, services: RunningServices
) -> None:
    """No NEXUS_SAGA_SECRET: the keys are neither the webhook secret's nor the old fixed value's; two
    instances on one database record the same keys (one stored secret, made once)."""
    one = await _started(database_url, services, webhook_secret=HOOK)
    two = await _started(database_url, services, webhook_secret=HOOK)
    try:
        await one.send("k1", 1, 2)
        await two.send("k2", 1, 2)
        stored = await one.db.fetch("SELECT secret FROM nexus_secrets")
        assert len(stored) == 1 and len(stored[0]["secret"]) == 64
        secret = stored[0]["secret"].encode()
        for order in ("k1", "k2"):
            parts = ("default", order, "plan-s", "InventoryValidated")
            expected = (
                idempotency_key(secret, *parts, Action.FORWARD),
                idempotency_key(secret, *parts, Action.COMPENSATE),
            )
            assert tuple(await _keys(one, order, 2)) == expected
            for old in (HOOK.encode(), LEGACY_CONSTANT.encode()):
                assert idempotency_key(old, *parts, Action.FORWARD) not in expected
    finally:
        await _stop(one)
        await _stop(two)


async def test_steps_an_older_version_recorded_get_their_keys_under_the_old_derivation_at_start(
    database_url: str, services: RunningServices
) -> None:
    """On upgrade, a step without keys (as an older version recorded it) gets at start the keys that version
    derived from its secret (here the webhook secret); a key an older executor already used is kept."""
    h = await _started(database_url, services, webhook_secret=HOOK)
    try:
        await h.send("u1", 1, 2)
        await h.send("u2", 1, 2)
        await h.db.execute("UPDATE saga_steps SET forward_key = NULL, compensation_key = NULL WHERE order_id = 'u1'")
        await h.db.execute(
            "UPDATE saga_steps SET forward_key = 'used-before', compensation_key = NULL WHERE order_id = 'u2'"
        )
        upgraded = await Database(h.db.settings).open(migrate=True)
        await upgraded.close()
        old = HOOK.encode()
        parts = ("default", "u1", "plan-s", "InventoryValidated")
        assert tuple(await _keys(h, "u1", 2)) == (
            idempotency_key(old, *parts, Action.FORWARD),
            idempotency_key(old, *parts, Action.COMPENSATE),
        )
        u2 = ("default", "u2", "plan-s", "InventoryValidated")
        assert tuple(await _keys(h, "u2", 2)) == ("used-before", idempotency_key(old, *u2, Action.COMPENSATE))
        await h.settle()
        keys = {e["key"] for e in services.services.ledgers["inventory"].entries}
        assert keys == {idempotency_key(old, *parts, Action.FORWARD), "used-before"}
    finally:
        await _stop(h)
