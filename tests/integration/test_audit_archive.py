"""The decision log trimmed into archive segments (nexus.audit.archive) on real PostgreSQL: a removed order's chain
leaves whole, `~ingress` and old checkpoints leave by age, each segment verifies alone (a tampered one does not),
and the log still verifies from its anchors; without an archive directory nothing leaves."""

from __future__ import annotations

import asyncio
import base64
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from nexus.audit.archive import load_trimmed, trim_log, verify_trimmed
from nexus.audit.erase import erase_tenant
from nexus.audit.log import record_entries
from nexus.audit.signing import parse_signing_key, write_checkpoint
from nexus.audit.verify import load, read_file, verify
from nexus.core.audit_chain import Entry
from nexus.core.decide.items import Incoming
from nexus.gateway import Gateway
from nexus.settings import Settings
from nexus.store.database import Database
from nexus.store.queries import query
from tests.conftest import ROOT, settings_env
from tests.factories import step_json

KEY = parse_signing_key(base64.b64encode(bytes(range(1, 33))).decode())


async def submit(db: Database, *bodies: Any) -> None:
    await Gateway(db).submit([Incoming.parse(b) for b in bodies])


async def _log_with_checkpoints(db: Database) -> None:
    """Orders a, b (two steps each), c (one) and two unparseable items, a checkpoint; then a step of b, another
    unparseable item, a second checkpoint. (c, never touched again, keeps the first checkpoint from leaving.)"""
    steps = [step_json(o, f"p{o}", n) for o in ("a", "b") for n in (1, 2)]
    await submit(db, *steps, step_json("c", "pc", 1), "{bad", "{worse")
    assert await write_checkpoint(db, KEY) is not None
    await submit(db, step_json("b", "pb", 3), "{still bad")
    assert await write_checkpoint(db, KEY) is not None


async def _remove_order(db: Database, order_id: str) -> None:
    """What the retention remover does to a finished order's row."""
    async with db.pool.acquire() as conn, conn.transaction():
        await conn.execute("SET LOCAL nexus.remover = 'on'")
        await conn.execute("DELETE FROM orders WHERE order_id = $1", order_id)


async def _trim(db: Database, archive: Path | None) -> Any:
    return await trim_log(db.pool, archive_dir=archive, retention_s=0, batch=100)


def _nexus(settings: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nexus.cli", "audit", *args],
        env=settings_env(settings),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


async def test_a_removed_orders_chain_leaves_whole_and_the_log_still_verifies(db: Database, tmp_path: Path) -> None:
    """After order a's row is removed, a trim archives a's chain whole under an anchor; the log verifies from the
    anchors (a retained checkpoint's head of a is found in the archive), while a plain verify reads it DELETED."""
    await _log_with_checkpoints(db)
    await _remove_order(db, "a")

    report = await _trim(db, tmp_path)

    assert report.chains_removed == 1 and report.chains_cut == 1
    assert await db.fetchval("SELECT count(*) FROM decision_log WHERE order_id = 'a'") == 0
    assert await db.fetchval("SELECT count(*) FROM decision_log WHERE order_id = 'b'") == 3
    assert any(name.startswith("default/") for name in report.segments)
    result = verify_trimmed(await load_trimmed(db), tmp_path)
    assert result.ok, result.finding
    records, checkpoints, erasures = await load(db)
    plain = verify(records, checkpoints, erasures=erasures)
    assert plain.finding is not None and plain.finding.fault.value == "DELETED"


async def test_ingress_is_cut_at_a_signed_head_and_verifies_from_its_anchor(db: Database, tmp_path: Path) -> None:
    """The `~ingress` chain is cut at the last position a checkpoint signed; the retained records start past 1 and
    verify from the anchor's previous hash; a record deleted below the retained ones' start is still caught."""
    await _log_with_checkpoints(db)
    await _trim(db, tmp_path)
    positions = [r["position"] for r in await db.fetch("SELECT position FROM decision_log WHERE order_id = '~ingress'")]
    assert positions == [3]  # cut at 2, signed by the first checkpoint: the last record stays
    await submit(db, "{again", "{and again")
    assert await write_checkpoint(db, KEY) is not None
    await submit(db, "{unsigned yet")
    report = await _trim(db, tmp_path)
    assert report.chains_cut == 1
    positions = [r["position"] for r in await db.fetch("SELECT position FROM decision_log WHERE order_id = '~ingress'")]
    assert positions == [6]
    assert verify_trimmed(await load_trimmed(db), tmp_path).ok
    await submit(db, "{one more}")
    async with db.pool.acquire() as conn, conn.transaction():
        await conn.execute("SET LOCAL nexus.remover = 'on'")
        await conn.execute("DELETE FROM decision_log WHERE order_id = '~ingress' AND position = 6")
    broken = verify_trimmed(await load_trimmed(db), tmp_path)
    assert broken.finding is not None and broken.finding.fault.value == "DELETED"


@pytest.mark.processes
async def test_a_segment_verifies_alone_and_a_tampered_one_is_refused(
    db: Database, settings: Settings, tmp_path: Path
) -> None:
    """`nexus audit verify --file SEGMENT` passes on a trimmed segment and exits 1 once one of its records is changed;
    the database's verification, which checks the segments its anchors name, then fails too."""
    await _log_with_checkpoints(db)
    await _remove_order(db, "a")
    report = await _trim(db, tmp_path)
    segment = tmp_path / next(name for name in report.segments if name.startswith("default/"))
    assert read_file(segment).segment
    ok = _nexus(settings, "verify", "--file", str(segment))
    assert ok.returncode == 0, ok.stdout + ok.stderr

    lines = segment.read_text().splitlines()
    doctored = [json.loads(line) for line in lines]
    first = next(i for i, body in enumerate(doctored) if body["type"] == "record")
    doctored[first]["decision"] = "REJECTED"
    segment.write_text("".join(json.dumps(body) + "\n" for body in doctored))
    refused = _nexus(settings, "verify", "--file", str(segment))
    assert refused.returncode == 1 and "MODIFIED" in refused.stdout, refused.stdout
    from_db = verify_trimmed(await load_trimmed(db), tmp_path)
    assert from_db.finding is not None and from_db.finding.fault.value == "MODIFIED"


async def test_a_missing_archive_fails_the_verification(db: Database, tmp_path: Path) -> None:
    """The anchors name their segments: with the archive directory gone (or not given), verification fails."""
    await _log_with_checkpoints(db)
    await _remove_order(db, "a")
    await _trim(db, tmp_path)
    missing = verify_trimmed(await load_trimmed(db), tmp_path / "elsewhere")
    assert missing.finding is not None and missing.finding.fault.value == "DELETED"
    assert verify_trimmed(await load_trimmed(db), None).finding is not None


async def test_old_checkpoints_leave_once_later_ones_sign_their_heads(db: Database, tmp_path: Path) -> None:
    """A checkpoint whose every head is signed again later or archived leaves to `~checkpoints/`; the retained
    checkpoints verify from the anchored digest, and that archive's last digest is checked against it."""
    await _log_with_checkpoints(db)
    await _remove_order(db, "a")
    await submit(db, step_json("b", "pb", 4), step_json("c", "pc", 2), "{later}")
    assert await write_checkpoint(db, KEY) is not None
    report = await _trim(db, tmp_path)
    assert report.checkpoints == 2, report
    assert await db.fetchval("SELECT count(*) FROM audit_checkpoints") == 1
    assert any(name.startswith("~checkpoints/") for name in report.segments)
    result = verify_trimmed(await load_trimmed(db), tmp_path)
    assert result.ok, result.finding
    assert read_file(tmp_path / next(n for n in report.segments if n.startswith("~checkpoints/"))).verify().ok


async def test_without_an_archive_directory_nothing_leaves(db: Database) -> None:
    """No archive directory: the trim reports the log kept whole and deletes no record, anchor or checkpoint."""
    await _log_with_checkpoints(db)
    await _remove_order(db, "a")
    before = await db.fetchval("SELECT count(*) FROM decision_log")

    report = await _trim(db, None)

    assert report.kept_whole and report.records == 0
    assert await db.fetchval("SELECT count(*) FROM decision_log") == before
    assert await db.fetchval("SELECT count(*) FROM audit_anchors") == 0


@pytest.mark.processes
async def test_export_before_writes_a_segment_that_verifies_alone(
    db: Database, settings: Settings, tmp_path: Path
) -> None:
    """`nexus audit export --before DATE --out FILE` writes the records before DATE as a segment, with the
    checkpoints signed before it, that `nexus audit verify --file` passes; without --out it exits 2."""
    await _log_with_checkpoints(db)
    cut = await db.fetchval("SELECT min(at) + interval '1 microsecond' FROM audit_checkpoints")
    await submit(db, step_json("b", "pb", 4))
    out = tmp_path / "before.jsonl"
    made = _nexus(settings, "export", "--before", cut.isoformat(), "--out", str(out))
    assert made.returncode == 0, made.stderr
    segment = read_file(out)
    assert segment.segment and segment.records and all(r.position <= 2 for r in segment.records)
    assert {r.order_id for r in segment.records} == {"a", "b", "c", "~ingress"} and len(segment.checkpoints) == 1
    checked = _nexus(settings, "verify", "--file", str(out))
    assert checked.returncode == 0, checked.stdout
    assert _nexus(settings, "export", "--before", "30d").returncode == 2


async def test_a_chain_that_grows_while_the_trim_waits_for_its_lock_stays(db: Database, tmp_path: Path) -> None:
    """The trim takes a removed order's advisory lock and re-reads its head: a record logged for that order id by a
    batch holding the lock (a late step decided from the removal marker) keeps the chain whole for a later pass."""
    await _log_with_checkpoints(db)
    await _remove_order(db, "a")
    async with db.pool.acquire() as conn:
        batch = conn.transaction()
        await batch.start()
        await conn.execute(query("gateway.sql", "lock_orders"), ["default"], ["a"])
        trim = asyncio.create_task(_trim(db, tmp_path))
        await asyncio.sleep(0.5)  # the trim reaches a's lock meanwhile (or starts after the commit: same outcome)
        await record_entries(conn, [Entry("default", "a", "DISCARD", message="late step of a removed order")])
        await batch.commit()
    report = await trim
    assert report.chains_removed == 0
    positions = [r["position"] for r in await db.fetch("SELECT position FROM decision_log WHERE order_id = 'a'")]
    assert sorted(positions) == [1, 2, 3]
    assert verify_trimmed(await load_trimmed(db), tmp_path).ok


async def test_erasing_a_tenant_with_archived_chains_still_verifies(db: Database, tmp_path: Path) -> None:
    """The erasure record names the heads of the tenant's archived chains too (from their anchors, which leave with
    the tenant), so the retained checkpoints that signed them still verify after the tenant is erased."""
    await _log_with_checkpoints(db)
    await _remove_order(db, "a")
    assert (await _trim(db, tmp_path)).chains_removed == 1

    report = await erase_tenant(db, "default", KEY, cache_ttl_s=0)

    assert report.remaining == {} and await db.fetchval("SELECT count(*) FROM audit_anchors WHERE kind = 'chain'") == 0
    result = verify_trimmed(await load_trimmed(db), tmp_path)
    assert result.ok, result.finding


@pytest.mark.processes
async def test_nexus_audit_trim_runs_one_pass_and_verify_follows_the_anchors(
    db: Database, settings: Settings, tmp_path: Path
) -> None:
    """`nexus audit trim` keeps the log whole without NEXUS_AUDIT_ARCHIVE_DIR and trims with it (retention 1 s);
    `nexus audit verify` then passes with the directory set and fails without it."""
    await _log_with_checkpoints(db)
    await _remove_order(db, "a")
    kept = _nexus(settings, "trim")
    assert kept.returncode == 0 and json.loads(kept.stdout)["kept_whole"], kept.stderr
    archiving = settings.replace(audit_archive_dir=tmp_path, retention_s=1)
    await asyncio.sleep(1.2)  # the removed chain's last record is older than the period
    done = _nexus(archiving, "trim", "--batch", "10")
    assert done.returncode == 0 and json.loads(done.stdout)["chains_removed"] == 1, done.stderr
    assert _nexus(archiving, "verify").returncode == 0
    blind = _nexus(settings, "verify")
    assert blind.returncode == 1 and "archive segment not found" in blind.stdout, blind.stdout
