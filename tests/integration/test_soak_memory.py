"""The soak's PostgreSQL memory figures measured on a real server: its processes by kind, the judged figure
outside shared memory."""

from __future__ import annotations

import psutil

from nexus.store.database import Database
from nexus_lab.soak_memory import BACKEND, POSTMASTER, postgres_memory, steady_mb


async def test_a_real_servers_processes_are_found_by_kind_and_shared_memory_is_left_out(db: Database) -> None:
    """The postmaster, its checkpointer and a client backend are told apart; the judged figure is their own
    memory, below the private memory of the whole tree (which counts shared-buffer pages one process touched)."""
    backend = await db.fetchval("SELECT pg_backend_pid()")
    postmaster = psutil.Process(backend).ppid()
    await db.execute("SELECT count(*) FROM generate_series(1, 200000)")  # some shared buffers touched
    figures, by_kind = postgres_memory(postmaster)
    assert {POSTMASTER, "checkpointer", BACKEND} <= set(by_kind), by_kind
    assert len(by_kind[POSTMASTER]) == 1
    assert figures["postgres"] == round(steady_mb(by_kind), 1)
    assert 0 < figures["postgres"] < figures["postgres-uss"]
    assert postgres_memory(0) == ({}, {})
