"""Retention on a real PostgreSQL: a finished order past its period leaves with every row about it, its marker
stays and answers its late steps, open work keeps an order, markers expire, and two removers share the work."""

from __future__ import annotations

import asyncio
import base64
import json
from pathlib import Path
from typing import Any

import pytest

from nexus.audit.archive import load_trimmed, verify_trimmed
from nexus.audit.signing import parse_signing_key, write_checkpoint
from nexus.core.decide.items import Incoming
from nexus.gateway import Gateway
from nexus.processes import builtin_catalog
from nexus.retention.remover import REMOVED_TABLES, RetentionRemover
from nexus.settings import Settings
from nexus.store.database import Database
from nexus_wire.codes import Decision
from tests.conftest import settings_env
from tests.factories import abort_json, plan_json, step_json
from tests.helpers import nexus_command

ORDER_TABLES = (*REMOVED_TABLES, "orders")
KEY = parse_signing_key(base64.b64encode(bytes(range(1, 33))).decode())


def remover(db: Database, settings: Settings, **overrides: Any) -> RetentionRemover:
    return RetentionRemover(db, settings.replace(**{"retention_s": 3600, **overrides}), builtin_catalog())


async def submit(gateway: Gateway, events: list[dict[str, Any]]) -> list[Any]:
    return await gateway.submit([Incoming.parse(json.dumps(e)) for e in events])


async def finished_orders(db: Database, gateway: Gateway, prefix: str, n: int, *, age_s: int = 7200) -> list[str]:
    """`n` completed five-step orders that finished `age_s` ago (their last change moved back in time)."""
    orders = [f"{prefix}-{i}" for i in range(n)]
    for order in orders:
        await submit(gateway, plan_json(order, f"p-{order}", 5))
    await db.execute(
        "UPDATE orders SET updated_at = now() - make_interval(secs => $2),"
        " finished_at = now() - make_interval(secs => $2) WHERE order_id = ANY($1::text[])",
        orders,
        age_s,
    )
    return orders


async def rows_of(db: Database, order: str) -> dict[str, int]:
    """Rows about `order` in each table retention empties (deliveries and attempts by their notification)."""
    counts = {}
    for table in ORDER_TABLES:
        if table == "deliveries":
            sql = "SELECT count(*) FROM deliveries d JOIN outbox x ON x.id = d.outbox_id WHERE x.order_id = $1"
        else:
            sql = f"SELECT count(*) FROM {table} WHERE order_id = $1"
        counts[table] = await db.fetchval(sql, order)
    return counts


async def subscribe(db: Database) -> None:
    """A subscription (never reached: the tests settle its deliveries themselves)."""
    await db.execute(
        "INSERT INTO subscriptions (name, url, secret, tenant_id) VALUES ('r', 'http://127.0.0.1:9/', 'whsec_eA==', "
        "NULL)"
    )


async def test_a_finished_order_past_its_period_leaves_with_every_row_and_a_marker(
    db: Database, settings: Settings
) -> None:
    """A completed order (delivered) past its period: every table's rows about it leave, its marker says how it ended;
    an order still inside its period stays."""
    gateway = Gateway(db)
    await subscribe(db)
    [old] = await finished_orders(db, gateway, "o-ret-old", 1)
    [young] = await finished_orders(db, gateway, "o-ret-young", 1, age_s=60)
    await db.execute("UPDATE deliveries SET state = 'delivered', delivered_at = now()")
    assert (await rows_of(db, old))["outbox"] == 5
    removal = await remover(db, settings).remove_due()
    assert removal.orders == 1
    assert set((await rows_of(db, old)).values()) == {0}
    assert (await rows_of(db, young))["orders"] == 1
    marker = await db.fetchrow("SELECT * FROM removed_orders WHERE order_id = $1", old)
    assert marker is not None
    assert (marker["final_status"], marker["last_seq"], marker["notifications"]) == ("completed", 5, 5)
    assert (marker["delivery_state"], marker["delivered"], marker["dead"]) == ("delivered", 5, 0)
    assert await db.fetchval("SELECT count(*) FROM decision_log WHERE order_id = $1", old) > 0  # kept whole


async def test_a_tenants_own_period_overrides_the_default(db: Database, settings: Settings) -> None:
    """A tenant whose retention_s is longer than the order's age keeps it; the default would have removed it."""
    gateway = Gateway(db)
    [order] = await finished_orders(db, gateway, "o-ret-tenant", 1)
    await db.execute(
        "INSERT INTO tenant_limits (tenant_id, max_order_amount, retention_s) VALUES ('default', 1000, 86400)"
    )
    assert (await remover(db, settings).remove_due()).orders == 0
    await db.execute("UPDATE tenant_limits SET retention_s = 60")
    assert (await remover(db, settings, retention_s=864000).remove_due()).orders == 1
    assert (await rows_of(db, order))["orders"] == 0


@pytest.mark.parametrize("guard", ["delivery", "effect", "approval"])
async def test_open_work_keeps_a_finished_order(db: Database, settings: Settings, guard: str) -> None:
    """A pending delivery, an open saga or a pending approval keeps a finished order past its period; once it
    closes, the order leaves."""
    gateway = Gateway(db)
    if guard == "delivery":
        await subscribe(db)
    [order] = await finished_orders(db, gateway, f"o-ret-{guard}", 1)
    if guard == "effect":
        await db.execute(
            "INSERT INTO sagas (tenant_id, order_id, plan_id, process, status) VALUES ('default', $1, 'p', 'order', "
            "'COMPENSATING')",
            order,
        )
    elif guard == "approval":
        await db.execute(
            "INSERT INTO approvals (approval_id, tenant_id, order_id, event_id, plan_id, seq_id, event_type, envelope)"
            " VALUES (gen_random_uuid(), 'default', $1, gen_random_uuid(), 'p', 6, 'X', '{}')",
            order,
        )
    assert (await remover(db, settings).remove_due()).orders == 0
    assert (await rows_of(db, order))["orders"] == 1
    close = {
        "delivery": "UPDATE deliveries SET state = 'delivered'",
        "effect": "UPDATE sagas SET status = 'COMPENSATED'",
        "approval": "UPDATE approvals SET status = 'expired'",
    }[guard]
    await db.execute(close)
    assert (await remover(db, settings).remove_due()).orders == 1
    assert set((await rows_of(db, order)).values()) == {0}


async def test_steps_of_a_removed_order_are_answered_from_its_marker(db: Database, settings: Settings) -> None:
    """After removal: a replayed step is DUPLICATE, a later one and a new OrderCreated of another plan DISCARD
    ORDER_REMOVED, an abort DUPLICATE; nothing is written again (no order row, no notification)."""
    gateway = Gateway(db)
    [order] = await finished_orders(db, gateway, "o-ret-replay", 1)
    assert (await remover(db, settings).remove_due()).orders == 1
    outcomes = await submit(
        gateway,
        [
            step_json(order, f"p-{order}", 3),
            step_json(order, f"p-{order}", 6),
            step_json(order, "p-other", 1),
            abort_json(order, f"p-{order}"),
        ],
    )
    got = [(o.decision, o.code.value if o.code else None) for o in outcomes]
    assert got == [
        (Decision.DUPLICATE, None),
        (Decision.DISCARD, "ORDER_REMOVED"),
        (Decision.DISCARD, "ORDER_REMOVED"),
        (Decision.DUPLICATE, None),
    ]
    assert set((await rows_of(db, order)).values()) == {0}


async def test_steps_of_a_removed_order_answer_the_order_its_marker_keeps(db: Database, settings: Settings) -> None:
    """After removal, a replayed step and a later one are answered with the order as its marker keeps it: its
    final status and last_seq."""
    gateway = Gateway(db)
    [order] = await finished_orders(db, gateway, "o-ret-state", 1)
    assert (await remover(db, settings).remove_due()).orders == 1
    outcomes = await submit(gateway, [step_json(order, f"p-{order}", 3), step_json(order, f"p-{order}", 6)])
    assert [(o.decision, o.status, o.last_seq) for o in outcomes] == [
        (Decision.DUPLICATE, "completed", 5),
        (Decision.DISCARD, "completed", 5),
    ]


async def test_markers_expire_and_the_order_id_is_free_again(db: Database, settings: Settings) -> None:
    """A marker older than NEXUS_REMOVED_ORDER_MEMORY_S leaves; the order id then starts a new order."""
    gateway = Gateway(db)
    [order] = await finished_orders(db, gateway, "o-ret-expire", 1)
    worker = remover(db, settings, removed_order_memory_s=600)
    assert (await worker.remove_due()).orders == 1
    assert await worker.remove_strays() == 0  # the marker is young
    await db.execute("UPDATE removed_orders SET removed_at = now() - interval '1 hour'")
    assert await worker.remove_strays() == 1
    assert await db.fetchval("SELECT count(*) FROM removed_orders") == 0
    [outcome] = await submit(gateway, [step_json(order, "p-again", 1)])
    assert outcome.decision is Decision.APPLY


async def test_two_removers_at_once_remove_each_order_once(db: Database, settings: Settings) -> None:
    """Two removers racing over 60 due orders in batches of 7 remove all of them, each once (one marker each)."""
    gateway = Gateway(db)
    orders = await finished_orders(db, gateway, "o-ret-race", 60)
    workers = [remover(db, settings, retention_batch=7) for _ in range(2)]

    async def drain(worker: RetentionRemover) -> int:
        removed = 0
        while (removal := await worker.remove_due()).orders:
            removed += removal.orders
        return removed

    counts = await asyncio.gather(*(drain(w) for w in workers))
    assert sum(counts) == 60
    assert await db.fetchval("SELECT count(*) FROM removed_orders WHERE order_id = ANY($1::text[])", orders) == 60
    assert await db.fetchval("SELECT count(*) FROM orders") == 0


async def test_the_gauges_say_how_old_and_how_late(db: Database, settings: Settings) -> None:
    """The oldest finished order's age and how far past its period it is, then 0 overdue once removed."""
    gateway = Gateway(db)
    await finished_orders(db, gateway, "o-ret-gauge", 1)
    worker = remover(db, settings)
    oldest, overdue = await worker.publish()
    assert 7100 < oldest < 7300 and 3500 < overdue < 3700
    await worker.remove_due()
    assert await worker.publish() == (0.0, 0.0)


@pytest.mark.processes
async def test_nexus_tenants_set_limit_retention_s_and_list(db: Database, settings: Settings) -> None:
    """`nexus tenants set-limit T --retention-s N` records the tenant's period, `list` shows it, 0 removes it."""
    env = settings_env(settings)
    said = nexus_command("tenants", "set-limit", "acme", "--retention-s", "120", env=env)
    assert "tenant acme: retention_s 120" in said
    assert await db.fetchval("SELECT retention_s FROM tenant_limits WHERE tenant_id = 'acme'") == 120
    assert "acme: max_order_amount 100000, retention_s 120" in nexus_command("tenants", "list", env=env)
    nexus_command("tenants", "set-limit", "acme", "--retention-s", "0", env=env)
    assert await db.fetchval("SELECT retention_s FROM tenant_limits WHERE tenant_id = 'acme'") is None


async def test_an_order_pinned_to_a_version_the_catalog_lacks_is_removed(db: Database, settings: Settings) -> None:
    """A completed order of `order` v1 (the catalog holds v2 only) leaves: `completed` ends every version."""
    gateway = Gateway(db)
    [order] = await finished_orders(db, gateway, "o-ret-v1", 1)
    await db.execute("UPDATE orders SET process_version = 1 WHERE order_id = $1", order)
    assert (await remover(db, settings).remove_due()).orders == 1


async def test_with_an_archive_the_removers_loop_trims_the_removed_orders_chain(
    db: Database, settings: Settings, tmp_path: Path
) -> None:
    """With NEXUS_AUDIT_ARCHIVE_DIR set, the remover's loop (remove, then trim) takes a removed order's decision-log
    chain into an archive segment and the log still verifies from the anchors; without it the chain stays."""
    gateway = Gateway(db)
    [order] = await finished_orders(db, gateway, "o-ret-arch", 1)
    assert await write_checkpoint(db, KEY) is not None  # a checkpoint signs the chain's last record
    await asyncio.sleep(1.2)  # the chain's last record is older than the period (1 s)
    kept = remover(db, settings, retention_s=1)
    assert (await kept.remove_due()).orders == 1
    assert await kept.trim() == 0  # no archive directory: the log is kept whole
    assert await db.fetchval("SELECT count(*) FROM decision_log WHERE order_id = $1", order) == 5
    archived = remover(db, settings, retention_s=1, audit_archive_dir=tmp_path)
    assert await archived.trim() >= 1
    assert await db.fetchval("SELECT count(*) FROM decision_log WHERE order_id = $1", order) == 0
    assert list(tmp_path.glob("default/*.jsonl"))
    result = verify_trimmed(await load_trimmed(db), tmp_path)
    assert result.ok, result.finding
