"""Losing the PostgreSQL machine: a scenario's own primary with a synchronous standby, and the fault that takes
the primary away for good.

`ReplicatedDatabase` starts a primary (an embedded server of its own, not the session's shared one), migrates
it, registers the lab's key, and starts `nexus db standby` against it; the scenario's processes get a multi-host
URL (`target_session_attrs=read-write`) and `NEXUS_SYNC_STANDBY`, so every commit they acknowledge is on both
machines. `lose_primary` SIGKILLs every process of the primary (the postmaster and its backends) and deletes its data
directory (its disk is gone with its machine); `promote` runs `nexus db promote` on the standby. The gateways,
dispatchers and the checker then find the new primary through the same URL (the fault: `faults.PostgresFailover`).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
import shutil
import signal
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import asyncpg
import psutil

from nexus.settings import Settings
from nexus.store.database import Database
from nexus.store.embedded import EmbeddedPostgres
from nexus_lab.procs import NEXUS_CMD, Proc

STANDBY_NAME = "chaos_standby"
_FIRST_APPLY = "SELECT min(at) FROM decision_log WHERE decision = 'APPLY' AND at > $1"
_STREAMING = "SELECT EXISTS (SELECT 1 FROM pg_stat_replication WHERE application_name = $1 AND state = 'streaming')"


def _socket_dir(url: str) -> str:
    return url.split("host=", 1)[1].split("&", 1)[0]


class ReplicatedDatabase:
    """A primary and its standby in `directory`, for one scenario: synchronous, or (`synchronous=False`) the
    asynchronous replication whose loss at a failover `postgres-failover-async` counts."""

    def __init__(self, directory: Path, env: dict[str, str], *, synchronous: bool = True) -> None:
        self.directory = directory
        self.synchronous = synchronous
        self.primary = EmbeddedPostgres(directory / "primary", cleanup_mode="delete")
        self.standby = Proc("standby", [*NEXUS_CMD, "db", "standby"], env, directory / "standby.log")
        self.url = ""
        self.standby_url = ""
        self.primary_lost = False

    async def start(self, register: Callable[[Any], Awaitable[str]]) -> str:
        """Start both servers (`register` makes the lab's key valid in the primary); the multi-host URL once the
        standby streams synchronously."""
        primary_url = await asyncio.to_thread(self.primary.start)
        db = await Database(Settings(database_url=primary_url)).open(migrate=True)
        try:
            await register(db)
        finally:
            await db.close()
        self.standby.cmd += ["--primary", primary_url, "--data-dir", str(self.directory / "standby")]
        self.standby.cmd += ["--name", STANDBY_NAME]
        self.standby.start()
        self.standby_url = await self._standby_url()
        hosts = f"{_socket_dir(primary_url)},{_socket_dir(self.standby_url)}"
        self.url = f"postgresql://postgres@/postgres?host={hosts}&port=5432,5432&target_session_attrs=read-write"
        sync_standby = STANDBY_NAME if self.synchronous else None
        db = await Database(Settings(database_url=primary_url, sync_standby=sync_standby)).open(migrate=False)
        try:
            for _ in range(300):
                if await db.not_ready() is None and await db.fetchval(_STREAMING, STANDBY_NAME):
                    return self.url
                await asyncio.sleep(0.1)
            raise TimeoutError(f"standby not streaming within 30 s:\n{self.standby.tail()}")
        finally:
            await db.close()

    async def _standby_url(self) -> str:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            for line in self.standby.log_since_start().splitlines():
                if line.startswith('{"standby"'):
                    url: str = json.loads(line)["url"]
                    return url
            if not self.standby.alive:
                raise RuntimeError(f"nexus db standby exited:\n{self.standby.tail()}")
            await asyncio.sleep(0.1)
        raise TimeoutError(f"nexus db standby printed no URL:\n{self.standby.tail()}")

    def lose_primary(self) -> None:
        """SIGKILL the primary's postmaster and every backend, then delete its data directory."""
        pgdata = self.primary.pgdata
        pid = int((pgdata / "postmaster.pid").read_text().split()[0])
        postmaster = psutil.Process(pid)
        victims = [postmaster, *postmaster.children(recursive=True)]
        for proc in victims:
            with contextlib.suppress(psutil.NoSuchProcess):
                proc.send_signal(signal.SIGKILL)
        psutil.wait_procs(victims, timeout=10)
        shutil.rmtree(pgdata, ignore_errors=True)
        self.primary_lost = True

    async def promote(self) -> None:
        done = await asyncio.create_subprocess_exec(
            *NEXUS_CMD, "db", "promote", "--data-dir", str(self.directory / "standby"), env=self.standby.env
        )
        if await done.wait() != 0:
            raise RuntimeError("nexus db promote failed")
        # The promoted server takes writes once it answers outside recovery.
        for _ in range(300):
            with contextlib.suppress(OSError, asyncpg.PostgresError):
                conn = await asyncpg.connect(self.standby_url)
                try:
                    if not await conn.fetchval("SELECT pg_is_in_recovery()"):
                        return
                finally:
                    await conn.close()
            await asyncio.sleep(0.1)
        raise TimeoutError("the promoted standby still in recovery after 30 s")

    async def first_apply_after(self, lost_at: dt.datetime, timeout_s: float = 60.0) -> dt.datetime | None:
        """When the promoted standby recorded its first APPLY after `lost_at` (None: none within `timeout_s`)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError, asyncpg.PostgresError):
                conn = await asyncpg.connect(self.standby_url)
                try:
                    at: dt.datetime | None = await conn.fetchval(_FIRST_APPLY, lost_at)
                finally:
                    await conn.close()
                if at is not None:
                    return at
            await asyncio.sleep(0.1)
        return None

    def close(self) -> None:
        self.standby.stop()
        if self.primary_lost:
            self.primary._server = None  # its processes and directory are gone: nothing to stop
        with contextlib.suppress(Exception):  # a server already gone
            self.primary.close()
