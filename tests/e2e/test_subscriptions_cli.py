"""`nexus subscriptions add` says whose notifications a subscription receives: one tenant's, or every tenant's."""

from __future__ import annotations

import json
import subprocess
import sys

from nexus.settings import Settings
from nexus.store.database import Database
from tests.conftest import ROOT, settings_env


def nexus_subscriptions(settings: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nexus_cli", "subscriptions", *args],
        env={**settings_env(settings), "NEXUS_ALLOW_PRIVATE_URLS": "true"},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


async def test_add_requires_a_tenant_or_all_tenants_and_records_the_choice(db: Database, settings: Settings) -> None:
    """Without `--tenant` or `--all-tenants` nothing is created (exit 2, the message names both); with
    `--tenant acme` the subscription is acme's, with `--all-tenants` it spans every tenant."""
    refused = nexus_subscriptions(settings, "add", "hooks", "http://127.0.0.1:9/h")
    assert refused.returncode == 2
    assert "--tenant" in refused.stderr and "--all-tenants" in refused.stderr
    assert await db.fetchval("SELECT count(*) FROM subscriptions") == 0

    both = nexus_subscriptions(settings, "add", "hooks", "http://127.0.0.1:9/h", "--tenant", "a", "--all-tenants")
    assert both.returncode == 2

    one = nexus_subscriptions(settings, "add", "acme-hooks", "http://127.0.0.1:9/a", "--tenant", "acme")
    every = nexus_subscriptions(settings, "add", "ops-hooks", "http://127.0.0.1:9/o", "--all-tenants")
    assert (one.returncode, every.returncode) == (0, 0), one.stderr + every.stderr
    assert json.loads(one.stdout)["name"] == "acme-hooks"
    rows = await db.fetch("SELECT name, tenant_id FROM subscriptions ORDER BY name")
    assert [tuple(r) for r in rows] == [("acme-hooks", "acme"), ("ops-hooks", None)]
