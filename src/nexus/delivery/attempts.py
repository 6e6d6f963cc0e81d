"""The record of every webhook delivery attempt, kept for a bounded time.

The dispatcher's outcome batch writes one `delivery_attempts` row per counted attempt in the transaction
that records the attempts' outcomes (`OutcomeWriter.write`, ``record_attempts`` in delivery.sql). This
module bounds the table: a process that dispatches deletes, every `delivery_attempts_prune_s`, the
attempts older than `delivery_attempts_retention_s`, in short statements of at most `PRUNE_BATCH` rows.
"""

from __future__ import annotations

import asyncio
import logging

from nexus.settings import Settings
from nexus.store.database import Database
from nexus.store.errors import wrap_db_errors
from nexus.store.queries import query

log = logging.getLogger(__name__)

PRUNE_BATCH = 5000


async def prune_attempts(db: Database, retention_s: float, batch: int = PRUNE_BATCH) -> int:
    """Delete the attempts older than `retention_s`; how many went."""
    removed = 0
    while True:
        with wrap_db_errors():
            status = await db.execute(query("delivery.sql", "prune_attempts"), retention_s, batch)
        count = int(status.rsplit(" ", 1)[-1])
        removed += count
        if count < batch:
            return removed


async def prune_loop(db: Database, settings: Settings) -> None:
    """Prune forever (one of `nexus serve`'s services when it dispatches); a failed round waits for the next."""
    while True:
        try:
            removed = await prune_attempts(db, settings.delivery_attempts_retention_s)
            if removed:
                log.info("delivery attempts pruned", extra={"action": "prune_attempts", "removed": removed})
        except Exception:
            log.warning("pruning delivery attempts failed", exc_info=True, extra={"action": "prune_attempts"})
        await asyncio.sleep(settings.delivery_attempts_prune_s)
