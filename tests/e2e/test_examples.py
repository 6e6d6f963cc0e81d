"""The SDK's examples (examples/*.py), run as a user runs them, against a real `nexus serve`, with an agent
key of a tenant that is not `default`."""

from __future__ import annotations

import os
import subprocess
import sys

import asyncpg
import pytest

from nexus.auth.keys import create_key
from nexus.auth.roles import Role
from nexus.settings import Settings
from nexus.store.database import Database
from tests.conftest import ROOT


async def _agent_key(settings: Settings, tenant: str) -> str:
    db = await Database(settings).open(migrate=False)
    try:
        _, key = await create_key(db, tenant, frozenset({Role.AGENT}))
    finally:
        await db.close()
    return key


def _run(example: str, base: str, key: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEXUS_")}
    env |= {"NEXUS_GATEWAY_URL": base, "NEXUS_API_KEY": key, "PYTHONPATH": str(ROOT / "src")}
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / example)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize("example", ["sync_agent.py", "async_agent.py"])
async def test_an_example_agent_completes_its_order(start_gateway, settings: Settings, example: str) -> None:  # type: ignore[no-untyped-def]
    """The example runs a full order for tenant acme: five steps numbered 1..5 by the gateway (the sync one
    corrects a REJECTED payment, the async one sees a retried call answered DUPLICATE), ending completed."""
    _, base = start_gateway("--no-dispatcher")
    out = _run(example, base, await _agent_key(settings, "acme"))
    lines = out.strip().splitlines()
    assert lines[-1].endswith(": completed"), out
    assert "OrderCompleted: APPLY as seq 5, order completed" in out
    if example == "sync_agent.py":
        assert "PaymentProcessed: REJECTED CHECK_FAILED" in out
    else:
        assert "OrderCreated: APPLY, retried: DUPLICATE (first APPLY)" in out
    order_id = lines[-1].split(":")[0]
    conn = await asyncpg.connect(settings.database_url)
    try:
        tenant = await conn.fetchval("SELECT tenant_id FROM orders WHERE order_id = $1", order_id)
    finally:
        await conn.close()
    assert tenant == "acme"
