"""`nexus db`: the database's own tools.

    nexus db stats                                   approximate rows and bytes per table, replication, and
                                                     retention (the oldest finished order's age, docs/retention.md)
    nexus db standby --primary URL --data-dir D [--name N] [--port P] [--host H]
                                                     make a streaming replica of a primary and run it
    nexus db promote --data-dir D                    promote a standby to a primary

`standby` copies the primary (`pg_basebackup`, a replication slot named after the standby) into `D/pgdata`
the first time, then runs the server in the foreground until SIGTERM or SIGINT (fast shutdown). Its name
(`--name`, default `nexus_standby`) is the `application_name` a primary lists in `NEXUS_SYNC_STANDBY`.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
from pathlib import Path
from typing import Any

from nexus.store.database import Database
from nexus.store.queries import query
from nexus.store.standby import DEFAULT_PORT, Standby, make_standby, promote, run_standby


def configure(parser: argparse.ArgumentParser) -> None:
    from nexus.cli_common import add_common

    add_common(parser)
    sub = parser.add_subparsers(dest="action", required=True)
    sub.add_parser("stats", help="approximate rows and bytes per table, and the standbys streaming")
    standby = sub.add_parser("standby", help="make a streaming replica of a primary (first run) and run it")
    standby.add_argument("--primary", required=True, metavar="URL", help="the primary's PostgreSQL URL")
    standby.add_argument("--name", default="nexus_standby", help="application_name (NEXUS_SYNC_STANDBY names it)")
    standby.add_argument("--port", type=int, default=DEFAULT_PORT, help="port of its socket (and TCP address)")
    standby.add_argument("--host", default="", help="TCP address to listen on too (default: Unix socket only)")
    sub.add_parser("promote", help="promote the standby in --data-dir to a primary")


def run(args: argparse.Namespace) -> int:
    if args.action == "stats":
        from nexus.cli_common import missing_database, run_json_action, settings_from

        missing = missing_database(settings_from(args))
        if missing is not None:
            print(f"nexus db stats: {missing}", file=sys.stderr)
            return 1
        return run_json_action(args, stats)
    data_dir: Path | None = getattr(args, "data_dir", None)
    if data_dir is None:
        print(f"nexus db {args.action}: --data-dir DIR is required (the standby's own directory)", file=sys.stderr)
        return 2
    if args.action == "promote":
        promote(data_dir)
        print(json.dumps({"promoted": str(data_dir)}))
        return 0
    target = Standby(data_dir, port=args.port, host=args.host)
    if not (target.pgdata / "PG_VERSION").exists():
        make_standby(args.primary, target, args.name)
    return _serve(target)


def _serve(target: Standby) -> int:
    server = run_standby(target)
    print(json.dumps({"standby": str(target.data_dir), "url": target.url(), "pid": server.pid}), flush=True)

    def stop(signum: int, frame: Any) -> None:
        server.send_signal(signal.SIGINT)  # PostgreSQL's fast shutdown

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    return server.wait()


async def stats(db: Database) -> dict[str, Any]:
    tables = await db.fetch(query("db.sql", "table_stats"))
    replication = await db.fetch(query("db.sql", "replication"))
    from nexus.retention.remover import RetentionRemover, registered_catalog

    retention = await RetentionRemover(db, db.settings, await registered_catalog(db)).stats()
    return {
        "retention": retention,
        "tables": [
            {"table": r["table_name"], "approx_rows": r["approx_rows"], "bytes": r["total_bytes"]} for r in tables
        ],
        "replication": [dict(r) for r in replication],
    }
