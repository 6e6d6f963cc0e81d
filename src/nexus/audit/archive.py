"""Trimming the decision log into archive segments that verify alone, and verifying the log after trims.

`trim_log` is what the retention remover calls each pass (and `nexus audit trim` runs alone). In one transaction,
under a try-lock (one trimmer at a time) and with `nexus.remover` set (the one way past the append-only trigger):

1. chains whose order row is absent, whose last record is older than the retention period and signed by a
   checkpoint, leave whole (their heads re-read under the orders' advisory locks); each `~ingress` chain (it
   never finishes) is cut at the last position a checkpoint signed among its records older than the period
   (never its last record: the next position is read from it);
2. what leaves is first written, per tenant, to `<archive_dir>/<tenant>/<from>_<to>.jsonl` (storage ids of its
   first and last record): the records, an anchor line where a chain starts past position 1, and the run of
   checkpoints that signed their heads (`nexus audit verify --file` verifies it alone);
3. an anchor per chain (core/audit_anchor.py) names that segment, then the records are deleted;
4. the oldest checkpoints signed before the period, each of whose heads a later checkpoint signs again (or lies
   in an archived or erased part), go to `<archive_dir>/~checkpoints/<from>_<to>.jsonl` under a checkpoint
   anchor; anchors nothing needs any more are deleted.

Without an archive directory nothing is trimmed: the log is kept whole (a trade: it grows with the traffic).
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import json
import os
from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import asyncpg

from nexus.audit.signing import signature_checker
from nexus.audit.verify import FORMAT, ExportFile, checkpoint_of, erasure_of, load, read_file, record_of, verify
from nexus.core.audit_anchor import (
    ArchivedHashes,
    ChainAnchor,
    CheckpointAnchor,
    chain_starts,
    closing_run,
    stale_anchors,
    trimmable_checkpoints,
)
from nexus.core.audit_chain import GENESIS, Record, format_at
from nexus.core.audit_erasure import Erasure, erased_heads
from nexus.core.audit_verify import Checkpoint, Fault, Finding, Verification
from nexus.store.database import Database
from nexus.store.errors import wrap_db_errors
from nexus.store.queries import query

CHECKPOINTS_DIR = "~checkpoints"
"""The checkpoints' segments: `~` starts no tenant, so the directory cannot collide with one."""


@dataclasses.dataclass
class TrimReport:
    """What one pass of `trim_log` did."""

    kept_whole: bool = False
    """No archive directory: nothing was trimmed."""
    busy: bool = False
    """Another process was trimming: this pass did nothing."""
    chains_removed: int = 0
    chains_cut: int = 0
    records: int = 0
    checkpoints: int = 0
    anchors_dropped: int = 0
    segments: list[str] = dataclasses.field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True, slots=True)
class _Cut:
    tenant_id: str
    order_id: str
    position: int
    hash: bytes
    whole: bool


async def trim_log(
    conn_or_pool: asyncpg.Connection | asyncpg.Pool,
    *,
    archive_dir: Path | None,
    retention_s: int,
    batch: int,
    now: dt.datetime | None = None,
) -> TrimReport:
    """One bounded pass of trimming (see the module docstring): at most `batch` removed orders' chains, and for
    each `~ingress` chain the signed position nearest past `batch` records."""
    if archive_dir is None:
        return TrimReport(kept_whole=True)
    before = (now or dt.datetime.now(dt.UTC)) - dt.timedelta(seconds=retention_s)
    with wrap_db_errors():
        if isinstance(conn_or_pool, asyncpg.Pool):
            async with conn_or_pool.acquire() as conn:
                return await _trim(conn, archive_dir, before, batch)
        return await _trim(conn_or_pool, archive_dir, before, batch)


async def _trim(conn: asyncpg.Connection, archive_dir: Path, before: dt.datetime, batch: int) -> TrimReport:
    report = TrimReport()
    async with conn.transaction():
        if not await conn.fetchval(query("archive.sql", "trim_lock")):
            report.busy = True
            return report
        await conn.execute("SET LOCAL nexus.remover = 'on'")
        checkpoints = [checkpoint_of(r) for r in await conn.fetch(query("audit.sql", "checkpoints"))]
        anchors = await chain_anchors(conn)
        cuts = await _cuts(conn, before, batch, anchors)
        if cuts:
            await _trim_chains(conn, archive_dir, cuts, checkpoints, anchors, report)
            anchors = await chain_anchors(conn)
        erasures = [erasure_of(r) for r in await conn.fetch(query("erase.sql", "erasures"))]
        erased = erased_heads(erasures, signature_checker())
        leaving = trimmable_checkpoints(checkpoints, format_at(before), anchors, erased)
        new_anchor: int | None = None
        if leaving:
            new_anchor = await _trim_checkpoints(conn, archive_dir, checkpoints[:leaving], report)
        stale = stale_anchors(anchors, checkpoints[leaving:])
        status = await conn.execute(query("archive.sql", "delete_anchors"), stale, new_anchor)
        report.anchors_dropped = int(status.rsplit(" ", 1)[-1])
    return report


async def _cuts(
    conn: asyncpg.Connection, before: dt.datetime, batch: int, anchors: Sequence[ChainAnchor]
) -> list[_Cut]:
    """Where each chain that leaves is cut: whole chains of removed orders, and `~ingress` chains by age."""
    removed = await conn.fetch(query("archive.sql", "removed_chains"), before, batch)
    cuts = await _still_whole(
        conn, [_Cut(r["tenant_id"], r["order_id"], r["position"], bytes(r["hash"]), True) for r in removed]
    )
    starts = chain_starts(anchors)
    signed: dict[tuple[str, str], list[tuple[int, bytes]]] = defaultdict(list)
    for r in await conn.fetch(query("archive.sql", "ingress_signed"), before):
        signed[(r["tenant_id"], r["order_id"])].append((r["position"], bytes(r["hash"])))
    for chain, positions in signed.items():
        start = starts.get(chain, (0, b""))[0]
        later = [(p, h) for p, h in positions if p > start]
        within = [(p, h) for p, h in later if p <= start + batch]
        pick = within[-1] if within else (later[0] if later else None)
        if pick is not None:
            cuts.append(_Cut(chain[0], chain[1], pick[0], pick[1], False))
    return cuts


async def _still_whole(conn: asyncpg.Connection, cuts: list[_Cut]) -> list[_Cut]:
    """The removed chains whose head has not moved, under their orders' advisory locks (the gateway's, taken in
    its order): a step logged for a removed order's id meanwhile keeps its chain for a later pass."""
    if not cuts:
        return cuts
    tenants, orders = [c.tenant_id for c in cuts], [c.order_id for c in cuts]
    await conn.execute(query("gateway.sql", "lock_orders"), tenants, orders)
    heads = {
        (r["tenant_id"], r["order_id"]): (r["position"], bytes(r["hash"]))
        for r in await conn.fetch(query("audit.sql", "read_heads"), tenants, orders)
    }
    return [c for c in cuts if heads.get((c.tenant_id, c.order_id)) == (c.position, c.hash)]


async def _trim_chains(
    conn: asyncpg.Connection,
    archive_dir: Path,
    cuts: Sequence[_Cut],
    checkpoints: Sequence[Checkpoint],
    anchors: Sequence[ChainAnchor],
    report: TrimReport,
) -> None:
    """Write each tenant's leaving records to a segment, anchor each chain to it, then delete the records."""
    columns = ([c.tenant_id for c in cuts], [c.order_id for c in cuts], [c.position for c in cuts])
    records = [record_of(r) for r in await conn.fetch(query("archive.sql", "chain_records"), *columns)]
    by_tenant: dict[str, list[Record]] = defaultdict(list)
    for r in records:
        by_tenant[r.tenant_id].append(r)
    starts = chain_starts(anchors)
    archive_of: dict[str, str] = {}
    for tenant, leaving in by_tenant.items():
        name = f"{tenant}/{leaving[0].id}_{leaving[-1].id}.jsonl"
        chains = {r.chain for r in leaving}
        run = closing_run(checkpoints, leaving)
        own_starts = {chain: start for chain, start in starts.items() if chain in chains}
        await write_segment(archive_dir / name, leaving, run, own_starts)
        archive_of[tenant] = name
        report.segments.append(name)
    anchored = [c for c in cuts if c.tenant_id in archive_of]
    await conn.execute(
        query("archive.sql", "insert_chain_anchors"),
        [c.tenant_id for c in anchored],
        [c.order_id for c in anchored],
        [c.position + 1 for c in anchored],
        [c.hash for c in anchored],
        [c.whole for c in anchored],
        [archive_of[c.tenant_id] for c in anchored],
    )
    await conn.execute(query("archive.sql", "delete_chain_records"), *columns)
    report.chains_removed += sum(c.whole for c in anchored)
    report.chains_cut += sum(not c.whole for c in anchored)
    report.records += len(records)


async def _trim_checkpoints(
    conn: asyncpg.Connection, archive_dir: Path, leaving: Sequence[Checkpoint], report: TrimReport
) -> int:
    """Archive the oldest checkpoints, anchor the retained ones to the last one's digest, delete them."""
    name = f"{CHECKPOINTS_DIR}/{leaving[0].id}_{leaving[-1].id}.jsonl"
    await write_segment(archive_dir / name, [], leaving, {})
    anchor_id: int = await conn.fetchval(query("archive.sql", "insert_checkpoint_anchor"), leaving[-1].digest, name)
    await conn.execute(query("archive.sql", "delete_checkpoints"), leaving[-1].id)
    report.checkpoints += len(leaving)
    report.segments.append(name)
    return anchor_id


async def write_segment(
    path: Path,
    records: Sequence[Record],
    checkpoints: Sequence[Checkpoint],
    starts: dict[tuple[str, str], tuple[int, bytes]],
) -> None:
    """A segment file (nexus.audit.verify's format, `"segment": true`), written whole then renamed into place."""
    keys = {c.key_id: c.public_key.hex() for c in checkpoints}
    lines: list[dict[str, Any]] = [
        {
            "type": "header",
            "format": FORMAT,
            "version": 1,
            "segment": True,
            "public_keys": [{"key_id": k, "public_key": v} for k, v in sorted(keys.items())],
        }
    ]
    lines += [
        {"type": "anchor", "kind": "chain", "tenant_id": t, "order_id": o, "position": p + 1, "prev_hash": h.hex()}
        for (t, o), (p, h) in sorted(starts.items())
    ]
    if checkpoints:
        lines.append({"type": "anchor", "kind": "checkpoints", "prev_digest": checkpoints[0].prev_digest.hex()})
    lines += [{"type": "record", **r.as_json()} for r in records]
    lines += [{"type": "checkpoint", **c.as_json()} for c in checkpoints]
    text = "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines)
    await asyncio.to_thread(_write_whole, path, text)


def _write_whole(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    with partial.open("w", encoding="utf-8") as out:
        out.write(text)
        out.flush()
        os.fsync(out.fileno())
    partial.replace(path)


async def chain_anchors(conn: Any) -> list[ChainAnchor]:
    """Every chain anchor, oldest first (`conn`: a connection or the Database)."""
    rows = await conn.fetch(query("archive.sql", "chain_anchors"))
    return [
        ChainAnchor(
            r["tenant_id"], r["order_id"], r["position"], bytes(r["prev_hash"]), r["archive"], r["whole"], r["id"]
        )
        for r in rows
    ]


async def checkpoint_anchor(conn: Any) -> CheckpointAnchor | None:
    row = await conn.fetchrow(query("archive.sql", "checkpoint_anchor"))
    return None if row is None else CheckpointAnchor(bytes(row["prev_digest"]), row["archive"])


def read_archives(
    archive_dir: Path | None,
    anchors: Iterable[ChainAnchor],
    checkpoints_anchor: CheckpointAnchor | None,
    trusted: set[bytes] | None = None,
) -> tuple[ArchivedHashes, Finding | None]:
    """The hashes of every record in the segments the anchors name, each segment verified alone first; a missing
    or failing segment, or a checkpoint segment that does not end at its anchor's digest, is the finding."""
    archived: dict[tuple[str, str], dict[int, bytes]] = defaultdict(dict)
    names = sorted({a.archive for a in anchors})
    for name in names + ([checkpoints_anchor.archive] if checkpoints_anchor else []):
        segment, finding = _segment(archive_dir, name, trusted)
        if finding is not None or segment is None:
            return archived, finding
        for r in segment.records:
            archived[r.chain][r.position] = r.hash
    if checkpoints_anchor is not None:
        segment, _ = _segment(archive_dir, checkpoints_anchor.archive, trusted)
        if (
            segment is None
            or not segment.checkpoints
            or segment.checkpoints[-1].digest != checkpoints_anchor.prev_digest
        ):
            detail = "does not end at the digest the retained checkpoints follow"
            return archived, _archive_finding(Fault.CHECKPOINT_CHAIN, checkpoints_anchor.archive, detail)
    return archived, None


def _segment(
    archive_dir: Path | None, name: str, trusted: set[bytes] | None
) -> tuple[ExportFile | None, Finding | None]:
    path = None if archive_dir is None else archive_dir / name
    if path is None or not path.is_file():
        return None, _archive_finding(Fault.DELETED, name, "archive segment not found (NEXUS_AUDIT_ARCHIVE_DIR)")
    segment = read_file(path)
    result = segment.verify(trusted)
    if result.finding is not None:
        return None, _archive_finding(result.finding.fault, name, result.finding.describe())
    return segment, None


def _archive_finding(fault: Fault, name: str, detail: str) -> Finding:
    return Finding(fault, None, None, None, None, f"archive {name}: {detail}")


async def load_trimmed(
    db: Database, order_id: str | None = None
) -> tuple[list[Record], list[Checkpoint], list[Erasure], list[ChainAnchor], CheckpointAnchor | None]:
    """The log as `nexus.audit.verify.load` reads it, with its anchors."""
    records, checkpoints, erasures = await load(db, order_id)
    return records, checkpoints, erasures, await chain_anchors(db), await checkpoint_anchor(db)


def verify_trimmed(
    loaded: tuple[list[Record], list[Checkpoint], list[Erasure], list[ChainAnchor], CheckpointAnchor | None],
    archive_dir: Path | None,
    *,
    trusted: set[bytes] | None = None,
    complete: bool = True,
) -> Verification:
    """Verify the log from its anchors: the segments they name first (each alone), then the retained log."""
    records, checkpoints, erasures, anchors, checkpoints_anchor = loaded
    archived, finding = read_archives(archive_dir, anchors, checkpoints_anchor, trusted)
    if finding is not None:
        return Verification(len(records), len({r.chain for r in records}), len(checkpoints), finding)
    return verify(
        records,
        checkpoints,
        trusted=trusted,
        complete=complete,
        erasures=erasures,
        anchors=anchors,
        archived=archived,
        checkpoint_start=checkpoints_anchor.prev_digest if checkpoints_anchor else GENESIS,
    )


async def export_before(db: Database, path: Path, before: dt.datetime, tenant_id: str | None = None) -> int:
    """`nexus audit export --before`: a segment of every chain's records up to the last one before `before` (of one
    tenant, or all), with the checkpoints signed before it; verifiable alone. Returns the number of records."""
    records = [record_of(r) for r in await db.fetch(query("archive.sql", "records_before"), before, tenant_id)]
    stamp = format_at(before)
    checkpoints = [
        c for c in (checkpoint_of(r) for r in await db.fetch(query("audit.sql", "checkpoints"))) if c.at < stamp
    ]
    chains = {r.chain for r in records}
    starts = {chain: start for chain, start in chain_starts(await chain_anchors(db)).items() if chain in chains}
    await write_segment(path, records, checkpoints, starts)
    return len(records)
