"""Connecting to PostgreSQL: the embedded server or a given URL, a pool, and the migrations."""

from __future__ import annotations

import logging
from typing import Any

import asyncpg

from nexus.errors import ConfigurationError, TransientDatabaseError
from nexus.settings import Settings
from nexus.store import saga_keys
from nexus.store.embedded import EmbeddedPostgres
from nexus.store.errors import wrap_db_errors
from nexus.store.fair_pool import create_fair_pool
from nexus.store.lanes import HEAVY_LANE
from nexus.store.migrate import apply_migrations
from nexus.store.queries import query

log = logging.getLogger(__name__)


async def keep_session(conn: asyncpg.Connection) -> None:
    """Release a pooled connection without asyncpg's default reset.

    The default runs ``pg_advisory_unlock_all(); CLOSE ALL; UNLISTEN *; RESET ALL`` on every release: a
    round trip and four statements for PostgreSQL to parse, as many as the work itself for the
    dispatcher's short statements. Pooled connections here carry no session state to undo: advisory
    locks are transaction-scoped (``pg_advisory_xact_lock``; the audit checkpoint's one session lock is
    released by its holder in a ``finally``), nothing LISTENs or SETs on a pooled connection (each
    listener has a connection of its own), no cursor outlives its transaction. An open transaction is
    still rolled back by the pool before this is called.
    """


class Database:
    """The gateway's handle on PostgreSQL: resolves the URL, owns the pool."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.embedded: EmbeddedPostgres | None = None
        self.url = settings.database_url
        self._pool: asyncpg.Pool | None = None
        self._heavy_pool: asyncpg.Pool | None = None

    def resolve_url(self) -> str:
        """The server URL, starting the embedded server first if no URL was given."""
        if self.url is None:
            self.settings.check_database()
            self.embedded = EmbeddedPostgres(self.settings.data_dir)
            self.url = self.embedded.start()
        return self.url

    async def open(self, *, migrate: bool = True) -> Database:
        url = self.resolve_url()
        with wrap_db_errors():
            if migrate or self.settings.sync_standby:
                conn = await asyncpg.connect(url)
                try:
                    applied, filled = [], 0
                    if migrate:
                        applied = await apply_migrations(conn)
                        await saga_keys.ensure_secret(conn)
                        filled = await saga_keys.backfill(conn, self.settings)  # steps an older version recorded
                    if self.settings.sync_standby:
                        await require_sync_standby(conn, self.settings.sync_standby)
                finally:
                    await conn.close()
                for m in applied:
                    log.info("migration applied", extra={"action": "migrate", "version": m.version})
                if filled:
                    log.info("saga keys of older steps filled in", extra={"action": "migrate", "count": filled})
            self._pool = await create_fair_pool(
                url,
                per_tenant=self.settings.db_connections_per_tenant or max(1, self.settings.db_pool_size // 4),
                min_size=1,
                max_size=self.settings.db_pool_size,
                command_timeout=30,
                max_inactive_connection_lifetime=60,
                reset=keep_session,
            )
            self._heavy_pool = await self._open_heavy_pool(url)
        return self

    async def _open_heavy_pool(self, url: str) -> asyncpg.Pool | None:
        """The heavy lanes' pool (`nexus.store.lanes`), if there are heavy lanes and it is asked for; it
        connects only when a heavy transaction first needs it."""
        size = self.settings.heavy_db_connections
        if self.settings.fold_thread_weight <= 0 or size <= 0:
            return None

        return await asyncpg.create_pool(
            url,
            min_size=0,
            max_size=size,
            command_timeout=30,
            max_inactive_connection_lifetime=60,
            reset=keep_session,
        )

    async def not_ready(self) -> str | None:
        """Why this database cannot take commits now (None: it can): unreachable, or its synchronous standby
        is not streaming (commits would wait for it)."""
        await self.fetchval("SELECT 1")
        standby = self.settings.sync_standby
        if standby and not await self.fetchval(query("db.sql", "sync_standby_streaming"), standby):
            return f"synchronous standby {standby!r} is not streaming: commits wait for it"
        return None

    @property
    def pool(self) -> asyncpg.Pool:
        if self._pool is None:
            raise RuntimeError("Database.open() first")
        return self._pool

    @property
    def lane_pool(self) -> asyncpg.Pool:
        """The pool of the transaction lane this task runs in: the heavy pool in a heavy lane (if there is
        one), else the main pool."""
        if self._heavy_pool is not None and HEAVY_LANE.get():
            return self._heavy_pool
        return self.pool

    async def close(self) -> None:
        pools, self._heavy_pool, self._pool = (self._heavy_pool, self._pool), None, None
        for pool in pools:
            if pool is not None:
                await pool.close()
        if self.embedded is not None:
            self.embedded.close()
            self.embedded = None

    async def expire_connections(self) -> None:
        """After an outage pooled connections may be half-dead: have the pool replace them all."""
        for pool in (self._pool, self._heavy_pool):
            if pool is not None:
                await pool.expire_connections()

    async def fetch(self, sql: str, *args: Any) -> list[asyncpg.Record]:
        try:
            with wrap_db_errors():
                async with self.pool.acquire() as conn:
                    rows: list[asyncpg.Record] = await conn.fetch(sql, *args)
                    return rows
        except TransientDatabaseError:
            await self.expire_connections()
            raise

    async def fetchrow(self, sql: str, *args: Any) -> asyncpg.Record | None:
        rows = await self.fetch(sql, *args)
        return rows[0] if rows else None

    async def fetchval(self, sql: str, *args: Any) -> Any:
        row = await self.fetchrow(sql, *args)
        return row[0] if row is not None else None

    async def execute(self, sql: str, *args: Any) -> str:
        try:
            with wrap_db_errors():
                async with self.pool.acquire() as conn:
                    status: str = await conn.execute(sql, *args)
                    return status
        except TransientDatabaseError:
            await self.expire_connections()
            raise


async def require_sync_standby(conn: asyncpg.Connection, name: str) -> None:
    """List `name` in the primary's synchronous_standby_names (a superuser's right), or check it is there."""
    current = await conn.fetchval("SHOW synchronous_standby_names")
    wanted = f'"{name}"'
    if current in (name, wanted):
        return
    if not await conn.fetchval("SELECT rolsuper FROM pg_roles WHERE rolname = current_user"):
        raise ConfigurationError(
            f"NEXUS_SYNC_STANDBY={name!r} but the primary's synchronous_standby_names is {current!r} and this "
            "role may not change it: set it on the server"
        )
    await conn.execute(f"ALTER SYSTEM SET synchronous_standby_names = '{wanted}'")
    await conn.execute("SELECT pg_reload_conf()")
    log.info("synchronous standby required", extra={"action": "sync_standby", "standby": name})
