"""`nexus keys`: create, list and revoke API keys, against the database directly.

nexus keys create --tenant T --role R [--role R2 | --role R1,R2] [--name N]
    prints the key ALONE on the last line of stdout (shown once; only its SHA-256 is stored)
nexus keys list          one key per line, starting with its id
nexus keys revoke ID     refused by every gateway process within a second
"""

from __future__ import annotations

import argparse
import sys

from nexus.auth import keys
from nexus.auth.roles import parse_roles
from nexus.errors import NexusError
from nexus.store.database import Database


def configure(parser: argparse.ArgumentParser) -> None:
    from nexus.cli_common import add_common

    add_common(parser)
    sub = parser.add_subparsers(dest="action", required=True)
    create = sub.add_parser("create", help="create a key; prints it alone on the last line")
    create.add_argument("--tenant", required=True, help="the key's tenant, or '*' for every tenant")
    create.add_argument(
        "--role", action="append", required=True, help="agent, operator, approver, admin (repeatable or a,b)"
    )
    create.add_argument("--name", default=None)
    sub.add_parser("list", help="one key per line: id, tenant, roles, name, state")
    revoke = sub.add_parser("revoke", help="revoke a key by id")
    revoke.add_argument("id", type=int)


def run(args: argparse.Namespace) -> int:
    from nexus.cli_common import settings_from, with_database

    async def act(db: Database) -> list[str]:
        if args.action == "create":
            record, key = await keys.create_key(db, args.tenant, parse_roles(args.role), args.name)
            return [f"created key {record.line()}", key]
        if args.action == "list":
            return [k.line() for k in await keys.list_keys(db)]
        record = await keys.revoke_key(db, args.id)
        return [f"revoked key {record.line()}"]

    try:
        lines = with_database(settings_from(args), act)
    except (NexusError, ValueError) as exc:
        print(f"nexus keys: {exc}", file=sys.stderr)
        return 1
    for line in lines:
        print(line)
    return 0
