"""`nexus orders show ID` (an order's timeline from the decision log) and `nexus approvals list|approve|deny`."""

from __future__ import annotations

import argparse
import asyncio
import getpass
import json
import uuid
from typing import Any

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
    show.add_argument("--tenant", default=None, help="the order's tenant (default: default)")
    show.add_argument("--json", action="store_true", help="machine-readable output (the history API's items)")


def run_orders(args: argparse.Namespace) -> int:
    tenant = args.tenant or "default"
    try:
        return asyncio.run(_show(settings_from(args), tenant, args.order_id, as_json=args.json))
    except NexusError as exc:
        # The tenant was not given: say which one was looked in, as the order may well be another's.
        where = f" (in tenant {tenant!r}, the default: pass --tenant T for another)" if args.tenant is None else ""
        print(f"nexus orders: {exc.code.value}: {exc}{where}")
        return 1


async def _show(settings: Settings, tenant_id: str, order_id: str, *, as_json: bool) -> int:
    db = await Database(settings).open(migrate=False)
    try:
        order = await db.fetchrow(query("api.sql", "order"), order_id, tenant_id)
        items = await order_history(db, tenant_id, order_id)
    finally:
        await db.close()
    if as_json:
        print(json.dumps({"order_id": order_id, "tenant": tenant_id, "items": items}, indent=2))
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


# --- nexus approvals ------------------------------------------------------------------------------------


def configure_approvals(parser: argparse.ArgumentParser) -> None:
    add_common(parser)
    parser.add_argument("--by", default=None, help="who answers, recorded in the decision log (default: login name)")
    sub = parser.add_subparsers(dest="approvals_command", required=True)
    listing = sub.add_parser("list", help="pending approvals, oldest first")
    listing.add_argument("--json", action="store_true")
    for name, text in (("approve", "apply the held step in order"), ("deny", "REJECTED with APPROVAL_DENIED")):
        one = sub.add_parser(name, help=text)
        one.add_argument("approval_id", type=uuid.UUID)
        one.add_argument("--json", action="store_true")
        expect = one.add_argument_group("expect", "what you saw in `list`: any that differs refuses the answer")
        expect.add_argument("--expect-event-id", type=uuid.UUID, default=None)
        expect.add_argument("--expect-data-sha256", default=None)
        expect.add_argument("--expect-process-version", type=int, default=None)
        expect.add_argument("--expect-seq-id", type=int, default=None)


def run_approvals(args: argparse.Namespace) -> int:
    try:
        return asyncio.run(_approvals(settings_from(args), args))
    except NexusError as exc:
        print(f"nexus approvals: {exc.code.value}: {exc}")
        return 1


async def _approvals(settings: Settings, args: argparse.Namespace) -> int:
    from nexus.gateway import Gateway
    from nexus.lifecycle.approvals import Approver, answer, pending
    from nexus.processes import register

    db = await Database(settings).open(migrate=False)
    try:
        # Whoever holds the database acts for every tenant (the API applies the approver key's tenant).
        by = args.by or _login_name()
        approver = Approver(by, None, actor="cli", actor_name=by)
        if args.approvals_command == "list":
            items = await pending(db, approver, limit=1000)
            if args.json:
                print(json.dumps({"approvals": items}, indent=2))
            elif not items:
                print("no pending approvals")
            for item in [] if args.json else items:
                expires = item["expires_at"] or "never"
                print(
                    f"{item['approval_id']}  {item['tenant_id']}/{item['order_id']}  seq {item['seq']} "
                    f"{item['event_type']}  data {json.dumps(item['data'])}  expires {expires}\n"
                    f"    event_id {item['event_id']}  data_sha256 {item['data_sha256']}  "
                    f"process_version {item['process_version']}  seq_id {item['seq_id']}"
                )
            return 0
        catalog = await register(db, settings.process_dir)
        gateway = Gateway(db, catalog=catalog, default_max_order_amount=settings.default_max_order_amount)
        outcome = await answer(
            gateway, args.approval_id, approver, approve=args.approvals_command == "approve", expect=_expect(args)
        )
    finally:
        await db.close()
    result = outcome.as_json()
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"{args.approval_id}: {result['decision']}{' ' + result['code'] if result['code'] else ''}")
    return 0


def _expect(args: argparse.Namespace) -> dict[str, Any] | None:
    """The `--expect-*` flags given, as an answer's `expect` (None: none given)."""
    given = {
        "event_id": args.expect_event_id, "data_sha256": args.expect_data_sha256,
        "process_version": args.expect_process_version, "seq_id": args.expect_seq_id,
    }  # fmt: skip
    expect = {k: v for k, v in given.items() if v is not None}
    return expect or None


def _login_name() -> str:
    """The operator's login name (the standard library's lookup), or "cli" when there is none."""
    try:
        return getpass.getuser()
    except OSError:
        return "cli"
