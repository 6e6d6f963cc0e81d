"""Decision-log actors on real PostgreSQL and a real gateway: an agent's key as `key:<id>` (its name beside
the record, outside the hash), the system's own decisions as `system:...`, key names that would read as
actors refused, and records written before actors still verifying after migration 0017."""

from __future__ import annotations

import base64
import datetime as dt
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from nexus.auth.keys import create_key
from nexus.auth.roles import Role
from nexus.core.audit_chain import Entry, place
from nexus.core.decide.items import Incoming
from nexus.gateway import Gateway
from nexus.settings import Settings
from nexus.store.database import Database
from tests.conftest import ROOT, api_headers, root_headers, settings_env
from tests.factories import step_json

pytestmark = pytest.mark.slow


@pytest.fixture
async def api(start_gateway) -> Any:  # type: ignore[no-untyped-def]
    _, base = start_gateway("--no-dispatcher")
    async with httpx.AsyncClient(base_url=base, timeout=10) as client:
        yield client


async def actors(db: Database, order_id: str) -> list[tuple[Any, ...]]:
    rows = await db.fetch(
        "SELECT decision, event_type, actor, actor_name FROM decision_log WHERE order_id = $1 ORDER BY position",
        order_id,
    )
    return [tuple(r) for r in rows]


async def test_an_agents_http_step_is_logged_as_its_key(api: httpx.AsyncClient, db: Database) -> None:
    """A step over HTTP is logged as `key:<id>` of the agent's key, its name beside it, and the history says so."""
    record, key = await create_key(db, "default", frozenset({Role.AGENT}), name="checkout-agent")
    headers = {"Authorization": f"Bearer {key}"}
    for seq in (1, 2):
        response = await api.post("/v1/events", json=step_json("o-agent", "p-agent", seq), headers=headers)
        assert response.status_code == 200, response.text
    expected = (f"key:{record.id}", "checkout-agent")
    assert [r[2:] for r in await actors(db, "o-agent")] == [expected, expected]
    history = (await api.get("/v1/orders/o-agent/history", headers=headers)).json()["items"]
    assert [(i["actor"], i["actor_name"]) for i in history] == [expected, expected]


async def test_a_numbered_step_and_its_repeat_are_logged_as_the_key(api: httpx.AsyncClient, db: Database) -> None:
    """A step proposed through `POST /v1/orders/{id}/steps` (the REST and MCP path) and its keyed repeat
    (answered DUPLICATE before the fold) are both logged as `key:<id>` with the key's name."""
    record, key = await create_key(db, "default", frozenset({Role.AGENT}), name="mcp-agent")
    headers = {"Authorization": f"Bearer {key}"}
    started = await api.post("/v1/plans", json={"process": "order", "order_id": "o-numbered"}, headers=headers)
    assert started.status_code == 201, started.text
    data = step_json("o-numbered", "p", 1)["data"]
    step = {"step": "OrderCreated", "data": data, "idempotency_key": "k-1"}
    for _ in range(2):
        response = await api.post("/v1/orders/o-numbered/steps", json=step, headers=headers)
        assert response.status_code == 200, response.text
    assert response.json()["decision"] == "DUPLICATE"
    expected = (f"key:{record.id}", "mcp-agent")
    assert [r[2:] for r in await actors(db, "o-numbered")] == [expected, expected]


async def test_a_max_rejections_abort_is_logged_as_the_system(api: httpx.AsyncClient, db: Database) -> None:
    """The abort the gateway writes when a plan reaches max_rejections is `system:max_rejections`, not the agent's."""
    for _ in range(3):  # the refund process allows 3 rejections per plan
        bad = step_json("o-policy", "rp", 1, event_type="RefundRequested", process="refund",
                        data={"amount": 0, "currency": "EUR", "reason": "x"})  # fmt: skip
        await api.post("/v1/events", json=bad, headers=api_headers())
    key_id = await db.fetchval("SELECT id FROM api_keys WHERE name = 'tests'")
    rows = await actors(db, "o-policy")
    assert [(d, a) for d, _, a, _ in rows] == [
        ("REJECTED", f"key:{key_id}"),
        ("REJECTED", f"key:{key_id}"),
        ("REJECTED", f"key:{key_id}"),
        ("APPLY", "system:max_rejections"),
    ]
    assert rows[-1][1] == "ABORT_PLAN" and rows[-1][3] is None


async def test_buffer_expiry_is_logged_as_the_system(db: Database) -> None:
    """A buffered step the sweeper dead-letters is logged as `system:expiry`, whoever proposed it."""
    step = Incoming.parse(step_json("o-exp", "p-exp", 3))
    await Gateway(db).submit([Incoming(step.raw, step.envelope, actor="key:7", actor_name="expiry-bot")])
    await db.execute("UPDATE pending_events SET received_at = now() - interval '2 hours'")
    assert await Gateway(db).expire_buffered(3600)
    assert [(d, a, n) for d, _, a, n in await actors(db, "o-exp")] == [
        ("BUFFER", "key:7", "expiry-bot"),
        ("DEAD_LETTER", "system:expiry", None),
    ]


@pytest.mark.parametrize(
    "name", ["expiry", "deadline", "max_rejections", "saga", "system:x", "Kafka:orders", "key:1", "OAuth:al@id.example"]
)
async def test_a_key_cannot_take_a_system_actors_name(api: httpx.AsyncClient, name: str) -> None:
    """`POST /v1/keys` refuses a name that reads as an actor: 422 INVALID_IDENTIFIER, no key created."""
    body = {"tenant": "default", "roles": ["agent"], "name": name}
    response = await api.post("/v1/keys", json=body, headers=root_headers())
    assert response.status_code == 422, response.text
    assert response.json()["code"] == "INVALID_IDENTIFIER"
    listed = (await api.get("/v1/keys", headers=root_headers())).json()["keys"]
    assert name not in [k["name"] for k in listed]


async def test_keys_create_cli_refuses_a_system_actors_name(api: httpx.AsyncClient, settings: Settings) -> None:
    """`nexus keys create --name expiry` fails (exit 1) and says why; `--name expiry-bot` is a plain name."""

    def keys(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "nexus.cli", "keys", "create", "--tenant", "default", "--role", "agent", *args],
            env=settings_env(settings), cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip

    refused = keys("--name", "expiry")
    assert refused.returncode == 1 and "system actor" in refused.stderr
    assert keys("--name", "expiry-bot").returncode == 0
    # a plain name is accepted by the API as well
    body = {"tenant": "default", "roles": ["agent"], "name": "saga-runner"}
    assert (await api.post("/v1/keys", json=body, headers=root_headers())).status_code == 201


# The decision log's INSERT as written before migration 0017 (15 columns, no actor_name).
_OLD_INSERT = """
INSERT INTO decision_log (tenant_id, order_id, position, at, actor, event_id, plan_id, seq, event_type,
                          decision, code, "check", message, prev_hash, hash)
SELECT * FROM unnest($1::text[], $2::text[], $3::int[], $4::timestamptz[], $5::text[], $6::text[], $7::text[],
                     $8::int[], $9::text[], $10::text[], $11::text[], $12::text[], $13::text[], $14::bytea[],
                     $15::bytea[])
"""


async def test_records_written_before_actors_still_verify(settings: Settings, db: Database, tmp_path: Path) -> None:
    """A log written the old way (free-name actors, no actor_name column) migrates through 0017 unchanged and
    `nexus audit verify` passes, with new records (actor_name set) appended to the same chains."""
    await db.execute("ALTER TABLE decision_log DROP COLUMN actor_name")
    await db.execute("DELETE FROM schema_migrations WHERE version = 17")
    old = [
        Entry("default", "o-old", "BUFFER", "e-2", "p-old", 2, "PaymentProcessed", actor="tests"),
        Entry("default", "o-old", "DEAD_LETTER", "e-2", "p-old", 2, "PaymentProcessed", "BUFFER_TIMEOUT",
              message="waited", actor="expiry"),
        Entry("default", "o-old2", "APPLY", "e-3", "p-old2", 1, "OrderCreated"),
    ]  # fmt: skip
    at = dt.datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=dt.UTC)
    positions, prevs, hashes = place(old, {}, at)
    columns = [[getattr(e, f) for e in old] for f in ("tenant_id", "order_id")]
    columns += [positions, [at] * len(old)]
    fields = ("actor", "event_id", "plan_id", "seq", "event_type", "decision", "code", "check", "message")
    columns += [[getattr(e, f) for e in old] for f in fields]
    await db.execute(_OLD_INSERT, *columns, prevs, hashes)

    migrated = await Database(settings).open(migrate=True)  # applies 0017 again (the later ones are there)
    try:
        assert await migrated.fetchval("SELECT count(*) FROM schema_migrations WHERE version = 17") == 1
        rows = await migrated.fetch("SELECT actor, actor_name FROM decision_log ORDER BY id")
        assert [tuple(r) for r in rows] == [("tests", None), ("expiry", None), (None, None)]
        step = Incoming.parse(step_json("o-old2", "p-old2", 2))
        await Gateway(migrated).submit([Incoming(step.raw, step.envelope, actor="key:1", actor_name="tests")])
        assert (await actors(migrated, "o-old2"))[-1][2:] == ("key:1", "tests")
    finally:
        await migrated.close()
    key = base64.b64encode(bytes(range(1, 33))).decode()
    done = subprocess.run(
        [sys.executable, "-m", "nexus.cli", "audit", "verify"],
        env=settings_env(settings.replace(audit_signing_key=key, data_dir=tmp_path)),
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ok: 4 records in 2 chains" in done.stdout
