"""`nexus tenants set-limit|list|recount|erase`: a tenant's limits (nexus.processes.cli), its usage counted again,
and its erasure.

nexus tenants recount [T]       count every tenant's usage (or T's) again from the rows (`nexus_recount_usage`,
                                migration 0045); print it as JSON, tenant by tenant
nexus tenants erase T --yes     revoke T's keys, wait the auth cache's TTL, sign an erasure record over its
                                decision-log chains, remove every row of T; print what left, table by table
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import TYPE_CHECKING

from nexus.cli_common import add_common, missing_database, settings_from, with_database
from nexus.processes.cli import configure_tenants as configure_limits
from nexus.processes.cli import run_tenants as run_limits

if TYPE_CHECKING:
    from nexus.store.database import Database


def configure(parser: argparse.ArgumentParser) -> None:
    sub = configure_limits(parser)
    recount = sub.add_parser(
        "recount", help="count every tenant's usage (or one's) again from the rows, for counts that drifted"
    )
    add_common(recount)
    recount.add_argument("tenant", nargs="?", default=None)
    erase = sub.add_parser("erase", help="remove every row of a tenant (keys revoked first); needs --yes")
    add_common(erase)
    erase.add_argument("tenant")
    erase.add_argument("--yes", action="store_true", help="yes, erase it: there is no undo")


def run(args: argparse.Namespace) -> int:
    if args.action == "recount":
        return _recount(args)
    if args.action != "erase":
        return run_limits(args)
    if not args.yes:
        print(f"nexus tenants erase: erasing {args.tenant!r} cannot be undone; add --yes to do it", file=sys.stderr)
        return 2
    settings = settings_from(args)
    missing = missing_database(settings)
    if missing is not None:
        print(f"nexus tenants erase: {missing}", file=sys.stderr)
        return 1
    from nexus.audit.erase import erase_tenant
    from nexus.audit.signing import load_signing_key
    from nexus.store.database import Database

    async def go() -> int:
        db = await Database(settings).open(migrate=False)
        try:
            report = await erase_tenant(
                db,
                args.tenant,
                load_signing_key(settings),
                cache_ttl_s=settings.auth_cache_ttl_s,
                progress=lambda line: print(line, file=sys.stderr, flush=True),
            )
        finally:
            await db.close()
        print(json.dumps(report.as_json(), indent=2))
        if report.remaining:
            print(f"nexus tenants erase: rows of {args.tenant!r} remain: {report.remaining}", file=sys.stderr)
            return 1
        return 0

    return asyncio.run(go())


def _recount(args: argparse.Namespace) -> int:
    """Count the usage again (`nexus_recount_usage`) and print it: {tenant: {quota: used}}."""
    settings = settings_from(args)
    missing = missing_database(settings)
    if missing is not None:
        print(f"nexus tenants recount: {missing}", file=sys.stderr)
        return 1
    from nexus.store.queries import query

    async def recount(db: Database) -> dict[str, dict[str, int]]:
        async with db.pool.acquire() as conn, conn.transaction():
            await conn.execute(query("quotas.sql", "recount_usage"), args.tenant)
            rows = await conn.fetch(query("quotas.sql", "usage_of"), args.tenant)
        usage: dict[str, dict[str, int]] = {}
        for row in rows:
            usage.setdefault(row["tenant_id"], {})[row["quota"]] = row["used"]
        return usage

    print(json.dumps(with_database(settings, recount), indent=2, sort_keys=True))
    return 0
