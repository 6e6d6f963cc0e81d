"""The decision log on real PostgreSQL: one row per decision, atomic with the effects, append-only, and
`nexus audit verify` naming the first doctored, deleted, inserted or reordered record."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from nexus.audit.signing import write_checkpoint
from nexus.core.audit_chain import chain_hash
from nexus.core.decide.items import Incoming
from nexus.errors import PermanentDatabaseError
from nexus.gateway import Gateway
from nexus.settings import Settings
from nexus.store.database import Database
from tests.conftest import ROOT, settings_env
from tests.factories import abort_json, step_json

SEED = bytes(range(1, 33))


def audit_settings(settings: Settings, tmp_path: Path) -> Settings:
    return settings.replace(audit_signing_key=base64.b64encode(SEED).decode(), data_dir=tmp_path)


def nexus(settings: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nexus.cli", *args],
        env=settings_env(settings),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


async def log_rows(db: Database, order_id: str) -> list[tuple[Any, ...]]:
    rows = await db.fetch(
        "SELECT position, seq, decision, code FROM decision_log WHERE order_id = $1 ORDER BY position", order_id
    )
    return [tuple(r) for r in rows]


async def submit(db: Database, *bodies: Any) -> None:
    await Gateway(db).submit([Incoming.parse(b) for b in bodies])


async def test_every_decision_of_a_batch_is_one_row(db: Database) -> None:
    """APPLY, BUFFER, drained APPLY, DUPLICATE, TOMBSTONE, DISCARD, PLAN_MISMATCH and DEAD_LETTER: one row each."""
    s1, s2, s3 = (step_json("a", "pa", n) for n in (1, 2, 3))
    await submit(
        db,
        s1,
        s3,
        s2,
        s2,
        abort_json("b", "pb"),
        step_json("b", "pb", 1),
        step_json("c", "pc", 1),
        step_json("c", "other", 2),
        "{not json",
    )
    assert await log_rows(db, "a") == [
        (1, 1, "APPLY", None),
        (2, 3, "BUFFER", None),
        (3, 2, "APPLY", None),
        (4, 3, "APPLY", None),
        (5, 2, "DUPLICATE", None),
    ]
    assert await log_rows(db, "b") == [(1, None, "TOMBSTONE", None), (2, 1, "DISCARD", None)]
    assert await log_rows(db, "c") == [(1, 1, "APPLY", None), (2, 2, "PLAN_MISMATCH", "PLAN_MISMATCH")]
    assert await log_rows(db, "~ingress") == [(1, None, "DEAD_LETTER", "PARSE_ERROR")]
    tenants = await db.fetch("SELECT DISTINCT tenant_id, actor FROM decision_log")
    assert [tuple(t) for t in tenants] == [("default", None)]


async def test_buffer_timeout_is_logged_in_its_order_chain(db: Database) -> None:
    """A buffered step that expires is a DEAD_LETTER row with code BUFFER_TIMEOUT after its BUFFER row."""
    await submit(db, step_json("t", "pt", 3))
    await db.execute("UPDATE pending_events SET received_at = now() - interval '2 hours'")
    assert await Gateway(db).expire_buffered(3600)
    assert await log_rows(db, "t") == [(1, 3, "BUFFER", None), (2, 3, "DEAD_LETTER", "BUFFER_TIMEOUT")]


async def test_a_batch_whose_effects_fail_leaves_no_log_rows(db: Database) -> None:
    """When the database refuses a batch's effects, its decisions are not logged either (and vice versa)."""
    await db.execute(
        "CREATE FUNCTION boom() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
        " IF NEW.order_id LIKE 'boom%' THEN RAISE EXCEPTION 'refused'; END IF; RETURN NEW; END $$"
    )
    # Deferred to COMMIT: the effects fail after the log rows were written, as late as a failure can come.
    await db.execute(
        "CREATE CONSTRAINT TRIGGER boom AFTER INSERT ON outbox DEFERRABLE INITIALLY DEFERRED"
        " FOR EACH ROW EXECUTE FUNCTION boom()"
    )
    await db.execute("CREATE TRIGGER boom BEFORE INSERT ON decision_log FOR EACH ROW EXECUTE FUNCTION boom()")
    await db.execute("ALTER TABLE decision_log DISABLE TRIGGER boom")
    await submit(db, step_json("boom-effects", "p1", 1), step_json("fine", "p2", 1))
    assert await log_rows(db, "boom-effects") == []
    assert await log_rows(db, "fine") == [(1, 1, "APPLY", None)]
    await db.execute("DROP TRIGGER boom ON outbox")
    await db.execute("ALTER TABLE decision_log ENABLE TRIGGER boom")
    await submit(db, step_json("boom-log", "p3", 1))
    assert await db.fetchval("SELECT count(*) FROM outbox WHERE order_id LIKE 'boom%'") == 0
    assert await db.fetchval("SELECT count(*) FROM orders WHERE order_id LIKE 'boom%'") == 0
    dead = await db.fetch("SELECT decision, code FROM decision_log WHERE order_id = '~ingress'")
    assert [tuple(r) for r in dead] == [("DEAD_LETTER", "DATABASE_REJECTED")] * 2


async def test_trigger_refuses_update_delete_and_truncate(db: Database) -> None:
    """The log and its checkpoints are append-only: UPDATE, DELETE and TRUNCATE are refused."""
    await submit(db, step_json("u", "pu", 1))
    for sql in (
        "UPDATE decision_log SET message = 'x'",
        "DELETE FROM decision_log",
        "TRUNCATE decision_log",
        "DELETE FROM audit_checkpoints",
    ):
        with pytest.raises(PermanentDatabaseError, match=r"append-only|SQLSTATE 42501"):
            await db.execute(sql)
    assert await db.fetchval("SELECT count(*) FROM decision_log") == 1


async def five_steps(db: Database) -> list[asyncpg.Record]:
    await submit(db, *(step_json("v", "pv", n) for n in range(1, 6)), step_json("w", "pw", 1))
    return await db.fetch("SELECT * FROM decision_log WHERE order_id = 'v' ORDER BY position")


async def doctor(db: Database, *statements: str, args: tuple[Any, ...] = ()) -> None:
    """Tamper as the table owner would: with the append-only trigger disabled."""
    async with db.pool.acquire() as conn, conn.transaction():
        await conn.execute("ALTER TABLE decision_log DISABLE TRIGGER decision_log_append_only")
        for sql in statements:
            await conn.execute(sql, *args) if "$" in sql else await conn.execute(sql)
        await conn.execute("ALTER TABLE decision_log ENABLE TRIGGER decision_log_append_only")


def verify_json(settings: Settings, *args: str) -> tuple[int, dict[str, Any]]:
    done = nexus(settings, "audit", "verify", "--json", *args)
    return done.returncode, json.loads(done.stdout)


@pytest.mark.processes
async def test_audit_verify_passes_on_a_clean_log(db: Database, settings: Settings, tmp_path: Path) -> None:
    """`nexus audit verify` exits 0 on an untouched log, with and without a checkpoint, and per order."""
    s = audit_settings(settings, tmp_path)
    await five_steps(db)
    done = nexus(s, "audit", "verify")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ok: 6 records in 2 chains" in done.stdout
    assert nexus(s, "audit", "checkpoint").returncode == 0
    assert verify_json(s) == (0, {"ok": True, "records": 6, "chains": 2, "checkpoints": 1, "fault": None})
    assert verify_json(s, "--order", "v")[0] == 0


@pytest.mark.processes
async def test_audit_verify_names_a_doctored_record(db: Database, settings: Settings, tmp_path: Path) -> None:
    """A row whose decision was changed fails verification as MODIFIED, naming it."""
    rows = await five_steps(db)
    await doctor(db, f"UPDATE decision_log SET decision = 'REJECTED' WHERE id = {rows[2]['id']}")
    code, out = verify_json(audit_settings(settings, tmp_path))
    assert code == 1
    assert out["fault"]["kind"] == "MODIFIED"
    assert (out["fault"]["order_id"], out["fault"]["position"], out["fault"]["record_id"]) == ("v", 3, rows[2]["id"])


@pytest.mark.processes
async def test_audit_verify_names_a_deleted_record(db: Database, settings: Settings, tmp_path: Path) -> None:
    """A deleted row fails verification as DELETED, naming its successor and the missing position."""
    rows = await five_steps(db)
    await doctor(db, f"DELETE FROM decision_log WHERE id = {rows[1]['id']}")
    code, out = verify_json(audit_settings(settings, tmp_path))
    assert code == 1
    assert (out["fault"]["kind"], out["fault"]["position"], out["fault"]["record_id"]) == ("DELETED", 3, rows[2]["id"])
    assert "position(s) 2 missing" in out["fault"]["detail"]


@pytest.mark.processes
async def test_audit_verify_names_an_inserted_record(db: Database, settings: Settings, tmp_path: Path) -> None:
    """A forged row (its own hash recomputed) claiming a position already taken fails as INSERTED."""
    rows = await five_steps(db)
    original = dict(rows[1])
    forged = {**original, "message": "forged approval", "decision": "APPLY"}
    forged["at"] = original["at"]
    from nexus.audit.verify import record_of

    forged_hash = chain_hash(record_of({**forged, "id": None}), bytes(original["prev_hash"]))
    await doctor(
        db,
        "DROP INDEX decision_log_chain",
        "INSERT INTO decision_log (tenant_id, order_id, position, at, event_id, plan_id, seq, event_type, decision,"
        " message, prev_hash, hash) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
        args=(
            "default",
            "v",
            2,
            original["at"],
            original["event_id"],
            "pv",
            2,
            original["event_type"],
            "APPLY",
            "forged approval",
            original["prev_hash"],
            forged_hash,
        ),
    )
    code, out = verify_json(audit_settings(settings, tmp_path))
    assert code == 1
    assert (out["fault"]["kind"], out["fault"]["position"]) == ("INSERTED", 2)
    assert out["fault"]["record_id"] > rows[-1]["id"]


@pytest.mark.processes
async def test_audit_verify_names_a_swapped_pair(db: Database, settings: Settings, tmp_path: Path) -> None:
    """Two rows whose places in the chain were swapped fail verification as REORDERED."""
    rows = await five_steps(db)
    a, b = rows[1]["id"], rows[2]["id"]
    await doctor(
        db,
        f"UPDATE decision_log SET id = -1 WHERE id = {a}",
        f"UPDATE decision_log SET id = {a} WHERE id = {b}",
        f"UPDATE decision_log SET id = {b} WHERE id = -1",
    )
    code, out = verify_json(audit_settings(settings, tmp_path))
    assert code == 1
    assert (out["fault"]["kind"], out["fault"]["position"], out["fault"]["record_id"]) == ("REORDERED", 3, a)


@pytest.mark.processes
async def test_checkpoint_signature_verifies_and_a_forged_one_fails(
    db: Database, settings: Settings, tmp_path: Path
) -> None:
    """A signed checkpoint verifies; one whose heads were altered, or signed by an untrusted key, fails."""
    s = audit_settings(settings, tmp_path)
    await five_steps(db)
    from nexus.audit.signing import load_signing_key, public_bytes

    key = load_signing_key(s)
    checkpoint = await write_checkpoint(db, key)
    assert checkpoint is not None
    assert {(h.order_id, h.position) for h in checkpoint.heads} == {("v", 5), ("w", 1)}
    assert await write_checkpoint(db, key) is None  # nothing changed since
    await submit(db, step_json("w", "pw", 2))
    second = await write_checkpoint(db, key)
    assert second is not None and [(h.order_id, h.position) for h in second.heads] == [("w", 2)]
    trusted = public_bytes(key).hex()
    assert verify_json(s, "--public-key", trusted)[0] == 0
    # Forged: the second checkpoint's heads rewritten (its stored signature no longer matches).
    await db.execute("ALTER TABLE audit_checkpoints DISABLE TRIGGER audit_checkpoints_append_only")
    await db.execute("UPDATE audit_checkpoints SET heads = jsonb_set(heads, '{0,2}', '1') WHERE id = $1", second.id)
    code, out = verify_json(s, "--public-key", trusted)
    assert (code, out["fault"]["kind"]) == (1, "BAD_SIGNATURE")
    # Re-signed by another key: verifies only when no trusted key is named.
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from nexus.audit.signing import sign
    from nexus.core.audit_verify import Head

    mallory = Ed25519PrivateKey.generate()
    fake = sign(mallory, _at(second.at), second.prev_digest, [Head("default", "w", 2, second.heads[0].hash)])
    await db.execute(
        "UPDATE audit_checkpoints SET heads = $2::jsonb, digest = $3, signature = $4, key_id = $5,"
        " public_key = $6, at = $7 WHERE id = $1",
        second.id,
        json.dumps([h.as_json() for h in fake.heads]),
        fake.digest,
        fake.signature,
        fake.key_id,
        fake.public_key,
        _at(fake.at),
    )
    assert verify_json(s)[0] == 0
    code, out = verify_json(s, "--public-key", trusted)
    assert (code, out["fault"]["kind"]) == (1, "BAD_SIGNATURE")


def _at(text: str) -> Any:
    import datetime as dt

    return dt.datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=dt.UTC)


@pytest.mark.processes
async def test_checkpoint_catches_a_deleted_tail(db: Database, settings: Settings, tmp_path: Path) -> None:
    """Deleting an order's last rows after a checkpoint fails verification as DELETED."""
    s = audit_settings(settings, tmp_path)
    await five_steps(db)
    assert nexus(s, "audit", "checkpoint").returncode == 0
    await doctor(db, "DELETE FROM decision_log WHERE order_id = 'v' AND position >= 4")
    code, out = verify_json(s)
    assert (code, out["fault"]["kind"], out["fault"]["order_id"], out["fault"]["position"]) == (1, "DELETED", "v", 4)


@pytest.mark.processes
async def test_export_then_offline_verify(db: Database, settings: Settings, tmp_path: Path) -> None:
    """`audit export` writes JSONL with the public key; `audit verify --file` checks it with no database."""
    s = audit_settings(settings, tmp_path)
    await five_steps(db)
    assert nexus(s, "audit", "checkpoint").returncode == 0
    out = tmp_path / "log.jsonl"
    done = nexus(s, "audit", "export", "--out", str(out))
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert lines[0]["type"] == "header" and len(lines[0]["public_keys"]) == 1
    assert sum(1 for line in lines if line["type"] == "record") == 6
    offline = Settings(database_url="postgresql://nobody@127.0.0.1:1/none", data_dir=tmp_path / "nothing")
    done = nexus(offline, "audit", "verify", "--file", str(out))
    assert done.returncode == 0, done.stdout + done.stderr
    # the same file with one record's message changed
    text = out.read_text().replace('"seq": 4, "event_type"', '"seq": 40, "event_type"', 1)
    tampered = tmp_path / "tampered.jsonl"
    tampered.write_text(text)
    done = nexus(offline, "audit", "verify", "--file", str(tampered))
    assert done.returncode == 1
    assert "MODIFIED" in done.stdout and "position 4" in done.stdout
