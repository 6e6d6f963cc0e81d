"""`nexus orders show ID`: an order's state and its decisions as a timeline, from the decision log."""

from __future__ import annotations

import argparse
import asyncio
import json

from nexus.cli_common import add_common, settings_from
from nexus.errors import NexusError
from nexus.lifecycle.history import order_history
from nexus.settings import Settings
from nexus.store.database import Database
from nexus.store.queries import query


def configure_orders(parser: argparse.ArgumentParser) -> None:
    add_common(parser)
    sub = parser.add_subparsers(dest="orders_command", required=True)
    show = sub.add_parser("show", help="an order's state and every decision taken for it, oldest first")
    show.add_argument("order_id")
    show.add_argument("--json", action="store_true", help="machine-readable output (the history API's items)")


def run_orders(args: argparse.Namespace) -> int:
    try:
        return asyncio.run(_show(settings_from(args), args.order_id, as_json=args.json))
    except NexusError as exc:
        print(f"nexus orders: {exc.code.value}: {exc}")
        return 1


async def _show(settings: Settings, order_id: str, *, as_json: bool) -> int:
    db = await Database(settings).open(migrate=False)
    try:
        order = await db.fetchrow(query("api.sql", "order"), order_id)
        items = await order_history(db, order_id)
    finally:
        await db.close()
    if as_json:
        print(json.dumps({"order_id": order_id, "items": items}, indent=2))
        return 0
    if order is not None:
        print(f"order {order_id}  plan {order['plan_id']}  status {order['status']}  last_seq {order['last_seq']}")
    else:
        print(f"order {order_id}  (not created: only buffered or refused steps)")
    for item in items:
        seq = "-" if item["seq"] is None else str(item["seq"])
        code = f" {item['code']}" if item["code"] else ""
        check = f" [{item['check']}]" if item["check"] else ""
        line = f"{item['at']}  seq {seq:>3}  {item['event_type'] or '-':<20} {item['decision']}{code}{check}"
        if item["message"]:
            line += f"  -- {item['message']}"
        if item["notification_id"]:
            line += f"  (notification {item['notification_id']})"
        print(line)
    return 0
