"""`nexus processes list|show|check` and `nexus tenants set-limit|list`."""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import sys
from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from nexus.auth.quotas import default_limits
from nexus.cli_common import add_common, missing_database, settings_from
from nexus.core.list_limits import DEFAULT_MAX_LIST_ITEMS
from nexus.core.process_compile import compile_definition
from nexus.core.process_model import CompiledProcess, DefinitionError
from nexus.core.quotas import Quota
from nexus.errors import ConfigurationError
from nexus.processes import builtin_sources, compile_sources, describe, dir_sources, mermaid
from nexus.settings import Settings
from nexus.store.database import Database
from nexus.store.queries import query


def configure_processes(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True)
    listing = sub.add_parser(
        "list", help="the definitions (package and NEXUS_PROCESS_DIR), and versions pinned in an existing database"
    )
    add_common(listing)
    listing.add_argument("--json", action="store_true")
    show = sub.add_parser("show", help="one definition, or its state diagram with --mermaid")
    add_common(show)
    show.add_argument("name")
    show.add_argument("--version", type=int, default=None)
    show.add_argument("--mermaid", action="store_true", help="print a Mermaid state diagram")
    check = sub.add_parser("check", help="validate a definition file; exit 1 with the error and its line")
    check.add_argument("file", type=Path)


def run_processes(args: argparse.Namespace) -> int:
    if args.action == "check":
        try:
            text = args.file.read_text(encoding="utf-8")
        except OSError as exc:
            print(f"{args.file}: {exc}", file=sys.stderr)
            return 1
        try:
            process = compile_definition(text)
        except DefinitionError as exc:
            print(f"{args.file}:{exc.line or 0}: {exc.reason}", file=sys.stderr)
            return 1
        print(f"{args.file}: ok: {process.name} v{process.version}, {len(process.steps)} steps")
        return 0
    settings = settings_from(args)
    try:
        known = definitions(settings)
    except ConfigurationError as exc:
        print(f"nexus processes: {exc}", file=sys.stderr)
        return 1
    if args.action == "list":
        if args.json:
            print(json.dumps([{**describe(p), "pinned_only": where == PINNED} for p, where in known], indent=2))
        elif not known:
            print("no process definitions (none shipped, none in NEXUS_PROCESS_DIR)")
        else:
            for p, where in known:
                about = p.definition.description or ""
                origin = "  (pinned in the database; no longer a file)" if where == PINNED else ""
                print(f"{p.name:<20} v{p.version:<4} {p.content_hash[:12]}  {len(p.steps)} steps  {about}{origin}")
        return 0
    matches = [p for p, _ in known if p.name == args.name and (args.version is None or p.version == args.version)]
    if not matches:
        print(f"no process {args.name!r}", file=sys.stderr)
        return 1
    chosen = max(matches, key=lambda p: p.version)
    print(mermaid(chosen) if args.mermaid else json.dumps(describe(chosen), indent=2), end="" if args.mermaid else "\n")
    return 0


FILE, PINNED = "file", "pinned"


def definitions(settings: Settings) -> list[tuple[CompiledProcess, str]]:
    """Every definition, by (name, version): the files (the package's and NEXUS_PROCESS_DIR's) and, where a
    database exists, the versions orders are pinned to that no file defines any more. Reads only: nothing is
    registered, and no database is created (the server registers the files when it starts)."""
    files = compile_sources([*builtin_sources(), *dir_sources(settings.process_dir)])
    found = {(p.name, p.version): (p, FILE) for p in files}
    if missing_database(settings) is None:
        for row in asyncio.run(_registered(settings)):
            if (row["name"], row["version"]) not in found:
                found[(row["name"], row["version"])] = (compile_definition(row["body"]), PINNED)
    return [found[key] for key in sorted(found)]


async def _registered(settings: Settings) -> list[Mapping[str, Any]]:
    db = await Database(settings).open(migrate=False)
    try:
        return list(await db.fetch(query("processes.sql", "all_processes")))
    finally:
        await db.close()


def configure_tenants(parser: argparse.ArgumentParser) -> argparse._SubParsersAction[argparse.ArgumentParser]:
    """The limits' subcommands; returns the subparsers so `nexus tenants` adds its others (nexus.tenants_cli)."""
    sub = parser.add_subparsers(dest="action", required=True)
    set_limit = sub.add_parser(
        "set-limit", help="a tenant's limit on an order's amount (major units) and/or on the items of any list"
    )
    add_common(set_limit)
    set_limit.add_argument("tenant")
    set_limit.add_argument("amount", nargs="?", default=None)
    number = functools.partial(set_limit.add_argument, type=int, default=None)
    number(
        "--max-list-items",
        help="the most items any list of a step's data may hold for this tenant (it lowers its process's "
        "max_list_items, never raises it); 0 removes the tenant's own",
    )
    for quota in Quota:
        number(
            f"--{quota.value.replace('_', '-')}",
            dest=f"quota_{quota.value}",
            help=f"this tenant's {quota.value} quota (NEXUS_QUOTA_{quota.value.upper()} otherwise); 0: no quota",
        )
    number(
        "--retention-s",
        help="how long this tenant's finished orders are kept, in seconds (docs/retention.md); 0 removes the "
        "tenant's own (NEXUS_RETENTION_S applies)",
    )
    listing = sub.add_parser("list", help="tenants with a limit of their own")
    add_common(listing)
    return sub


def _set_limit_refusal(args: argparse.Namespace, quotas: Mapping[Quota, int]) -> str | None:
    """Why `set-limit`'s arguments cannot be stored, or None."""
    if args.amount is None and args.max_list_items is None and args.retention_s is None and not quotas:
        return "give an amount, --max-list-items, --retention-s, a quota (--live-orders N ...), or several"
    if any(n < 0 for n in quotas.values()):
        return "a quota is a number of rows (0: no quota)"
    for flag, value in (("items", args.max_list_items), ("seconds", args.retention_s)):
        if value is not None and value < 0:
            return f"not a number of {flag}: {value}"
    return None


def _amount_of(args: argparse.Namespace) -> Decimal | None:
    """`set-limit`'s amount, None when not given; a negative one when it is not an amount."""
    if args.amount is None:
        return None
    try:
        amount = Decimal(args.amount)
    except InvalidOperation:
        return Decimal(-1)
    return amount if amount.is_finite() else Decimal(-1)


async def _print_limits(db: Database, settings: Settings) -> None:
    """`nexus tenants list`: the defaults, then each tenant's own limits."""
    print(
        f"default: max_order_amount {settings.default_max_order_amount}, "
        f"max_list_items {DEFAULT_MAX_LIST_ITEMS} (unless a process sets its own), "
        + ", ".join(f"{q.value} {limit}" for q, limit in default_limits(settings).items())
        + f", retention_s {settings.retention_s}"
    )
    for row in await db.fetch(query("processes.sql", "tenant_limits")):
        items = "" if row["max_list_items"] is None else f", max_list_items {row['max_list_items']}"
        own = "".join(f", {q.value} {row[f'quota_{q.value}']}" for q in Quota if row[f"quota_{q.value}"] is not None)
        kept = "" if row["retention_s"] is None else f", retention_s {row['retention_s']}"
        print(f"{row['tenant_id']}: max_order_amount {row['max_order_amount']}{items}{own}{kept}")


def run_tenants(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    amount: Decimal | None = None
    quotas: dict[Quota, int] = {}
    if args.action == "set-limit":
        quotas = _quotas_of(args)
        refusal = _set_limit_refusal(args, quotas)
        if refusal is not None:
            print(refusal, file=sys.stderr)
            return 1
        amount = _amount_of(args)
        if amount is not None and amount < 0:
            print(f"not an amount: {args.amount!r}", file=sys.stderr)
            return 1

    async def go() -> int:
        db = await Database(settings).open()
        try:
            if args.action != "set-limit":
                await _print_limits(db, settings)
                return 0
            if amount is not None:
                await db.execute(query("processes.sql", "set_tenant_limit"), args.tenant, str(amount))
                print(f"tenant {args.tenant}: max_order_amount {amount}")
            if args.max_list_items is not None:
                items = args.max_list_items or None
                kept = await db.fetchval(
                    query("processes.sql", "set_tenant_list_limit"),
                    args.tenant,
                    str(settings.default_max_order_amount),
                    items,
                )
                shown = items if items is not None else "its process's"
                print(f"tenant {args.tenant}: max_list_items {shown} (max_order_amount {kept})")
            if quotas:
                await _set_quotas(db, settings, args.tenant, quotas)
            if args.retention_s is not None:
                await _set_retention(db, settings, args.tenant, args.retention_s)
        finally:
            await db.close()
        return 0

    return asyncio.run(go())


def _quotas_of(args: argparse.Namespace) -> dict[Quota, int]:
    """The quotas `set-limit` was given (`--live-orders N` ...)."""
    given = {quota: getattr(args, f"quota_{quota.value}", None) for quota in Quota}
    return {quota: n for quota, n in given.items() if n is not None}


async def _set_quotas(db: Database, settings: Settings, tenant: str, quotas: Mapping[Quota, int]) -> None:
    """Store the tenant's own quotas (the others stay as they were) and say what they are now."""
    values = [quotas.get(quota) for quota in Quota]
    await db.execute(query("quotas.sql", "set_tenant_quotas"), tenant, str(settings.default_max_order_amount), *values)
    print(f"tenant {tenant}: " + ", ".join(f"{q.value} {n}" for q, n in quotas.items()))


async def _set_retention(db: Database, settings: Settings, tenant: str, seconds: int) -> None:
    """A tenant's own retention period (0: none, NEXUS_RETENTION_S applies); a tenant without a row gets the
    amount limit in force recorded beside it."""
    own = seconds or None
    kept = await db.fetchval(
        query("processes.sql", "set_tenant_retention"), tenant, str(settings.default_max_order_amount), own
    )
    shown = own if own is not None else f"the default ({settings.retention_s})"
    print(f"tenant {tenant}: retention_s {shown} (max_order_amount {kept})")
