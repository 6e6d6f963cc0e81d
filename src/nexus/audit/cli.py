"""`nexus audit verify|checkpoint|export|trim` and `nexus report blocked`.

`audit verify` exits 0 on a clean log, 1 naming the first bad record (MODIFIED, DELETED, INSERTED,
REORDERED) or checkpoint (BAD_SIGNATURE, CHECKPOINT_CHAIN); with `--file` it reads an export or an archive
segment and needs no database; from the database it starts at the trims' anchors and checks the archive segments
they name (NEXUS_AUDIT_ARCHIVE_DIR). `audit export` writes JSON Lines with the public keys in its header (see
nexus.audit.verify); with `--before` an archive segment. `audit trim` runs one pass of nexus.audit.archive.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import sys
from pathlib import Path

from nexus.cli_common import add_common, settings_from, with_database
from nexus.errors import NexusError
from nexus.settings import Settings
from nexus.store.database import Database


def configure_audit(parser: argparse.ArgumentParser) -> None:
    add_common(parser)
    sub = parser.add_subparsers(dest="audit_command", required=True)
    verify = sub.add_parser("verify", help="recompute the chains and checkpoints; exit 1 naming the first fault")
    verify.add_argument("--order", default=None, help="only this order's chain")
    verify.add_argument("--file", type=Path, default=None, help="verify an export offline (no database)")
    verify.add_argument(
        "--public-key",
        action="append",
        default=None,
        help="trusted Ed25519 public key (hex or base64 of the 32 raw bytes); repeatable. Default: the keys "
        "named by the checkpoints (or the export's header)",
    )
    verify.add_argument("--json", action="store_true", help="machine-readable result")
    sub.add_parser("checkpoint", help="sign a checkpoint of the chain heads changed since the last one, now")
    export = sub.add_parser("export", help="write the log, its checkpoints and public keys as JSON Lines")
    export.add_argument("--out", type=Path, default=None, help="file (default: standard output)")
    export.add_argument("--order", default=None, help="only this order's chain")
    export.add_argument(
        "--before",
        default=None,
        help="an archive segment: each chain's records up to the last one before DATE (ISO 8601, or a duration "
        "back from now like 30d), with the checkpoints signed before it; needs --out",
    )
    export.add_argument("--tenant", default=None, help="with --before: only this tenant's chains")
    trim = sub.add_parser(
        "trim", help="one pass of the archive trim (NEXUS_AUDIT_ARCHIVE_DIR, NEXUS_RETENTION_S); prints what left"
    )
    trim.add_argument("--batch", type=int, default=1000, help="removed orders' chains per pass (default 1000)")


def run_audit(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    try:
        if args.audit_command == "verify":
            return _verify(settings, args)
        if args.audit_command == "checkpoint":
            return asyncio.run(_checkpoint(settings))
        if args.audit_command == "trim":
            return asyncio.run(_trim(settings, args.batch))
        if args.before is not None:
            return asyncio.run(_export_before(settings, args))
        return asyncio.run(_export(settings, args))
    except NexusError as exc:
        print(f"nexus audit: {exc.code.value}: {exc}", file=sys.stderr)
        return 2


def _trusted(values: list[str] | None) -> set[bytes] | None:
    if not values:
        return None
    import base64

    keys = set()
    for v in values:
        try:
            raw = bytes.fromhex(v)
        except ValueError:
            raw = base64.b64decode(v)
        keys.add(raw)
    return keys


def _verify(settings: Settings, args: argparse.Namespace) -> int:
    from nexus.audit.archive import load_trimmed, verify_trimmed
    from nexus.audit.verify import read_file

    trusted = _trusted(args.public_key)
    if args.file is not None:
        result = read_file(args.file).verify(trusted, args.order)
    else:
        loaded = with_database(settings, lambda db: load_trimmed(db, args.order), migrate=False)
        result = verify_trimmed(loaded, settings.audit_archive_dir, trusted=trusted, complete=not args.order)
    if args.json:
        f = result.finding
        print(
            json.dumps(
                {
                    "ok": result.ok,
                    "records": result.records,
                    "chains": result.chains,
                    "checkpoints": result.checkpoints,
                    "fault": None
                    if f is None
                    else {
                        "kind": f.fault.value,
                        "tenant_id": f.tenant_id,
                        "order_id": f.order_id,
                        "position": f.position,
                        "record_id": f.record_id,
                        "detail": f.detail,
                    },
                }
            )
        )
    elif result.finding is None:
        print(f"ok: {result.records} records in {result.chains} chains, {result.checkpoints} checkpoints verified")
    else:
        print(f"FAILED: {result.finding.describe()}")
    return 0 if result.ok else 1


async def _trim(settings: Settings, batch: int) -> int:
    from nexus.audit.archive import trim_log

    db = await Database(settings).open(migrate=False)
    try:
        report = await trim_log(
            db.pool, archive_dir=settings.audit_archive_dir, retention_s=settings.retention_s, batch=max(1, batch)
        )
    finally:
        await db.close()
    print(json.dumps(report.as_json()))
    return 0


async def _export_before(settings: Settings, args: argparse.Namespace) -> int:
    from nexus.audit.api import _BadParameter
    from nexus.audit.archive import export_before

    if args.out is None:
        print("nexus audit export: --before writes a segment file: give --out FILE", file=sys.stderr)
        return 2
    try:
        before = parse_since_arg(args.before, dt.datetime.now(dt.UTC))
    except _BadParameter as exc:
        before = None
        print(f"nexus audit export: {exc}", file=sys.stderr)
    if before is None:
        return 2
    db = await Database(settings).open(migrate=False)
    try:
        n = await export_before(db, args.out, before, args.tenant)
    finally:
        await db.close()
    print(f"{n} records before {before.isoformat()} written to {args.out} (a segment: verify it with --file)")
    return 0


async def _checkpoint(settings: Settings) -> int:
    from nexus.audit.signing import load_signing_key, write_checkpoint

    key = load_signing_key(settings)
    db = await Database(settings).open(migrate=False)
    try:
        checkpoint = await write_checkpoint(db, key)
    finally:
        await db.close()
    if checkpoint is None:
        print("no chain changed since the last checkpoint")
    else:
        print(f"checkpoint {checkpoint.id}: {len(checkpoint.heads)} heads, key {checkpoint.key_id}")
    return 0


async def _export(settings: Settings, args: argparse.Namespace) -> int:
    from nexus.audit.verify import load, write_export

    db = await Database(settings).open(migrate=False)
    try:
        records, checkpoints, erasures = await load(db, args.order)
    finally:
        await db.close()
    if args.out is None:
        n = write_export(sys.stdout, records, checkpoints, erasures)
    else:
        with args.out.open("w", encoding="utf-8") as out:
            n = write_export(out, records, checkpoints, erasures)
        print(f"{n} records and {len(checkpoints)} checkpoints written to {args.out}")
    return 0


def configure_report(parser: argparse.ArgumentParser) -> None:
    add_common(parser)
    sub = parser.add_subparsers(dest="report_command", required=True)
    blocked = sub.add_parser("blocked", help="the blocked actions: steps the gateway REJECTED")
    blocked.add_argument("--since", default=None, help="ISO 8601 timestamp, or a duration like 24h, 30m, 7d")
    blocked.add_argument("--tenant", default=None)
    blocked.add_argument("--order", default=None)
    blocked.add_argument("--plan", default=None)
    blocked.add_argument("--code", default=None)
    blocked.add_argument("--limit", type=int, default=50, help="recent items listed (default 50)")
    blocked.add_argument("--format", choices=("table", "json", "html"), default="table")
    blocked.add_argument("--out", type=Path, default=None, help="file (default: standard output)")


def parse_since_arg(value: str | None, now: dt.datetime) -> dt.datetime | None:
    """An ISO 8601 timestamp, or a duration back from now: 90s, 30m, 24h, 7d."""
    from nexus.audit.api import parse_since

    if not value:
        return None
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    if value[-1] in units and value[:-1].isdigit():
        return now - dt.timedelta(seconds=int(value[:-1]) * units[value[-1]])
    return parse_since(value)


def run_report(args: argparse.Namespace) -> int:
    from nexus.audit.api import _BadParameter

    settings = settings_from(args)
    try:
        since = parse_since_arg(args.since, dt.datetime.now(dt.UTC))
    except _BadParameter as exc:
        print(f"nexus report: {exc}", file=sys.stderr)
        return 2
    try:
        text = asyncio.run(_report(settings, args, since))
    except NexusError as exc:
        print(f"nexus report: {exc.code.value}: {exc}", file=sys.stderr)
        return 2
    if args.out is None:
        sys.stdout.write(text)
    else:
        args.out.write_text(text, encoding="utf-8")
        print(f"report written to {args.out}")
    return 0


async def _report(settings: Settings, args: argparse.Namespace, since: dt.datetime | None) -> str:
    from nexus.audit.report import Filters, blocked_actions, blocked_summary, render_html, render_table

    filters = Filters(tenant=args.tenant, order=args.order, plan=args.plan, code=args.code, since=since)
    db = await Database(settings).open(migrate=False)
    try:
        summary = await blocked_summary(db, filters)
        items, _ = await blocked_actions(db, filters, limit=max(1, args.limit))
    finally:
        await db.close()
    if args.format == "json":
        return json.dumps({**summary, "items": items, "filters": filters.as_json()}, indent=2) + "\n"
    if args.format == "html":
        return render_html(summary, items, filters, dt.datetime.now(dt.UTC))
    return render_table(summary, items) + "\n"
