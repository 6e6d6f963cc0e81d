"""`nexus audit verify|checkpoint|export` and `nexus report blocked`.

`audit verify` exits 0 on a clean log, 1 naming the first bad record (MODIFIED, DELETED, INSERTED,
REORDERED) or checkpoint (BAD_SIGNATURE, CHECKPOINT_CHAIN); with `--file` it reads an export and needs no
database. `audit export` writes JSON Lines with the public keys in its header (see nexus.audit.verify).
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


def run_audit(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    try:
        if args.audit_command == "verify":
            return _verify(settings, args)
        if args.audit_command == "checkpoint":
            return asyncio.run(_checkpoint(settings))
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
    from nexus.audit.verify import load, read_export, verify

    trusted = _trusted(args.public_key)
    if args.file is not None:
        records, checkpoints, header_keys, erasures = read_export(args.file)
        if args.order:
            records = [r for r in records if r.order_id == args.order]
        trusted = trusted or header_keys
    else:
        records, checkpoints, erasures = with_database(settings, lambda db: load(db, args.order), migrate=False)
    result = verify(records, checkpoints, trusted=trusted, complete=not args.order, erasures=erasures)
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
