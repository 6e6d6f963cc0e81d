"""The remover: finished orders leave NEXUS_RETENTION_S after they finished, with everything about them.

One pass (`remove_due`), in one short transaction: take at most `retention_batch` finished orders past their
tenant's period (oldest first, FOR UPDATE SKIP LOCKED: several removers share the work), keep those whose
advisory lock is free (the gateway's per-order lock: a step arriving meanwhile waits and is then decided from
the marker), write their removal markers (how their deliveries ended summarised by `core.delivery.summarise`
from the counts read with the locks), then remove their rows table by table: delivery attempts,
deliveries, outbox, buffered steps, rejected steps, approvals, decisions-topic rows, sagas (and their steps),
plans, numbered-step verdicts, dead letters once redriven or older than the period, and the order. An order
with a pending delivery, an open saga or a pending approval is never taken. The decision log is not touched
here: with `NEXUS_AUDIT_ARCHIVE_DIR` set, each loop then trims it (`nexus.audit.archive.trim_log`: removed
orders' chains leave whole into archive segments); without one it is kept whole (docs/retention.md).

Then the same loop removes dead letters of orders that have no row, older than the period, and markers kept
longer than NEXUS_REMOVED_ORDER_MEMORY_S, each in bounded batches, and publishes how old the oldest finished
order is (`nexus_retention_oldest_finished_seconds`) and how late the most overdue one is. Through a backlog
the loop works only the share NEXUS_RETENTION_DUTY of its time (`nexus.retention.pacing`): after each batch it
pauses in proportion to the batch's time, so wrk's events/s and p99 stay close to the remover idle.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging

import asyncpg

from nexus import metrics
from nexus.audit.archive import trim_log
from nexus.core.delivery import summarise
from nexus.core.process_model import ABORTED, ProcessCatalog
from nexus.core.saga import SagaStatus
from nexus.retention.pacing import Batch, paced
from nexus.settings import Settings
from nexus.store.database import Database
from nexus.store.errors import wrap_db_errors
from nexus.store.queries import query

log = logging.getLogger(__name__)

# The order's rows, children before what they reference (deliveries before outbox, everything before orders):
# the tables whose rows carry tenant_id and order_id go by one statement (`delete_order_rows`); deliveries
# carry neither and go by their outbox.
REMOVED_TABLES = (
    "delivery_attempts",
    "deliveries",
    "outbox",
    "pending_events",
    "rejected_events",
    "approvals",
    "decisions_outbox",
    "sagas",
    "plans",
    "plan_steps",
)
CLOSED_SAGAS = [s.value for s in SagaStatus if not s.open]


@dataclasses.dataclass(frozen=True, slots=True)
class Terminal:
    """The finished states of each process the catalog knows, as the queries' two arrays: a state terminal in
    every registered version of its process (so an order pinned to a version the catalog does not hold, or
    no longer holds, is finished by a state every version agrees ends it; `aborted` always does)."""

    processes: list[str]
    statuses: list[str]

    @classmethod
    def of(cls, catalog: ProcessCatalog) -> Terminal:
        by_name: dict[str, frozenset[str]] = {}
        for (name, _), process in sorted(catalog.versions.items()):
            states = process.terminal_states | {ABORTED}
            by_name[name] = by_name[name] & states if name in by_name else states
        pairs = sorted((name, status) for name, states in by_name.items() for status in states)
        return cls([p for p, _ in pairs], [s for _, s in pairs])

    def args(self) -> tuple[list[str], list[str]]:
        return self.processes, self.statuses


@dataclasses.dataclass
class Removal:
    """What one pass removed: the orders, and the rows per table."""

    orders: int = 0
    rows: dict[str, int] = dataclasses.field(default_factory=dict)


class RetentionRemover:
    """Removes finished orders past their retention period, forever (`run`), or one pass at a time."""

    def __init__(self, db: Database, settings: Settings, catalog: ProcessCatalog) -> None:
        self.db = db
        self.settings = settings
        self.terminal = Terminal.of(catalog)

    async def remove_due(self) -> Removal:
        """One batch of due orders removed, in one transaction."""
        removal = Removal()
        with wrap_db_errors():
            async with self.db.pool.acquire() as conn, conn.transaction():
                due = await conn.fetch(
                    query("retention.sql", "due_orders"),
                    *self.terminal.args(),
                    self.settings.retention_batch,
                    self.settings.retention_s,
                    CLOSED_SAGAS,
                )
                if not due:
                    return removal
                free = await conn.fetch(
                    query("retention.sql", "lock_removable"),
                    [r["tenant_id"] for r in due],
                    [r["order_id"] for r in due],
                )
                if free:
                    await self._remove(conn, free, removal)
        metrics.RETENTION_REMOVED.inc(removal.orders)
        return removal

    async def _remove(self, conn: asyncpg.Connection, free: list[asyncpg.Record], removal: Removal) -> None:
        """The locked orders' markers written (their deliveries summarised by the core), then their rows removed."""
        tenants = [r["tenant_id"] for r in free]
        orders = [r["order_id"] for r in free]
        counts = [(r["delivered"], r["dead"], r["pending"]) for r in free]
        await conn.execute(
            query("retention.sql", "insert_markers"),
            tenants,
            orders,
            [summarise(delivered=d, dead=x, pending=p).value for d, x, p in counts],
            [d for d, _, _ in counts],
            [x for _, x, _ in counts],
            [p for _, _, p in counts],
        )
        for table in REMOVED_TABLES:
            removal.rows[table] = await _delete(conn, table, tenants, orders)
        status = await conn.execute(
            query("retention.sql", "delete_dead_letters"), tenants, orders, self.settings.retention_s
        )
        removal.rows["dead_letters"] = _count(status)
        removal.orders = await _delete(conn, "orders", tenants, orders)
        removal.rows["orders"] = removal.orders

    async def remove_strays(self) -> int:
        """Dead letters of orders without a row, older than the period, and expired markers: one batch each."""
        batch = self.settings.retention_batch
        dead = await self.db.execute(query("retention.sql", "stray_dead_letters"), self.settings.retention_s, batch)
        markers = await self.db.execute(
            query("retention.sql", "expire_markers"), self.settings.removed_order_memory_s, batch
        )
        return _count(dead) + _count(markers)

    async def publish(self) -> tuple[float, float]:
        """Set the retention gauges; returns (oldest finished, most overdue) in seconds."""
        row = await self.db.fetchrow(
            query("retention.sql", "oldest_finished"), *self.terminal.args(), self.settings.retention_s
        )
        oldest, overdue = (row["oldest_s"], row["overdue_s"]) if row is not None else (0.0, 0.0)
        metrics.RETENTION_OLDEST_FINISHED.set(oldest)
        metrics.RETENTION_OVERDUE.set(max(0.0, overdue))
        return oldest, overdue

    async def stats(self) -> dict[str, float | int]:
        """What `nexus db stats` prints of retention (and the gauges, set on the way)."""
        oldest, overdue = await self.publish()
        markers = await self.db.fetchval(query("retention.sql", "marker_counts"))
        return {
            "retention_s": self.settings.retention_s,
            "oldest_finished_s": round(oldest, 3),
            "overdue_s": round(max(0.0, overdue), 3),
            "removed_order_markers": markers,
        }

    async def trim(self, most_passes: int = 100) -> int:
        """Trim the decision log into the archive (nothing without `audit_archive_dir`) until a pass trims
        nothing, at most `most_passes` passes; the chains and checkpoints trimmed."""
        trimmed = 0
        for _ in range(most_passes):
            report = await trim_log(
                self.db.pool,
                archive_dir=self.settings.audit_archive_dir,
                retention_s=self.settings.retention_s,
                batch=self.settings.retention_batch,
            )
            done = report.chains_removed + report.chains_cut + report.checkpoints
            trimmed += done
            if not done:
                break
        return trimmed

    async def drain(self) -> list[Batch]:
        """Due orders removed batch by batch until none is left, each batch followed by its pause
        (`retention_duty`, nexus.retention.pacing); the batches."""
        return await paced(self._remove_logged, self.settings.retention_duty)

    async def _remove_logged(self) -> int:
        removal = await self.remove_due()
        if removal.orders:
            log.info(
                "finished orders removed",
                extra={"action": "retention_remove", "count": removal.orders, "rows": removal.rows},
            )
        return removal.orders

    async def run(self) -> None:
        """Remove due orders until none is left, then strays and markers (both paced by `retention_duty`),
        publish the gauges, wait `retention_sweep_s`; forever. A failed pass is logged and tried again at the
        next interval."""
        while True:
            try:
                await self.drain()
                await paced(self.remove_strays, self.settings.retention_duty)
                await self.trim()
                await self.publish()
            except Exception:
                log.warning("retention pass failed", exc_info=True, extra={"action": "retention_remove"})
            await asyncio.sleep(self.settings.retention_sweep_s)


async def _delete(conn: asyncpg.Connection, table: str, tenants: list[str], orders: list[str]) -> int:
    """The orders' rows of one of REMOVED_TABLES (or orders) deleted; how many."""
    if table == "deliveries":
        return _count(await conn.execute(query("retention.sql", "delete_deliveries"), tenants, orders))
    removed: int = await conn.fetchval(query("retention.sql", "delete_order_rows"), tenants, orders, table)
    return removed


def _count(status: str) -> int:
    """The row count of a command status (`DELETE 12`)."""
    return int(status.rsplit(" ", 1)[-1])


async def registered_catalog(db: Database) -> ProcessCatalog:
    """Every process version registered in the database (what orders are pinned to), without registering."""
    from nexus.core.process_compile import compile_definition

    rows = await db.fetch(query("processes.sql", "all_processes"))
    return ProcessCatalog.of(compile_definition(r["body"], judge_cost=False) for r in rows)
