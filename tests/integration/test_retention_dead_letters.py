"""Retention of dead letters on a real PostgreSQL: every dead letter no order row names (no order id, an order
that never started, no known tenant) leaves once older than its tenant's period; a live order's stay."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from nexus.core.decide.items import Incoming
from nexus.gateway import Gateway
from nexus.processes import builtin_catalog
from nexus.retention.remover import RetentionRemover
from nexus.settings import Settings
from nexus.store.database import Database
from nexus_wire.codes import Decision
from tests.factories import step_json


def remover(db: Database, settings: Settings, **overrides: Any) -> RetentionRemover:
    return RetentionRemover(db, settings.replace(**{"retention_s": 3600, **overrides}), builtin_catalog())


async def dead_letter(db: Database, tenant: str | None, order: str | None, *, age_s: int = 7200) -> int:
    """A dead letter of `tenant` naming `order` (or none), written `age_s` ago; its id."""
    dead_id: int = await db.fetchval(
        "INSERT INTO dead_letters (source, code, error, order_id, payload, tenant_id, created_at)"
        " VALUES ('http', 'PARSE_ERROR', 'bad', $1, '{', $2, now() - make_interval(secs => $3)) RETURNING id",
        order,
        tenant,
        age_s,
    )
    return dead_id


async def remaining(db: Database, ids: list[int]) -> set[int]:
    rows = await db.fetch("SELECT id FROM dead_letters WHERE id = ANY($1::bigint[])", ids)
    return {r["id"] for r in rows}


async def drain(worker: RetentionRemover) -> int:
    """Stray passes until one removes nothing; how many rows they removed."""
    removed = 0
    while done := await worker.remove_strays():
        removed += done
    return removed


async def test_dead_letters_no_order_row_names_leave_and_a_live_orders_stay(db: Database, settings: Settings) -> None:
    """Past the period, dead letters with no order id, an unknown order or no tenant leave; a live order's and
    a young one stay."""
    [outcome] = await Gateway(db).submit([Incoming.parse(json.dumps(step_json("o-dl-live", "p-dl-live", 1)))])
    assert outcome.decision is Decision.APPLY
    no_order = await dead_letter(db, "default", None)
    unknown = await dead_letter(db, "default", "o-dl-never")
    no_tenant = await dead_letter(db, None, None)
    live = await dead_letter(db, "default", "o-dl-live")
    young = await dead_letter(db, "default", None, age_s=60)
    await drain(remover(db, settings))
    assert await remaining(db, [no_order, unknown, no_tenant, live, young]) == {live, young}


async def test_a_tenants_own_period_keeps_or_removes_its_dead_letters(db: Database, settings: Settings) -> None:
    """A tenant whose retention_s exceeds its dead letter's age keeps it while the default removes another
    tenant's; a shorter retention_s removes it though the default period would keep it."""
    await db.execute(
        "INSERT INTO tenant_limits (tenant_id, max_order_amount, retention_s) VALUES ('acme', 1000, 86400)"
    )
    acme = await dead_letter(db, "acme", None)
    other = await dead_letter(db, "other", "o-dl-gone")
    await drain(remover(db, settings))
    assert await remaining(db, [acme, other]) == {acme}
    await db.execute("UPDATE tenant_limits SET retention_s = 60 WHERE tenant_id = 'acme'")
    await drain(remover(db, settings, retention_s=864000))
    assert await remaining(db, [acme]) == set()


async def test_two_removers_share_the_dead_letters_in_bounded_batches(db: Database, settings: Settings) -> None:
    """Two removers in batches of 7 remove 50 stray dead letters between them, each once, no pass over 7."""
    ids = [await dead_letter(db, "default", None) for _ in range(50)]
    workers = [remover(db, settings, retention_batch=7, removed_order_memory_s=864000) for _ in range(2)]
    first = await workers[0].remove_strays()
    assert first == 7
    counts = await asyncio.gather(*(drain(w) for w in workers))
    assert first + sum(counts) == 50
    assert await remaining(db, ids) == set()
