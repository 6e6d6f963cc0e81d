"""WAL per envelope under the noisy neighbour's `batches` (issue 34): tenant C's p50/p99 while tenant A posts
1,000-envelope batches of new orders, and the WAL the phase wrote, for each candidate set of the embedded
server's WAL settings, paired in rounds.

Usage: ``flock /work/wt/bench.lock .venv/bin/python benchmarks/wal_per_envelope.py [--seconds 15] [--rounds 2]
[--candidates default,stock,...] [--json FILE]``. Each candidate runs on a fresh throwaway pgserver (so that no
candidate inherits the WAL segments another left to recycle) with its settings applied by ``ALTER SYSTEM`` and a
restart: ``stock`` is PostgreSQL's defaults (every setting of `CANDIDATES` reset), ``default`` what
`nexus.store.embedded` sets, the others a change on top of stock. Per phase (baseline, batches), beside the
probes' fields (`nexus_lab.bench.noisy_probes`): ``wal``, the cluster's `pg_stat_wal` and `pg_stat_bgwriter`
deltas over the phase and the WAL's bytes per A envelope; for the batches phase ``wal_by_relation``, the phase's
WAL records read back with `pg_waldump` (the segments still in pg_wal: a checkpoint may have recycled the
phase's first ones), bytes per relation with their full-page images apart.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import platform
import re
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import asyncpg

from nexus_lab.bench import create_database, drop_database, start_embedded
from nexus_lab.bench.noisy import make_keys, run_phases, start_gateway
from nexus_lab.bench.noisy_probes import Probes

WAL_SETTINGS = (
    "wal_init_zero", "wal_recycle", "min_wal_size", "max_wal_size", "checkpoint_timeout", "wal_compression",
    "wal_writer_delay", "wal_writer_flush_after", "wal_buffers",
)  # fmt: skip
CANDIDATES: dict[str, dict[str, str] | None] = {
    "default": None,  # what nexus.store.embedded sets, untouched
    "stock": {},
    "nozero": {"wal_init_zero": "off"},
    "compress": {"wal_compression": "pglz"},
    "ckpt": {"max_wal_size": "4GB", "checkpoint_timeout": "15min"},
    "writer": {"wal_writer_delay": "10ms", "wal_writer_flush_after": "0", "wal_buffers": "64MB"},
}  # fmt: skip
STATS = """
SELECT pg_current_wal_insert_lsn()::text AS lsn, w.wal_records, w.wal_fpi, w.wal_bytes::bigint, w.wal_buffers_full,
       w.wal_write, w.wal_sync, w.wal_write_time, w.wal_sync_time, b.checkpoints_timed, b.checkpoints_req,
       b.buffers_checkpoint, b.buffers_backend, (SELECT count(*) FROM pg_ls_waldir()) AS segments
FROM pg_stat_wal AS w, pg_stat_bgwriter AS b
"""
PREFILL = (
    """INSERT INTO orders (order_id, tenant_id, plan_id, status, last_seq, process, process_version, finished_at)
       SELECT 'f-' || md5(g::text), 'acme', 'p', 'completed', 5, 'order', 1, now() FROM generate_series(1, $1) AS g""",
    """INSERT INTO outbox (id, order_id, position, event_id, event_type, seq_id, plan_id, payload, tenant_id)
       SELECT gen_random_uuid(), 'f-' || md5(g::text), 1, gen_random_uuid(), 'OrderCreated', 1, 'p',
              jsonb_build_object('order_id', 'f-' || md5(g::text), 'seq_id', 1), 'acme'
       FROM generate_series(1, $1) AS g""",
    """INSERT INTO decision_log (tenant_id, order_id, position, at, event_id, plan_id, seq, event_type, decision,
                                 prev_hash, hash)
       SELECT 'acme', 'f-' || md5(g::text), 1, now(), gen_random_uuid()::text, 'p', 1, 'OrderCreated', 'APPLY',
              sha256(g::text::bytea), sha256(md5(g::text)::bytea)
       FROM generate_series(1, $1) AS g""",
)
RECORD = re.compile(r"rmgr: (\S+)\s+len \(rec/tot\):\s*(\d+)/\s*(\d+),.*?desc: (\S+)(.*)$")
BLOCK = re.compile(r"blkref #\d+: rel \d+/\d+/(\d+)(?: fork (\w+))? blk \d+( FPW)?")


def lsn_int(lsn: str) -> int:
    high, low = lsn.split("/")
    return (int(high, 16) << 32) | int(low, 16)


def lsn_text(value: int) -> str:
    return f"{value >> 32:X}/{value & 0xFFFFFFFF:X}"


def oldest_segment_lsn(wal_dir: Path) -> int:
    """The start of the oldest segment in pg_wal (recycled segments are renamed forward, so the smallest name
    is the oldest kept one)."""
    names = sorted(p.name for p in wal_dir.iterdir() if re.fullmatch(r"[0-9A-F]{24}", p.name))
    name = names[0]
    return (int(name[8:16], 16) << 32) | (int(name[16:24], 16) * 16 * 1024 * 1024)


def waldump(pgdata: Path, start: int, end: int) -> tuple[dict[str, dict[str, int]], int, int]:
    """The WAL between `start` and `end` (from the oldest segment still kept) grouped by the relfilenode of a
    record's first block (or `<rmgr>` when it has none): records, bytes, full-page images and their bytes."""
    import pgserver

    start = max(start, oldest_segment_lsn(pgdata / "pg_wal"))
    binary = Path(pgserver.__file__).parent / "pginstall" / "bin" / "pg_waldump"
    command = [str(binary), "-p", str(pgdata / "pg_wal"), "-s", lsn_text(start), "-e", lsn_text(end)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    groups: dict[str, dict[str, int]] = collections.defaultdict(collections.Counter)
    for line in done.stdout.splitlines():
        record = RECORD.search(line)
        if record is None:
            continue
        rmgr, rec, tot, _desc, rest = record.groups()
        block = BLOCK.search(rest)
        key = f"<{rmgr}>" if block is None else block.group(1) + (f".{block.group(2)}" if block.group(2) else "")
        group = groups[key]
        group["records"] += 1
        group["bytes"] += int(tot)
        group["fpi_bytes"] += int(tot) - int(rec)
        group["fpi"] += rest.count(" FPW")
    return dict(groups), start, end


class WalProbes(Probes):
    """The probes, plus the cluster's WAL statistics over each phase (and, for A's phase, its WAL read back)."""

    def __init__(self, base: str, url: str, gateway_pid: int, pgdata: Path, *, checkpoint: bool) -> None:
        super().__init__(base, url, gateway_pid)
        self.pgdata, self.checkpoint = pgdata, checkpoint
        self._before: asyncio.Task[dict[str, Any]] | None = None
        self.phase = 0

    async def _stats(self, *, starting: bool = False) -> dict[str, Any]:
        conn = await asyncpg.connect(self.url)
        try:
            if self.checkpoint and starting:  # the phase starts a checkpoint cycle: full pages again
                await conn.execute("CHECKPOINT")
            return dict(await conn.fetchrow(STATS))  # type: ignore[arg-type]
        finally:
            await conn.close()

    def begin(self) -> None:
        self._before = asyncio.create_task(self._stats(starting=True))
        super().begin()

    async def end(self) -> dict[str, Any]:
        after = await self._stats()
        probed = await super().end()
        assert self._before is not None
        before = await self._before
        wal = {k: after[k] - before[k] for k in after if k != "lsn"}
        wal["lsn_bytes"] = lsn_int(after["lsn"]) - lsn_int(before["lsn"])
        probed["wal"] = {k: round(v, 1) if isinstance(v, float) else v for k, v in wal.items()}
        self.phase += 1
        if self.phase == 2:  # A's phase: the records, by relation
            probed["wal_by_relation"] = await self._by_relation(lsn_int(before["lsn"]), lsn_int(after["lsn"]))
        return probed

    async def _by_relation(self, start: int, end: int) -> dict[str, Any]:
        groups, first, last = await asyncio.to_thread(waldump, self.pgdata, start, end)
        conn = await asyncpg.connect(self.url)
        try:
            names = {
                str(r["relfilenode"]): r["relname"]
                for r in await conn.fetch("SELECT relfilenode, relname FROM pg_class WHERE relfilenode <> 0")
            }
        finally:
            await conn.close()
        named: dict[str, dict[str, int]] = {}
        for key, group in groups.items():
            node, _, fork = key.partition(".")
            name = names.get(node, key) + (f".{fork}" if fork else "")
            total = named.setdefault(name, collections.Counter())
            total.update(group)
        return {"dumped_bytes": last - first, "relations": dict(sorted(named.items(), key=lambda i: -i[1]["bytes"]))}


async def configure(admin: str, settings: dict[str, str] | None) -> dict[str, str]:
    """Apply a candidate's settings (None: leave the server as embedded.py started it); what SHOW then says."""
    conn = await asyncpg.connect(admin)
    try:
        if settings is not None:
            for name in WAL_SETTINGS:
                value = settings.get(name)
                if value is None:
                    await conn.execute(f"ALTER SYSTEM RESET {name}")
                else:
                    await conn.execute(f"ALTER SYSTEM SET {name} = '{value}'")
        return {name: await conn.fetchval(f"SHOW {name}") for name in WAL_SETTINGS}
    finally:
        await conn.close()


async def prefill(url: str, rows: int) -> None:
    """`rows` finished orders of A's tenant (outside its live-orders quota), an outbox row and a decision each:
    the indexes a long-running gateway's tables have, whose pages a checkpoint makes A's inserts write whole."""
    conn = await asyncpg.connect(url)
    try:
        for statement in PREFILL:
            await conn.execute(statement, rows)
        await conn.execute("VACUUM ANALYZE orders, outbox, decision_log")
    finally:
        await conn.close()


async def one_run(admin: str, pgdata: Path, args: argparse.Namespace) -> list[dict[str, Any]]:
    seconds = args.seconds
    name = f"bench_wal_{uuid.uuid4().hex[:8]}"
    url = await create_database(admin, name, migrate=True)
    if args.prefill:
        await prefill(url, args.prefill)
    a_keys, c_key = await make_keys(url)
    proc, base = start_gateway(url)
    try:
        assert proc.proc is not None
        probes = WalProbes(base, url, proc.proc.pid, pgdata, checkpoint=args.checkpoint)
        rows = await run_phases(base, a_keys, c_key, ["batches"], seconds, probes=probes)
    finally:
        proc.stop(15.0)
        await drop_database(admin, name)
    for row in rows:
        envelopes = row.get("a_envelopes_per_s", 0) * seconds
        if envelopes:
            row["wal"]["bytes_per_a_envelope"] = round(row["wal"]["lsn_bytes"] / envelopes)
    return rows


def candidate_run(candidate: str, args: argparse.Namespace) -> dict[str, Any]:
    """One candidate on a fresh embedded server: its settings applied, the server restarted, the two phases."""
    embedded, admin = start_embedded()
    try:
        asyncio.run(configure(admin, CANDIDATES[candidate]))
        embedded.stop_server()
        embedded.resume()
        shown = asyncio.run(configure(admin, None))
        started = time.strftime("%H:%M:%S", time.gmtime())
        rows = asyncio.run(one_run(admin, embedded.pgdata, args))
    finally:
        embedded.close()
    return {"candidate": candidate, "settings": shown, "started": started, "load1": os.getloadavg()[0], "rows": rows}


def summary(run: dict[str, Any]) -> str:
    base, batches = run["rows"]
    wal = batches["wal"]
    kinds = batches.get("by_kind", {})
    step = kinds.get("step", {})
    return (
        f"{run['candidate']}: C p50/p99 {base['p50_ms']}/{base['p99_ms']} -> {batches['p50_ms']}/{batches['p99_ms']}"
        f" (step p99 {step.get('p99_ms')}), A {batches.get('a_envelopes_per_s')} env/s, "
        f"WAL {wal.get('bytes_per_a_envelope')} B/env, fpi {wal['wal_fpi']}, ckpt {wal['checkpoints_req']}"
        f"+{wal['checkpoints_timed']}, waits {batches.get('pg_waits')}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--candidates", default="stock,default")
    parser.add_argument("--json", default=None)
    parser.add_argument("--checkpoint", action="store_true", help="a CHECKPOINT as each phase starts")
    parser.add_argument("--prefill", type=int, default=0, help="another tenant's orders in the tables first")
    args = parser.parse_args()
    names = args.candidates.split(",")
    runs = []
    for round_ in range(args.rounds):
        for candidate in names if round_ % 2 == 0 else list(reversed(names)):  # ABBA: neither always first
            run = candidate_run(candidate, args) | {"round": round_ + 1}
            print(summary(run), flush=True)
            runs.append(run)
            if args.json:
                meta = {"machine": platform.uname()._asdict(), "cpus": os.cpu_count(), "args": vars(args)}
                Path(args.json).write_text(json.dumps(meta | {"runs": runs}, indent=2, default=str))


if __name__ == "__main__":
    main()
