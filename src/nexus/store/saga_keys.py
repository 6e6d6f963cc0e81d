"""The saga calls' Idempotency-Keys: computed when a step is recorded and kept in its row.

Both directions' keys (the forward call's and its compensation's) are written with the saga step, in the
transaction that applies it, so every attempt of a call carries the same key whatever happens to the
secret afterwards: a rotation (of `NEXUS_SAGA_SECRET`) never turns a retry into a new call. The secret is
`NEXUS_SAGA_SECRET`, or else a random one made once and kept in PostgreSQL (`nexus_secrets`), shared by
every instance; never a fixed value, never the webhook secret.

Steps recorded by an older version have no keys: `backfill` (run at start, after the migrations) gives
them the keys that version would have used (`legacy_secret`: `NEXUS_SAGA_SECRET`, else
`NEXUS_WEBHOOK_SECRET`, else a fixed value), so a call it made is retried under its own key.
"""

from __future__ import annotations

import secrets

import asyncpg

from nexus.core.saga import Action, idempotency_key
from nexus.settings import Settings
from nexus.store.queries import query

LEGACY_CONSTANT = "nexus-saga-idempotency"
"""The fixed secret of older versions when neither secret was set: only for their steps' keys."""


def legacy_secret(settings: Settings) -> bytes:
    """The secret older versions derived every key from, at each attempt (for the steps they recorded)."""
    return (settings.saga_secret or settings.webhook_secret or LEGACY_CONSTANT).encode()


def call_keys(secret: bytes, tenant_id: str, order_id: str, plan_id: str, step: str) -> tuple[str, str]:
    """The forward call's key and its compensation's, of one saga step."""
    return (
        idempotency_key(secret, tenant_id, order_id, plan_id, step, Action.FORWARD),
        idempotency_key(secret, tenant_id, order_id, plan_id, step, Action.COMPENSATE),
    )


class SagaSecret:
    """The secret new steps' keys are derived from: the configured one, else the one kept in PostgreSQL."""

    def __init__(self, configured: str | None) -> None:
        self._value = configured.encode() if configured else None

    async def get(self, conn: asyncpg.Connection) -> bytes:
        """The secret, read (or made) on `conn`, inside the caller's transaction if it has one."""
        if self._value is not None:
            return self._value
        stored = await conn.fetchval(query("saga_keys.sql", "read_secret"))
        if stored is not None:  # committed by someone: safe to keep
            self._value = stored.encode()
            return self._value
        await conn.execute(query("saga_keys.sql", "create_secret"), secrets.token_hex(32))
        # Not kept: made in the caller's transaction, which may yet roll back (the next call reads again).
        return str(await conn.fetchval(query("saga_keys.sql", "read_secret"))).encode()


async def ensure_secret(conn: asyncpg.Connection) -> None:
    """Make the stored secret if there is none yet (its own statement: committed at once)."""
    await conn.execute(query("saga_keys.sql", "create_secret"), secrets.token_hex(32))


async def backfill(conn: asyncpg.Connection, settings: Settings) -> int:
    """Give the steps an older version recorded without keys the keys it would have used; how many."""
    rows = await conn.fetch(query("saga_keys.sql", "steps_without_keys"))
    if not rows:
        return 0
    secret = legacy_secret(settings)
    keys = [call_keys(secret, r["tenant_id"], r["order_id"], r["plan_id"], r["step_name"]) for r in rows]
    await conn.execute(
        query("saga_keys.sql", "fill_keys"),
        [r["tenant_id"] for r in rows],
        [r["order_id"] for r in rows],
        [r["seq"] for r in rows],
        [f for f, _ in keys],
        [c for _, c in keys],
    )
    return len(rows)
