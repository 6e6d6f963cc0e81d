"""`nexus tenants erase`: every row of one tenant leaves (every table with a tenant column, found from the catalog),
the other tenant's rows stay, the erased tenant's keys are refused, and the decision log still verifies, its signed
checkpoints covered by the signed erasure record; a chain removed without one still fails as DELETED."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from nexus.audit.erase import erase_tenant
from nexus.audit.signing import load_signing_key, write_checkpoint
from nexus.audit.verify import load, read_export, verify, write_export
from nexus.auth.keys import create_key
from nexus.auth.roles import Role
from nexus.gateway import Gateway
from nexus.ingress.http import create_app
from nexus.settings import Settings
from nexus.store.database import Database
from nexus.store.queries import query
from tests.conftest import settings_env
from tests.factories import plan_json

TENANTS = ("acme", "globex")


@pytest.fixture
async def api(db: Database) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(db, Gateway(db), settings=db.settings)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://api") as client:
        yield client


async def _two_tenants(db: Database, api: httpx.AsyncClient) -> dict[str, str]:
    """Each tenant: an agent key, three orders (one with a dead letter), a subscription; then a checkpoint."""
    keys = {}
    for tenant in TENANTS:
        keys[tenant] = (await create_key(db, tenant, frozenset({Role.AGENT, Role.OPERATOR}), f"{tenant}-k"))[1]
        headers = {"Authorization": f"Bearer {keys[tenant]}"}
        made = await api.post(
            "/v1/subscriptions", json={"name": "hook", "url": "http://127.0.0.1:9/h"}, headers=headers
        )
        assert made.status_code == 201, made.text
        for n in range(3):
            steps = plan_json(f"{tenant}-o{n}", f"{tenant}-p{n}", 3)
            answer = await api.post("/v1/events", json={"events": steps}, headers=headers)
            assert answer.status_code == 200, answer.text
        wrong = dict(plan_json(f"{tenant}-o0", "other-plan", 4)[3], seq_id=4)
        await api.post("/v1/events", json=wrong, headers=headers)  # PLAN_MISMATCH: a dead letter
    assert await write_checkpoint(db, load_signing_key(db.settings)) is not None
    return keys


async def _rows_of(db: Database, tenant: str) -> dict[str, int]:
    counts = {}
    for row in await db.fetch(query("erase.sql", "tenant_tables")):
        table = row["table_name"]
        counts[table] = await db.fetchval(f'SELECT count(*) FROM "{table}" WHERE tenant_id = $1', tenant)
    return {t: n for t, n in counts.items() if n}


async def test_erase_removes_every_row_of_one_tenant_and_the_log_still_verifies(
    db: Database, api: httpx.AsyncClient, tmp_path: Path
) -> None:
    """After erasing acme: no table holds an acme row, globex's rows are all there, acme's key answers 401, and the
    decision log verifies from the database and from an export, though a checkpoint signed acme's chains."""
    keys = await _two_tenants(db, api)
    globex_before = await _rows_of(db, "globex")
    assert {"orders", "decision_log", "outbox", "deliveries", "dead_letters", "api_keys"} <= set(
        await _rows_of(db, "acme")
    )

    report = await erase_tenant(db, "acme", load_signing_key(db.settings), cache_ttl_s=db.settings.auth_cache_ttl_s)

    assert await _rows_of(db, "acme") == {}
    assert report.remaining == {} and report.chains == 3
    assert report.removed["orders"] == 3 and report.removed["decision_log"] > 0
    assert await _rows_of(db, "globex") == globex_before
    refused = await api.get("/v1/orders/acme-o1", headers={"Authorization": f"Bearer {keys['acme']}"})
    assert refused.status_code == 401
    records, checkpoints, erasures = await load(db)
    assert {r.tenant_id for r in records} == {"globex"} and len(erasures) == 1
    assert verify(records, checkpoints, erasures=erasures).ok
    assert not verify(records, checkpoints).ok  # the signed erasure record is what accounts for acme's chains
    export = tmp_path / "log.jsonl"
    with export.open("w") as out:
        write_export(out, records, checkpoints, erasures)
    records, checkpoints, header_keys, erasures = read_export(export)
    assert verify(records, checkpoints, trusted=header_keys, erasures=erasures).ok


async def test_a_chain_removed_without_an_erasure_record_still_fails(db: Database, api: httpx.AsyncClient) -> None:
    """The remover's way past the append-only trigger does not make deletion silent: a checkpointed chain removed
    without a signed erasure record is DELETED; with a forged (unsigned-by-a-trusted-key) erasure too."""
    await _two_tenants(db, api)
    async with db.pool.acquire() as conn, conn.transaction():
        await conn.execute("SET LOCAL nexus.remover = 'on'")
        await conn.execute("DELETE FROM decision_log WHERE tenant_id = 'globex' AND order_id = 'globex-o1'")
    records, checkpoints, erasures = await load(db)
    result = verify(records, checkpoints, erasures=erasures)
    assert not result.ok and result.finding is not None and result.finding.fault.value == "DELETED"


async def test_the_trigger_still_refuses_a_delete_outside_the_remover(db: Database, api: httpx.AsyncClient) -> None:
    """Without `nexus.remover` set in its transaction, a DELETE of the decision log is refused as before."""
    await _two_tenants(db, api)
    from nexus.errors import NexusError

    with pytest.raises(NexusError):
        await db.execute("DELETE FROM decision_log WHERE tenant_id = 'acme'")


@pytest.mark.processes
def test_nexus_tenants_erase_needs_yes_and_prints_what_it_removed(settings: Settings) -> None:
    """`nexus tenants erase T` without --yes exits 2 and removes nothing; with it, prints the tables it emptied."""
    env = settings_env(settings)

    def nexus(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "nexus_cli", "tenants", *args], env=env, capture_output=True, text=True, check=False
        )

    refused = nexus("erase", "acme")
    assert refused.returncode == 2 and "--yes" in refused.stderr
    done = nexus("erase", "acme", "--yes")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["tenant_id"] == "acme" and report["remaining"] == {}
