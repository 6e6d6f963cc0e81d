"""The blocked-actions report (decision-log rows whose decision is REJECTED) over HTTP and `nexus report
blocked`, and `nexus serve`'s periodic signed checkpoints."""

from __future__ import annotations

import base64
import datetime as dt
import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from nexus.audit.log import record_entries
from nexus.audit.signing import KEY_FILE, load_signing_key, public_bytes
from nexus.auth.keys import create_key
from nexus.auth.roles import Role
from nexus.core.audit_chain import Entry
from nexus.settings import Settings
from nexus.store.database import Database
from tests.conftest import ROOT, api_headers, root_headers, settings_env
from tests.factories import plan_json

T1 = dt.datetime(2026, 11, 1, tzinfo=dt.UTC)
T2 = dt.datetime(2026, 11, 20, tzinfo=dt.UTC)


def rejected(order: str, seq: int, code: str, check: str | None = None, **kw: str) -> Entry:
    return Entry(
        tenant_id=kw.get("tenant", "default"),
        order_id=order,
        decision="REJECTED",
        event_id=f"ev-{order}-{seq}-{code}",
        plan_id=kw.get("plan", f"plan-{order}"),
        seq=seq,
        event_type=kw.get("event_type", "PaymentProcessed"),
        code=code,
        check=check,
        message=f"{code} at seq {seq}",
        actor=kw.get("actor"),
    )


async def seed(db: Database) -> None:
    """REJECTED rows written through the log's own record function, at two dates, plus non-REJECTED noise."""
    async with db.pool.acquire() as conn, conn.transaction():
        await record_entries(
            conn,
            [
                rejected("o1", 3, "CHECK_FAILED", "amount_matches_order", actor="agent-a"),
                rejected("o1", 3, "LIMIT_EXCEEDED", actor="agent-a"),
                Entry("default", "o1", "APPLY", seq=2, event_type="InventoryValidated"),
            ],
            T1,
        )
    async with db.pool.acquire() as conn, conn.transaction():
        await record_entries(
            conn,
            [
                rejected("o2", 2, "INVALID_TRANSITION", event_type="OrderShipped", tenant="acme", plan="px"),
                rejected("o2", 2, "CHECK_FAILED", "amount_matches_order", tenant="acme", plan="px"),
                rejected("o3", 6, "AFTER_TERMINAL", event_type="OrderShipped", actor="agent-b"),
            ],
            T2,
        )


async def test_blocked_actions_endpoints(db: Database, start_gateway) -> None:  # type: ignore[no-untyped-def]
    """The list filters by tenant, order, plan, code and since and pages by cursor; the summary counts."""
    await seed(db)
    _, base = start_gateway("--no-dispatcher")
    with httpx.Client(base_url=base, headers=root_headers(), timeout=10) as api:  # an operator of every tenant
        every = api.get("/v1/blocked-actions").json()
        assert [i["code"] for i in every["items"]] == [
            "AFTER_TERMINAL",
            "CHECK_FAILED",
            "INVALID_TRANSITION",
            "LIMIT_EXCEEDED",
            "CHECK_FAILED",
        ]
        assert every["next_cursor"] is None
        first = every["items"][-1]
        assert {k: first[k] for k in ("tenant", "order_id", "plan_id", "seq", "event_type", "check", "actor")} == {
            "tenant": "default",
            "order_id": "o1",
            "plan_id": "plan-o1",
            "seq": 3,
            "event_type": "PaymentProcessed",
            "check": "amount_matches_order",
            "actor": "agent-a",
        }
        assert first["event_id"] == "ev-o1-3-CHECK_FAILED" and first["message"] == "CHECK_FAILED at seq 3"
        assert dt.datetime.fromisoformat(first["at"]) == T1

        def codes(**params: str) -> list[str]:
            return [i["code"] for i in api.get("/v1/blocked-actions", params=params).json()["items"]]

        assert codes(tenant="acme") == ["CHECK_FAILED", "INVALID_TRANSITION"]
        assert codes(order="o1") == ["LIMIT_EXCEEDED", "CHECK_FAILED"]
        assert codes(plan="px") == ["CHECK_FAILED", "INVALID_TRANSITION"]
        assert codes(code="CHECK_FAILED") == ["CHECK_FAILED", "CHECK_FAILED"]
        assert codes(since="2026-11-10T00:00:00Z") == ["AFTER_TERMINAL", "CHECK_FAILED", "INVALID_TRANSITION"]

        pages: list[str] = []
        cursor: str | None = None
        while True:
            params = {"limit": "2", **({"cursor": cursor} if cursor else {})}
            page = api.get("/v1/blocked-actions", params=params).json()
            pages.append(",".join(i["code"] for i in page["items"]))
            cursor = page["next_cursor"]
            if cursor is None:
                break
        assert pages == ["AFTER_TERMINAL,CHECK_FAILED", "INVALID_TRANSITION,LIMIT_EXCEEDED", "CHECK_FAILED"]
        assert codes(limit="2", offset="4") == ["CHECK_FAILED"]

        summary = api.get("/v1/blocked-actions/summary").json()
        assert summary["total"] == 5
        assert summary["by_code"] == {
            "CHECK_FAILED": 2,
            "AFTER_TERMINAL": 1,
            "INVALID_TRANSITION": 1,
            "LIMIT_EXCEEDED": 1,
        }
        assert summary["by_check"] == {"amount_matches_order": 2}
        assert summary["by_step_type"] == {"PaymentProcessed": 3, "OrderShipped": 2}
        assert summary["by_actor"] == {"agent-a": 2, "unknown": 2, "agent-b": 1}
        assert api.get("/v1/blocked-actions/summary", params={"tenant": "acme"}).json()["total"] == 2

        bad = api.get("/v1/blocked-actions", params={"since": "yesterday"})
        assert bad.status_code == 422
        assert bad.json()["code"] == "INVALID_PARAMETER" and "since" in bad.json()["message"]
        assert api.get("/v1/blocked-actions", params={"limit": "0"}).json()["code"] == "INVALID_PARAMETER"


async def test_blocked_actions_are_the_keys_tenants_only(db: Database, start_gateway) -> None:  # type: ignore[no-untyped-def]
    """A tenant's operator lists and counts only its own tenant's blocked actions, whatever `?tenant=`
    says; only a key spanning every tenant chooses the tenant."""
    await seed(db)
    _, acme_key = await create_key(db, "acme", frozenset({Role.OPERATOR}), "acme-op")
    _, base = start_gateway("--no-dispatcher")
    with httpx.Client(base_url=base, timeout=10) as api:
        acme = {"Authorization": f"Bearer {acme_key}"}
        for params in ({}, {"tenant": "default"}):
            listed = api.get("/v1/blocked-actions", params=params, headers=acme).json()
            assert {i["tenant"] for i in listed["items"]} == {"acme"}, listed
            summary = api.get("/v1/blocked-actions/summary", params=params, headers=acme).json()
            assert summary["total"] == 2 and summary["filters"] == {"tenant": "acme"}
        mine = api.get("/v1/blocked-actions", params={"tenant": "acme"}, headers=api_headers()).json()
        assert {i["tenant"] for i in mine["items"]} == {"default"}
        assert api.get("/v1/blocked-actions/summary", headers=api_headers()).json()["total"] == 3
        chosen = api.get("/v1/blocked-actions/summary", params={"tenant": "acme"}, headers=root_headers()).json()
        assert chosen["total"] == 2


def report(settings: Settings, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "nexus.cli", "report", "blocked", *args],
        env=settings_env(settings),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout


@pytest.mark.processes
async def test_report_blocked_table_json_html(db: Database, settings: Settings) -> None:
    """`nexus report blocked` prints the counts as a table, JSON, or one self-contained HTML page with an SVG chart."""
    await seed(db)
    as_json = json.loads(report(settings, "--format", "json"))
    assert as_json["total"] == 5 and len(as_json["items"]) == 5
    recent = json.loads(report(settings, "--format", "json", "--since", "2026-11-10T00:00:00+00:00"))
    assert recent["total"] == 3
    assert json.loads(report(settings, "--format", "json", "--since", "1h"))["total"] == 0
    table = report(settings)
    assert "blocked actions: 5" in table and "amount_matches_order" in table and "agent-a" in table
    page = report(settings, "--format", "html")
    assert page.startswith("<!DOCTYPE html>") and "<style>" in page and "<svg" in page
    for needle in ("by code", "by check", "by step type", "by agent", "LIMIT_EXCEEDED", "agent-b"):
        assert needle in page
    # self-contained: nothing fetched from elsewhere
    assert "src=" not in page and "href=" not in page and "@import" not in page and "<script" not in page


async def test_serve_signs_checkpoints_with_the_data_dir_key(
    db: Database, settings: Settings, start_gateway, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """`nexus serve` generates <data dir>/audit_ed25519.key (0600) and signs checkpoints at its interval."""
    s = settings.replace(audit_checkpoint_s=0.3, data_dir=tmp_path / "data")
    _, base = start_gateway("--no-dispatcher", settings_=s)
    with httpx.Client(base_url=base, headers=api_headers(), timeout=10) as api:
        assert api.post("/v1/events", json={"events": plan_json("sv", "psv", 3)}).status_code == 200
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and not await db.fetchval("SELECT count(*) FROM audit_checkpoints"):
        time.sleep(0.1)
    key_path = tmp_path / "data" / KEY_FILE
    assert stat.S_IMODE(os.stat(key_path).st_mode) == 0o600
    row = await db.fetchrow("SELECT heads::text AS heads, public_key FROM audit_checkpoints ORDER BY id LIMIT 1")
    assert row is not None
    assert bytes(row["public_key"]) == public_bytes(load_signing_key(s))
    assert json.loads(row["heads"])[0][:3] == ["default", "sv", 3]
    env_key = settings.replace(audit_signing_key=base64.b64encode(b"k" * 32).decode())
    assert public_bytes(load_signing_key(env_key)) != bytes(row["public_key"])
