"""What a running gateway's PostgreSQL does per event, from its own statistics: rows inserted, updated (HOT or not)
and deleted, sequential and index scans per table, and the time of each PL/pgSQL function (the triggers), over a
window of `seconds` while a load runs (e.g. during `nexus bench --suite wrk`, on the bench's embedded database).

Turns `track_functions` to `pl` on that server (ALTER SYSTEM + reload: use it on a bench's own PostgreSQL only),
waits for the backends to read it, then prints one JSON object: `tables` {name: [inserted, updated, hot_updated,
deleted, seq_scan, idx_scan]}, `funcs` {name: [calls, total_ms, self_ms]} and `db` (commits, tuples read, blocks
hit), each the difference over the window. Divide by `tables.outbox[0]` (one outbox row per applied event).

    python benchmarks/pg_table_stats.py SOCKET_DIR DATABASE [SECONDS]
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

import asyncpg

Snapshot = tuple[dict[str, list[int]], dict[str, list[float]], dict[str, int]]


async def snapshot(conn: asyncpg.Connection) -> Snapshot:
    """The counters now (a fresh statistics snapshot)."""
    await conn.execute("SELECT pg_stat_clear_snapshot()")
    tables = await conn.fetch(
        "SELECT relname, n_tup_ins, n_tup_upd, n_tup_hot_upd, n_tup_del, seq_scan, idx_scan FROM pg_stat_user_tables"
    )
    funcs = await conn.fetch("SELECT funcname, calls, total_time, self_time FROM pg_stat_user_functions")
    db = await conn.fetchrow(
        "SELECT xact_commit, tup_returned, tup_fetched, blks_hit FROM pg_stat_database"
        " WHERE datname = current_database()"
    )
    return {r[0]: [v or 0 for v in r[1:]] for r in tables}, {r[0]: list(r[1:]) for r in funcs}, dict(db or {})


def difference(before: Snapshot, after: Snapshot) -> dict[str, Any]:
    def minus(old: dict[str, Any], new: dict[str, Any]) -> dict[str, list[Any]]:
        return {k: [b - a for a, b in zip(old.get(k, [0] * len(v)), v, strict=True)] for k, v in new.items()}

    return {
        "tables": minus(before[0], after[0]),
        "funcs": minus(before[1], after[1]),
        "db": {k: after[2][k] - before[2].get(k, 0) for k in after[2]},
    }


async def main(host: str, database: str, seconds: float) -> None:
    conn = await asyncpg.connect(host=host, database=database, user="postgres")
    try:
        await conn.execute("ALTER SYSTEM SET track_functions = 'pl'")
        await conn.execute("SELECT pg_reload_conf()")
        await asyncio.sleep(1.5)
        before = await snapshot(conn)
        await asyncio.sleep(seconds)
        print(json.dumps(difference(before, await snapshot(conn))))
    finally:
        await conn.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], float(sys.argv[3]) if len(sys.argv) > 3 else 6.0))
