"""The quotas from the command line: `nexus tenants set-limit T --live-orders N ...` and `nexus tenants list`,
and `nexus keys create` refused (exit 1) beyond a tenant's active_keys quota."""

from __future__ import annotations

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
