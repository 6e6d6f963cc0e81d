"""Erasing a tenant: every row it wrote leaves, and the decision log still verifies.

In order: the tenant's keys are revoked, and the eraser waits the auth cache's TTL so no gateway still accepts
them (nothing new arrives while rows leave); a signed erasure record names the last head of each of the tenant's
chains (core/audit_erasure.py), so checkpoints that signed those heads still verify; then every table with a
`tenant_id` column (found from the catalog, so a table added later is not forgotten), and the rows of tables
without one that reference the tenant's rows, are emptied of the tenant in passes until a pass removes nothing
(foreign keys decide the order; a pass that a reference refuses is rolled back alone and tried again after the
others). What remains is reported: the erasure record itself (kept, it is what verification reads) and any row a
pass could not remove.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import json
from collections.abc import Callable

import asyncpg
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from nexus.audit.signing import signature_of
from nexus.core.audit_chain import format_at
from nexus.core.audit_erasure import Erasure, erasure_digest
from nexus.core.audit_verify import Head
from nexus.store.database import Database
from nexus.store.errors import wrap_db_errors
from nexus.store.queries import query

_MAX_PASSES = 20


@dataclasses.dataclass
class ErasureReport:
    tenant_id: str
    keys_revoked: int = 0
    erasure_id: int | None = None
    chains: int = 0
    removed: dict[str, int] = dataclasses.field(default_factory=dict)
    remaining: dict[str, int] = dataclasses.field(default_factory=dict)
    passes: int = 0

    def as_json(self) -> dict[str, object]:
        return dataclasses.asdict(self)


def sign_erasure(key: Ed25519PrivateKey, at: dt.datetime, tenant_id: str, heads: list[Head]) -> Erasure:
    stamp, ordered = format_at(at), sorted(heads, key=lambda h: (h.tenant_id, h.order_id))
    digest = erasure_digest(stamp, tenant_id, ordered)
    return Erasure(stamp, tuple(ordered), digest, *signature_of(key, digest), tenant_id=tenant_id)


async def erase_tenant(
    db: Database,
    tenant_id: str,
    key: Ed25519PrivateKey,
    *,
    cache_ttl_s: float,
    progress: Callable[[str], None] = lambda _: None,
) -> ErasureReport:
    """Erase every row of `tenant_id` (see the module's docstring); returns what left, table by table."""
    report = ErasureReport(tenant_id)
    report.keys_revoked = len(await db.fetch(query("erase.sql", "revoke_tenant_keys"), tenant_id))
    progress(f"{report.keys_revoked} key(s) revoked; waiting {cache_ttl_s:g} s for every gateway's auth cache")
    await asyncio.sleep(cache_ttl_s + 0.5)
    with wrap_db_errors():
        async with db.pool.acquire() as conn:
            report.erasure_id, report.chains = await _record_erasure(conn, tenant_id, key)
            progress(f"erasure record {report.erasure_id} signed over {report.chains} chain(s)")
            tables = [r["table_name"] for r in await conn.fetch(query("erase.sql", "tenant_tables"))]
            dependents = await conn.fetch(query("erase.sql", "dependent_tables"))
            while report.passes < _MAX_PASSES:
                report.passes += 1
                removed = await _one_pass(conn, tenant_id, tables, dependents, report.removed)
                progress(f"pass {report.passes}: {removed} row(s) removed")
                if removed == 0:
                    break
            for table in tables:
                left = await conn.fetchval(f'SELECT count(*) FROM "{table}" WHERE tenant_id = $1', tenant_id)
                if left:
                    report.remaining[table] = left
    return report


async def _record_erasure(conn: asyncpg.Connection, tenant_id: str, key: Ed25519PrivateKey) -> tuple[int, int]:
    rows = await conn.fetch(query("erase.sql", "tenant_heads"), tenant_id)
    heads = [Head(r["tenant_id"], r["order_id"], r["position"], bytes(r["hash"])) for r in rows]
    erasure = sign_erasure(key, dt.datetime.now(dt.UTC), tenant_id, heads)
    erasure_id: int = await conn.fetchval(
        query("erase.sql", "insert_erasure"),
        dt.datetime.fromisoformat(erasure.at),
        tenant_id,
        json.dumps([h.as_json() for h in erasure.heads]),
        erasure.digest,
        erasure.signature,
        erasure.key_id,
        erasure.public_key,
    )
    return erasure_id, len(heads)


async def _one_pass(
    conn: asyncpg.Connection,
    tenant_id: str,
    tables: list[str],
    dependents: list[asyncpg.Record],
    removed: dict[str, int],
) -> int:
    """Each dependent table's rows that reference the tenant's rows, then each table's rows of the tenant, each
    in a transaction of its own (a reference that refuses one leaves it for the next pass)."""
    statements: list[tuple[str, str]] = []
    for dep in dependents:
        child_cols = ", ".join(f'"{c}"' for c in dep["child_columns"])
        parent_cols = ", ".join(f'"{c}"' for c in dep["parent_columns"])
        statements.append(
            (
                dep["child"],
                f'DELETE FROM "{dep["child"]}" WHERE ({child_cols}) IN '
                f'(SELECT {parent_cols} FROM "{dep["parent"]}" WHERE tenant_id = $1)',
            )
        )
    statements += [(table, f'DELETE FROM "{table}" WHERE tenant_id = $1') for table in tables]
    total = 0
    for table, sql in statements:
        try:
            async with conn.transaction():
                await conn.execute("SET LOCAL nexus.remover = 'on'")  # past the decision log's trigger
                status = await conn.execute(sql, tenant_id)
        except asyncpg.ForeignKeyViolationError:
            continue  # still referenced: the referencing rows leave in this pass, this one in the next
        count = int(status.rsplit(" ", 1)[-1])
        if count:
            removed[table] = removed.get(table, 0) + count
            total += count
    return total
