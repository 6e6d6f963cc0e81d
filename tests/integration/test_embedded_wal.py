"""The embedded PostgreSQL writes its WAL with `WAL_SETTINGS` (issue 34's batches: less WAL per envelope, no
segment zero-filled inside a commit) and keeps PostgreSQL's durability: every commit flushed, full pages on."""

from __future__ import annotations

import logging
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import pytest

from nexus.store.embedded import WAL_SETTINGS, EmbeddedPostgres, configure_wal
from tests.helpers import wait_until

pytestmark = [pytest.mark.postgres, pytest.mark.processes, pytest.mark.timeout(120)]

DURABLE = {"fsync": "on", "synchronous_commit": "on", "full_page_writes": "on"}


@pytest.fixture
def embedded() -> Iterator[EmbeddedPostgres]:
    """A fresh embedded server of its own (not the session's, whose durability the tests turn off)."""
    directory = Path(tempfile.mkdtemp(prefix="nexus-test-wal-"))
    server = EmbeddedPostgres(directory, cleanup_mode="delete")
    yield server
    server.close()
    shutil.rmtree(directory, ignore_errors=True)


async def shown(url: str, names: list[str]) -> dict[str, str]:
    """What `SHOW` says for each of `names`, through a real connection."""
    conn = await asyncpg.connect(url)
    try:
        return {name: await conn.fetchval(f"SHOW {name}") for name in names}
    finally:
        await conn.close()


async def test_a_fresh_embedded_server_runs_with_the_wal_settings_and_stays_durable(
    embedded: EmbeddedPostgres,
) -> None:
    """A newly initialised embedded server shows every WAL setting, and fsync, synchronous commits and full pages on."""
    url = embedded.start()

    async def configured() -> bool:
        return await shown(url, list(WAL_SETTINGS)) == WAL_SETTINGS

    await wait_until(configured, 10, f"SHOW to say {WAL_SETTINGS} (the start's reload is asynchronous)")
    assert await shown(url, list(DURABLE)) == DURABLE


async def test_a_start_gives_back_a_wal_setting_the_server_lost(embedded: EmbeddedPostgres) -> None:
    """A setting reset on a running server is set again by the next process that starts (joins) the server."""
    url = embedded.start()
    conn = await asyncpg.connect(url)
    try:
        await conn.execute("ALTER SYSTEM RESET wal_compression")
        await conn.execute("SELECT pg_reload_conf()")
    finally:
        await conn.close()

    async def compression(url: str, value: str) -> bool:
        return (await shown(url, ["wal_compression"]))["wal_compression"] == value

    await wait_until(lambda: compression(url, "off"), 10, "the reset to take effect (a reload is asynchronous)")
    joined = EmbeddedPostgres(embedded.pgdata.parent, cleanup_mode=None).start()
    await wait_until(lambda: compression(joined, "pglz"), 10, "the joining start to set it again")


def test_settings_that_cannot_be_applied_are_logged_and_the_start_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    """A server psql cannot reach leaves a WARNING naming the error, and `configure_wal` returns."""
    with caplog.at_level(logging.WARNING, logger="nexus.store.embedded"):
        configure_wal("postgresql:///nexus?host=/nonexistent-socket-dir")
    [record] = [r for r in caplog.records if getattr(r, "action", None) == "embedded_pg_wal_settings"]
    assert "nonexistent-socket-dir" in record.error  # type: ignore[attr-defined]
