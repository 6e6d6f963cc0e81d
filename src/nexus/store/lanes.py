"""The heavy lanes' PostgreSQL connections: a pool of their own, its backends optionally at a lower OS priority.

The group commit's heavy lanes (`nexus.ingress.batcher`: slices of 1,000-envelope batches, 1,000-line steps)
run their transactions in a task that sets `HEAVY_LANE`; `Database.lane_pool` then hands them connections of
the heavy pool (`NEXUS_HEAVY_DB_CONNECTIONS` at most: so at most that many heavy transactions are in
PostgreSQL at once, whatever the number of heavy lanes), and every other transaction the main pool's.

Each backend of the heavy pool may be reniced to `NEXUS_HEAVY_BACKEND_NICE` when it connects (`lower_priority`;
0, the default, off), so that on a host short of cores another tenant's light transaction would get a core
before a heavy one's backend (measured, it did not help: a niced backend descheduled while it holds a lock, or
the WAL's, makes the light transaction wait for it too). Only where the backend is a process of this host that
this process may renice: its pid (`pg_backend_pid()`) names a process whose working directory is the server's
`data_directory` (as every PostgreSQL backend's is), and `setpriority` is allowed (the same user: the embedded
server, or a local one run as the gateway's user). A remote server, one in a container of its own, one of
another user, or a role that may not read `data_directory`: nothing is changed. Niceness is only ever raised.
"""

from __future__ import annotations

import contextvars
import logging
import os

import asyncpg

from nexus.store.queries import query

log = logging.getLogger(__name__)

HEAVY_LANE: contextvars.ContextVar[bool] = contextvars.ContextVar("nexus_heavy_lane", default=False)
"""True in a heavy lane's task: its transactions take the heavy pool's connections."""


def local_backend(pid: int, data_directory: str | None) -> bool:
    """Whether `pid` is a process of this host working in `data_directory` (so, the backend itself)."""
    if not data_directory:
        return False
    try:
        cwd = os.readlink(f"/proc/{pid}/cwd")
    except OSError:  # no such process here, not ours to look at, or no /proc
        return False
    return os.path.realpath(cwd) == os.path.realpath(data_directory)


async def lower_priority(conn: asyncpg.Connection, nice: int) -> bool:
    """Renice `conn`'s backend to `nice` (if it is less nice now) where it is a local process we may renice;
    whether it now runs at that niceness or lower priority."""
    if nice <= 0:
        return False
    try:
        row = await conn.fetchrow(query("db.sql", "backend_process"))
    except asyncpg.PostgresError:  # a role that may not read data_directory: not ours to judge
        return False
    pid, data_directory = row["pid"], row["data_directory"]
    if not local_backend(pid, data_directory):
        return False
    try:
        if os.getpriority(os.PRIO_PROCESS, pid) < nice:
            os.setpriority(os.PRIO_PROCESS, pid, nice)
    except OSError as exc:  # another user's process
        log.info("heavy lane's backend not reniced", extra={"action": "renice", "pid": pid, "error": str(exc)})
        return False
    return True
