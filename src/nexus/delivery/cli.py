"""`nexus subscriptions`: add, list and disable webhook subscriptions; list and redrive dead deliveries.

    nexus subscriptions add NAME URL (--tenant T | --all-tenants) [--secret whsec_...] [--event-type T ...]
                                     [--format native|cloudevents]
    nexus subscriptions list
    nexus subscriptions disable ID_OR_NAME
    nexus subscriptions dead [--subscription ID]
    nexus subscriptions redrive OUTBOX_ID SUBSCRIPTION_ID

`add` needs `--tenant T` (that tenant's notifications) or `--all-tenants` (every tenant's): without
either it exits 2. Output is JSON, one document per command, so scripts can read it.
"""

from __future__ import annotations

import argparse
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from nexus.delivery import subscriptions as subs
from nexus.delivery.signing import generate_secret
from nexus.store.database import Database


def configure(parser: argparse.ArgumentParser) -> None:
    from nexus.cli_common import add_common

    add_common(parser)
    sub = parser.add_subparsers(dest="action", required=True)
    add = sub.add_parser("add", help="create a subscription (prints the secret if generated)")
    add.add_argument("name")
    add.add_argument("url")
    add.add_argument("--secret", default=None, help="whsec_<base64>; generated if absent")
    add.add_argument("--event-type", action="append", default=None, help="only these types (repeatable)")
    add.add_argument("--replace", action="store_true", help="update the subscription of the same name")
    # Whose notifications it receives is said, never assumed: every tenant's is a choice of its own.
    whose = add.add_mutually_exclusive_group(required=True)
    whose.add_argument("--tenant", default=None, help="receive this tenant's notifications only")
    whose.add_argument("--all-tenants", action="store_true", help="receive every tenant's notifications")
    add.add_argument("--format", default="native", choices=["native", "cloudevents"], help="body format")
    sub.add_parser("list", help="list subscriptions and their breaker state")
    disable = sub.add_parser("disable", help="stop delivering to a subscription (pending ones wait)")
    disable.add_argument("subscription", help="id or name")
    dead = sub.add_parser("dead", help="list dead deliveries")
    dead.add_argument("--subscription", type=int, default=None)
    dead.add_argument("--limit", type=int, default=100)
    redrive = sub.add_parser("redrive", help="send a dead delivery again")
    redrive.add_argument("outbox_id", type=uuid.UUID)
    redrive.add_argument("subscription_id", type=int)


def run(args: argparse.Namespace) -> int:
    from nexus.cli_common import run_json_action

    actions: dict[str, Callable[[Database], Awaitable[Any]]] = {
        "add": lambda db: _add(db, args),
        "list": lambda db: _list(db),
        "disable": lambda db: _disable(db, args.subscription),
        "dead": lambda db: subs.list_dead_deliveries(db, args.subscription, args.limit),
        "redrive": lambda db: subs.redrive_delivery(db, args.outbox_id, args.subscription_id),
    }

    return run_json_action(args, actions[args.action])


async def _add(db: Database, args: argparse.Namespace) -> dict[str, Any]:
    secret = args.secret or generate_secret()
    sub = await subs.add_subscription(
        db, args.name, args.url, secret, args.event_type, replace=args.replace, tenant_id=args.tenant, fmt=args.format
    )
    out = sub.as_json()
    if args.secret is None:
        out["secret"] = secret
    return out


async def _list(db: Database) -> list[dict[str, Any]]:
    return [s.as_json() for s in await subs.list_subscriptions(db)]


async def _disable(db: Database, which: str) -> dict[str, Any]:
    return (await subs.disable_subscription(db, which)).as_json()
