"""The quotas from the command line: `nexus tenants set-limit T --live-orders N ...` and `nexus tenants list`,
and `nexus keys create` refused (exit 1) beyond a tenant's active_keys quota."""

from __future__ import annotations

import json
import subprocess
import sys

from nexus.settings import Settings
from nexus.store.database import Database
from tests.conftest import settings_env


def nexus(settings: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nexus.cli", *args],
        env=settings_env(settings),
        capture_output=True,
        text=True,
        timeout=60,
    )


async def test_set_limit_sets_quotas_and_keys_create_exits_1_beyond_one(settings: Settings, db: Database) -> None:
    """`set-limit acme 500 --active-keys 1 --live-orders 7` stores both (the amount too), `list` shows them,
    and a second `nexus keys create --tenant acme` exits 1 with the QUOTA_EXCEEDED message, storing nothing."""
    done = nexus(settings, "tenants", "set-limit", "acme", "500", "--active-keys", "1", "--live-orders", "7")
    assert done.returncode == 0, done.stderr
    assert "active_keys 1" in done.stdout and "live_orders 7" in done.stdout
    listed = nexus(settings, "tenants", "list").stdout
    assert "acme: max_order_amount 500, live_orders 7, active_keys 1" in listed, listed
    assert "active_keys 100" in listed.splitlines()[0]  # the defaults
    assert nexus(settings, "keys", "create", "--tenant", "acme", "--role", "agent").returncode == 0
    refused = nexus(settings, "keys", "create", "--tenant", "acme", "--role", "agent")
    assert refused.returncode == 1 and "tenant quota active_keys reached" in refused.stderr, refused.stderr
    assert await db.fetchval("SELECT count(*) FROM api_keys WHERE tenant_id = 'acme'") == 1
    assert nexus(settings, "tenants", "set-limit", "acme", "--live-orders", "-1").returncode == 1


async def test_recount_prints_every_tenants_usage_counted_again(settings: Settings, db: Database) -> None:
    """`nexus tenants recount` replaces drifted counts (an order inserted uncounted, bogus deltas) by the rows' count
    and prints the usage as JSON; `recount acme` touches acme's only."""
    await db.execute(
        "INSERT INTO orders (order_id, tenant_id, plan_id, status, last_seq, tombstone, outbox_count, process,"
        " process_version, facts) VALUES ('o1', 'acme', 'p', 'created', 1, false, 0, 'order', 2, '{}')"
    )
    await db.execute(
        "INSERT INTO tenant_usage VALUES ('acme', 'live_orders', 7), ('globex', 'live_orders', 3),"
        " ('globex', 'buffered_steps', 2)"
    )
    done = nexus(settings, "tenants", "recount", "acme")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"acme": {"live_orders": 1}}
    assert await db.fetchval("SELECT sum(used) FROM tenant_usage WHERE tenant_id = 'globex'") == 5
    everyone = nexus(settings, "tenants", "recount")
    assert everyone.returncode == 0, everyone.stderr
    printed = json.loads(everyone.stdout)
    assert "globex" not in printed and printed["acme"] == {"live_orders": 1}
    assert await db.fetchval("SELECT count(*) FROM tenant_usage WHERE tenant_id = 'globex'") == 0
