"""The heavy lanes' own PostgreSQL connections (`nexus.store.lanes`): at most `NEXUS_HEAVY_DB_CONNECTIONS`
heavy transactions in PostgreSQL at once while light ones go on."""

from __future__ import annotations

import asyncio
import threading
import time
import zlib
from collections.abc import AsyncIterator, Mapping
from typing import Any

import asyncpg
import pytest

from nexus.core.decide.items import Incoming
from nexus.core.decide.validation import StepChecks
from nexus.core.order_state import Decision
from nexus.core.process_model import CompiledProcess, Verdict
from nexus.fold_thread import FoldThread
from nexus.gateway import Gateway
from nexus.ingress.batcher import GroupCommitter
from nexus.settings import Settings
from nexus.store.database import Database
from nexus.store.lanes import HEAVY_LANE
from tests.factories import step_json

IN_TRANSACTION = """
SELECT count(*) FROM pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid() AND xact_start IS NOT NULL
"""


class HoldingChecks(StepChecks):
    """The real checks; a step of an order named `held-*` blocks its fold (on the fold thread) until `release`."""

    def __init__(self) -> None:
        self.holding = threading.Event()
        self.release = threading.Event()

    def verdict(
        self, process: CompiledProcess | None, name: str, status: str | None, facts: Mapping[str, Any],
        event_type: str, seq_id: int | None, data: Mapping[str, Any], limits: Mapping[str, Any],
        *, data_checked: bool = False,
    ) -> Verdict | None:  # fmt: skip
        if str(data.get("user_id", "")).startswith("held-"):
            self.holding.set()
            self.release.wait(10)
        return super().verdict(
            process, name, status, facts, event_type, seq_id, data, limits, data_checked=data_checked
        )


def _items(prefix: str, n: int, partition: int, workers: int = 2) -> list[Incoming]:
    """`n` new orders named `prefix*` whose ids all fall in the group commit's `partition` (of `workers`)."""
    steps: list[dict[str, Any]] = []
    i = 0
    while len(steps) < n:
        order = f"{prefix}{i}"
        i += 1
        if zlib.crc32(order.encode()) % workers == partition:
            step = step_json(order, f"p-{order}", 1)
            step["data"]["user_id"] = order
            steps.append(step)
    return [Incoming.parse(step) for step in steps]


@pytest.fixture
async def lanes_db(settings: Settings) -> AsyncIterator[Database]:
    database = await Database(settings.replace(fold_thread_weight=32, heavy_db_connections=1)).open(migrate=False)
    yield database
    await database.close()


async def test_at_most_one_heavy_transaction_is_in_postgresql_while_a_light_one_goes_on(
    lanes_db: Database, database_url: str
) -> None:
    """Two heavy lanes (two workers), one heavy connection: while one heavy transaction is held in its fold, a
    second heavy request (the other lane) opens no transaction, and a light request is answered meanwhile (on
    the code before the heavy pool, both heavy lanes held a transaction of the shared pool at once)."""
    checks = HoldingChecks()
    folds = FoldThread(weight=32)
    folds.start()
    committer = GroupCommitter(Gateway(lanes_db, checks=checks, folds=folds), workers=2, heavy_weight=32)
    committer.start()
    watcher = await asyncpg.connect(database_url)
    try:
        first = asyncio.create_task(committer.submit(_items("held-", 40, partition=0)))
        while not checks.holding.is_set() and not first.done():
            await asyncio.sleep(0.01)
        second = asyncio.create_task(committer.submit(_items("second-", 40, partition=1)))
        [light] = await committer.submit(_items("light-", 1, partition=1))
        most = 0
        deadline = time.monotonic() + 2.0  # the old code opens the second within milliseconds
        while time.monotonic() < deadline and most < 2:
            most = max(most, await watcher.fetchval(IN_TRANSACTION))
            await asyncio.sleep(0.02)
        checks.release.set()
        outcomes = await first + await second
    finally:
        checks.release.set()
        await watcher.close()
        await committer.stop()
        folds.close()
    assert light.decision is Decision.APPLY
    assert most == 1
    assert [o.decision for o in outcomes] == [Decision.APPLY] * 80


async def test_a_heavy_lane_takes_the_main_pool_when_its_own_is_off(settings: Settings) -> None:
    """`NEXUS_HEAVY_DB_CONNECTIONS=0`: a heavy lane's task gets the main pool (no second pool); with it on, the
    heavy pool, and any other task the main pool."""
    off = await Database(settings.replace(fold_thread_weight=32, heavy_db_connections=0)).open(migrate=False)
    on = await Database(settings.replace(fold_thread_weight=32, heavy_db_connections=2)).open(migrate=False)

    async def in_heavy_lane(db: Database) -> object:
        HEAVY_LANE.set(True)
        return db.lane_pool

    try:
        assert await asyncio.create_task(in_heavy_lane(off)) is off.pool
        assert await asyncio.create_task(in_heavy_lane(on)) is not on.pool
        assert on.lane_pool is on.pool
    finally:
        await off.close()
        await on.close()
