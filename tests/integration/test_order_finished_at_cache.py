"""Migration 0033 on a real PostgreSQL: the finished_at trigger reads each process version's terminal states
once per transaction, and every order is still judged by its own process's: orders of processes whose names
differ only by `.` and `-` or by case, and of one without terminal states (`completed`), in one transaction."""

from __future__ import annotations

import json

from nexus.core.decide.items import Incoming
from nexus.gateway import Gateway
from nexus.store.database import Database
from tests.factories import step_json

# (order, process, terminal states): the shipped order process (v2: completed, aborted) and three of one's own.
ORDERS = [("o-1", "order", 2), ("o-2", "a.b", 1), ("o-3", "a-b", 1), ("o-4", "A.b", 1)]
PROCESSES = [("a.b", ["closed"]), ("a-b", ["shipped"]), ("A.b", None)]


async def test_each_order_is_finished_by_its_own_processs_terminal_states_within_one_transaction(
    db: Database,
) -> None:
    """Moving all four orders through `shipped`, `closed` and `completed` in one transaction finishes (and
    unfinishes) each exactly when its own process's terminal states say so."""
    gateway = Gateway(db)
    await gateway.submit([Incoming.parse(json.dumps(step_json(o, f"p-{o}", 1))) for o, _, _ in ORDERS])
    finished = "SELECT order_id FROM orders WHERE finished_at IS NOT NULL ORDER BY order_id"
    async with db.pool.acquire() as conn, conn.transaction():
        for name, terminal in PROCESSES:
            await conn.execute(
                "INSERT INTO processes (name, version, content_hash, body, terminal) VALUES ($1, 1, $1, '', $2)",
                name,
                terminal,
            )
        for order_id, process, version in ORDERS:
            await conn.execute(
                "UPDATE orders SET process = $2, process_version = $3 WHERE order_id = $1", order_id, process, version
            )
        seen = []
        for status in ("shipped", "closed", "completed"):
            await conn.execute("UPDATE orders SET status = $1", status)
            seen.append([r["order_id"] for r in await conn.fetch(finished)])
    assert seen == [["o-3"], ["o-2"], ["o-1", "o-4"]]
