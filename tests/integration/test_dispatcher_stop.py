"""A dispatcher stopped while it records results: the result is recorded, once."""

from __future__ import annotations

import asyncio
import contextlib
import logging

import pytest

from nexus.core.decide.items import Incoming
from nexus.delivery.dispatcher import OutboxDispatcher
from nexus.gateway import Gateway
from nexus.settings import Settings
from nexus.store.database import Database
from nexus_lab.sink import start_sink
from tests.factories import step
from tests.integration.test_delivery import SECRET, subscribe, wait_until

# Recording a delivered result commits slowly: a deferred trigger sleeps at COMMIT (test-only DDL).
_SLOW_COMMIT = """
CREATE FUNCTION test_slow_commit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN PERFORM pg_sleep(0.5); RETURN NULL; END $$;
CREATE CONSTRAINT TRIGGER test_slow_commit AFTER UPDATE ON deliveries DEFERRABLE INITIALLY DEFERRED
FOR EACH ROW WHEN (NEW.state = 'delivered') EXECUTE FUNCTION test_slow_commit();
"""


async def _sleeping_in_commit(db: Database) -> bool:
    return bool(
        await db.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'PgSleep' AND datname = current_database()"
        )
    )


async def test_a_stop_during_the_results_commit_still_records_the_result_once(
    db: Database, settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    """The stop cancels the results transaction in its COMMIT (the server rolls it back); the stop's last
    write records the result again: delivered after one attempt, the lease released, one request sent,
    and no ERROR logged. (Without that last write the delivery stays pending under the stopped owner's
    lease: watched fail.)"""
    sink = await start_sink(secret=SECRET)
    caplog.set_level(logging.INFO)
    try:
        await subscribe(db, sink.url + "/hook")
        envelope = step("o-stop", "p-stop", 1)
        await Gateway(db).submit([Incoming(envelope.model_dump_json(), envelope)])
        await db.execute(_SLOW_COMMIT)
        dispatcher = OutboxDispatcher(db, settings, "stop-1")
        task = asyncio.create_task(dispatcher.run())
        try:
            await wait_until(lambda: _sleeping_in_commit(db), 10, "the results commit under way")
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        row = await db.fetchrow("SELECT state, attempts, lease_owner FROM deliveries")
        attempts = await db.fetchval("SELECT count(*) FROM delivery_attempts")
    finally:
        await sink.aclose()
    assert row is not None and (row["state"], row["attempts"], row["lease_owner"]) == ("delivered", 1, None)
    assert attempts == 1
    assert len(sink.sink.records) == 1
    assert not [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
