"""Test helpers written once: waiting on a condition, "every plan completed once" read from PostgreSQL, and
running a `nexus` command to completion."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path

import asyncpg


async def wait_until(check: Callable[[], Awaitable[bool]], timeout: float, what: str, interval: float = 0.05) -> None:
    """Poll `check` every `interval` s until it is true; errors count as "not yet" (the broker or database
    may be restarting). Timing tests need the short default; the Kafka tests poll the broker at 0.2 s."""
    deadline = time.monotonic() + timeout
    last_error: BaseException | None = None
    while time.monotonic() < deadline:
        try:
            if await check():
                return
        except Exception as exc:
            last_error = exc
        await asyncio.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last error: {last_error!r})")


async def assert_plans_completed_once(database_url: str, prefix: str, n: int, steps: int = 5) -> None:
    """Every order of the prefix: exactly one outbox row per step, positions 1..n in seq order, completed."""
    conn = await asyncpg.connect(database_url)
    try:
        rows = await conn.fetch(
            "SELECT order_id, array_agg(seq_id ORDER BY position) AS seqs,"
            " array_agg(position ORDER BY position) AS pos FROM outbox WHERE order_id LIKE $1 GROUP BY order_id",
            f"{prefix}-%",
        )
        orders = await conn.fetch(
            "SELECT order_id, status, last_seq, outbox_count FROM orders WHERE order_id LIKE $1", f"{prefix}-%"
        )
        pending = await conn.fetchval("SELECT count(*) FROM pending_events WHERE order_id LIKE $1", f"{prefix}-%")
        rejected = await conn.fetchval("SELECT count(*) FROM dead_letters WHERE code = 'DATABASE_REJECTED'")
    finally:
        await conn.close()
    expected = list(range(1, steps + 1))
    assert len(rows) == n, f"{len(rows)} orders have notifications, expected {n}"
    bad = [r["order_id"] for r in rows if list(r["seqs"]) != expected or list(r["pos"]) != expected]
    assert not bad, f"orders with missing, doubled or misordered notifications: {bad[:5]}"
    assert len(orders) == n
    assert all(o["status"] == "completed" and o["last_seq"] == steps and o["outbox_count"] == steps for o in orders)
    assert pending == 0
    assert rejected == 0, "a step was applied twice (the outbox's unique keys rejected it)"


def nexus_command(*args: str, env: Mapping[str, str], timeout: float = 120) -> str:
    """Run `nexus ARGS...` (the command assembly, as a user would) to completion; its stdout, or an
    assertion error carrying its output if it exits non-zero."""
    done = subprocess.run(
        [sys.executable, "-m", "nexus_cli", *args],
        env=dict(env),
        cwd=Path(__file__).resolve().parent.parent,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout
