"""`nexus sagas`: list sagas (by status) and redrive an escalated or failed one.

    nexus sagas list [--status ESCALATED] [--retrying] [--tenant T] [--limit N]
    nexus sagas show ORDER_ID [--tenant T]
    nexus sagas redrive ORDER_ID [--tenant T]

A saga is its order's (one per order), so it is named by the order id. Output is JSON.
"""

from __future__ import annotations

import argparse
from collections.abc import Awaitable, Callable
from typing import Any

from nexus.core.saga import SagaStatus
from nexus.errors import NotFoundError
from nexus.saga import admin
from nexus.store.database import Database


def configure(parser: argparse.ArgumentParser) -> None:
    from nexus.cli_common import add_common

    add_common(parser)
    sub = parser.add_subparsers(dest="action", required=True)
    listing = sub.add_parser("list", help="list sagas, newest first")
    listing.add_argument("--status", default=None, choices=[s.value for s in SagaStatus])
    listing.add_argument(
        "--retrying", action="store_true", help="only open sagas whose current call failed and has not succeeded yet"
    )
    listing.add_argument("--tenant", default=None)
    listing.add_argument("--limit", type=int, default=100)
    show = sub.add_parser("show", help="one order's saga and its steps")
    show.add_argument("order_id")
    show.add_argument("--tenant", default="default")
    redrive = sub.add_parser("redrive", help="retry an ESCALATED saga's steps or a FAILED saga's compensations")
    redrive.add_argument("order_id")
    redrive.add_argument("--tenant", default="default")


def run(args: argparse.Namespace) -> int:
    from nexus.cli_common import run_json_action

    async def show(db: Database) -> Any:
        view = await admin.order_saga(db, args.tenant, args.order_id)
        if view is None:
            raise NotFoundError(f"no saga for order {args.order_id!r}")
        return view

    async def redrive(db: Database) -> Any:
        return {"order_id": args.order_id, "status": await admin.redrive(db, args.tenant, args.order_id)}

    actions: dict[str, Callable[[Database], Awaitable[Any]]] = {
        "list": lambda db: admin.list_sagas(db, args.status, args.tenant, args.limit, retrying=args.retrying),
        "show": show,
        "redrive": redrive,
    }

    return run_json_action(args, actions[args.action])
