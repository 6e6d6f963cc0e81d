"""The chaos tests' one session: an embedded PostgreSQL server for every scenario (each on a fresh database)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator

import asyncpg
import pytest

from nexus_lab.chaos.harness import ChaosSession
from tests.conftest import durability_off


@pytest.fixture(scope="session")
def chaos_session() -> Iterator[ChaosSession]:
    """One embedded PostgreSQL server for the chaos scenarios; each scenario gets a fresh database on it."""
    s = ChaosSession().start()
    yield s
    # The server is deleted once stopped: its stop's checkpoint need not wait for the disk (the scenarios
    # ran with PostgreSQL's defaults, as `nexus chaos` does).
    with contextlib.suppress(OSError, asyncpg.PostgresError):
        asyncio.run(durability_off(s.admin_url, ("fsync",)))
    s.close()
