"""`nexus dlq`: list dead letters (the dead_letters table, the Kafka DLQ topic, and dead webhook
deliveries) and redrive one.

Two records exist because the two ingresses differ: the table is the durable, queryable record of every
dead letter (HTTP rejections, Kafka PARSE_ERROR / INVALID_EVENT / DATABASE_REJECTED, BUFFER_TIMEOUT), and
the DLQ topic carries the original record bytes for Kafka consumers downstream. Redrive works from the
table: the payload goes back to the main topic (so it takes the same path as any agent's step, ordered with
its order's other records), or with `--http` straight into `Gateway.submit`, as the HTTP API's redrive does.
Either way the row is marked redriven; the gateway decides afresh, so redriving twice is harmless.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import uuid
from typing import Any

from nexus.cli_common import add_common, settings_from
from nexus.delivery.subscriptions import list_dead_deliveries, redrive_delivery
from nexus.errors import AlreadyRedrivenError, NexusError, NotFoundError
from nexus.ingress.dead_letters import dead_letter_json
from nexus.kafka_io import EventProducer, StoredRecord, read_topic
from nexus.settings import Settings
from nexus.store.database import Database
from nexus.store.found import require_row
from nexus.store.queries import query


def configure(parser: argparse.ArgumentParser) -> None:
    add_common(parser)
    parser.add_argument("--kafka-bootstrap", default=None, help="broker (default: NEXUS_KAFKA_BOOTSTRAP)")
    parser.add_argument("--topic", default=None, help="main topic (default: NEXUS_KAFKA_TOPIC)")
    parser.add_argument("--dlq-topic", default=None, help="dead-letter topic (default: NEXUS_KAFKA_DLQ_TOPIC)")
    sub = parser.add_subparsers(dest="dlq_command", required=True)
    listing = sub.add_parser("list", help="list dead letters")
    listing.add_argument("--source", choices=("table", "kafka", "deliveries", "all"), default="all")
    listing.add_argument("--code", default=None, help="only this code (e.g. PARSE_ERROR)")
    listing.add_argument("--limit", type=int, default=100)
    listing.add_argument("--include-redriven", action="store_true", help="table rows already redriven too")
    listing.add_argument("--json", action="store_true", help="machine-readable output")
    redrive = sub.add_parser("redrive", help="send a dead_letters row's payload through the gateway again")
    redrive.add_argument("id", type=int, help="dead_letters id")
    redrive.add_argument("--http", action="store_true", help="submit via Gateway.submit instead of the topic")
    redrive.add_argument("--json", action="store_true", help="machine-readable output")
    again = sub.add_parser("redrive-delivery", help="send a dead webhook delivery again, with fresh attempts")
    again.add_argument("outbox_id", help="the notification (outbox id, its Idempotency-Key)")
    again.add_argument("subscription_id", type=int)


def run(args: argparse.Namespace) -> int:
    settings = settings_from(
        args, kafka_bootstrap=args.kafka_bootstrap, kafka_topic=args.topic, kafka_dlq_topic=args.dlq_topic
    )
    try:
        if args.dlq_command == "list":
            return asyncio.run(_list(settings, args))
        if args.dlq_command == "redrive-delivery":
            return asyncio.run(_redrive_delivery(settings, args))
        return asyncio.run(_redrive(settings, args))
    except NexusError as exc:
        print(f"nexus dlq: {exc.code.value}: {exc}")
        return 1


async def _list(settings: Settings, args: argparse.Namespace) -> int:
    table: list[dict[str, Any]] = []
    kafka: list[dict[str, Any]] = []
    deliveries: list[dict[str, Any]] = []
    if args.source in ("table", "deliveries", "all"):
        db = await Database(settings).open(migrate=False)
        try:
            if args.source != "deliveries":
                rows = await db.fetch(
                    query("api.sql", "dead_letters"), args.code, None, args.include_redriven, args.limit, 0, None
                )
                table = [dead_letter_json(r) for r in rows]
            if args.source in ("deliveries", "all"):
                deliveries = [_jsonable(d) for d in await list_dead_deliveries(db, limit=args.limit)]
        finally:
            await db.close()
    if args.source in ("kafka", "all"):
        records = await read_topic(
            settings.kafka_bootstrap, settings.kafka_dlq_topic, security=settings.kafka_security()
        )
        kafka = [_record_json(r) for r in records if args.code is None or r.headers.get("x-dlq-code") == args.code]
        kafka = kafka[: args.limit]
    if args.json:
        print(json.dumps({"table": table, "kafka": kafka, "deliveries": deliveries}, indent=2))
        return 0
    listings = (
        ("deliveries", f"dead webhook deliveries: {len(deliveries)}", deliveries, _delivery_lines),
        ("table", f"dead_letters table: {len(table)}", table, _table_lines),
        ("kafka", f"topic {settings.kafka_dlq_topic}: {len(kafka)}", kafka, _kafka_lines),
    )
    for source, title, rows, lines in listings:
        if args.source in (source, "all"):
            print(title)
            for row in rows:
                print("\n".join(lines(row)))
    return 0


def _delivery_lines(d: dict[str, Any]) -> list[str]:
    return [
        f"  {d['outbox_id']} sub={d['subscription_id']} order={d['order_id']} pos={d['position']} "
        f"attempts={d['attempts']} {d['dead_reason']}"
    ]


def _table_lines(t: dict[str, Any]) -> list[str]:
    redriven = " redriven" if t["redriven_at"] else ""
    return [
        f"  #{t['id']:<6} {t['source']:<6} {t['code']:<18} order={t['order_id']} "
        f"event={t['event_id']} {t['created_at']}{redriven}",
        f"          {t['error'][:150]}",
    ]


def _kafka_lines(k: dict[str, Any]) -> list[str]:
    return [
        f"  p{k['partition']}@{k['offset']:<6} {k['code']:<18} key={k['key']} "
        f"from {k['source_topic']}/p{k['source_partition']}@{k['source_offset']}",
        f"          {(k['error'] or '')[:150]}",
    ]


async def _redrive_delivery(settings: Settings, args: argparse.Namespace) -> int:
    db = await Database(settings).open(migrate=False)
    try:
        result = await redrive_delivery(db, uuid.UUID(args.outbox_id), args.subscription_id)
    finally:
        await db.close()
    print(json.dumps(result))
    return 0


def _jsonable(row: dict[str, Any]) -> dict[str, Any]:
    return {
        k: (v.isoformat() if hasattr(v, "isoformat") else str(v) if isinstance(v, uuid.UUID) else v)
        for k, v in row.items()
    }


async def _redrive(settings: Settings, args: argparse.Namespace) -> int:
    db = await Database(settings).open(migrate=False)
    try:
        if args.http:
            from nexus.gateway import Gateway
            from nexus.ingress.dead_letters import redrive_dead_letter
            from nexus.processes import register

            catalog = await register(db, settings.process_dir)
            gateway = Gateway(db, catalog=catalog, default_max_order_amount=settings.default_max_order_amount)
            outcome = await redrive_dead_letter(db, gateway, args.id)
            result: dict[str, Any] = {"dead_letter_id": args.id, "via": "gateway", "result": outcome.as_json()}
        else:
            result = await redrive_to_topic(db, settings, args.id)
    except (NotFoundError, AlreadyRedrivenError) as exc:
        print(f"nexus dlq: {exc.code.value}: {exc.message}", file=sys.stderr)
        return 1
    finally:
        await db.close()
    if args.json:
        print(json.dumps(result))
    elif result["via"] == "gateway":
        print(f"dead letter {args.id} redriven through the gateway: {result['result']['decision']}")
    else:
        print(
            f"dead letter {args.id} redriven to {result['topic']} partition {result['partition']} "
            f"offset {result['offset']}"
        )
    return 0


async def redrive_to_topic(db: Database, settings: Settings, dead_letter_id: int) -> dict[str, Any]:
    """Produce a dead letter's payload to the main topic (key = its order), await the ack, mark it redriven."""
    row = await require_row(
        db, query("api.sql", "dead_letter"), dead_letter_id, None, missing=f"no dead letter {dead_letter_id}"
    )
    # Claimed first (a primary key: a second redrive is ALREADY_REDRIVEN), withdrawn if the send fails.
    if await db.fetchrow(query("api.sql", "claim_redrive"), dead_letter_id, None) is None:
        raise AlreadyRedrivenError(f"dead letter {dead_letter_id} was already redriven")
    try:
        async with EventProducer.from_settings(settings, client_id="nexus-dlq-redrive") as producer:
            delivered = await producer.send(row["payload"].encode(), key=row["order_id"])
    except BaseException:
        await db.execute(query("api.sql", "withdraw_redrive"), dead_letter_id)
        raise
    await db.execute(query("api.sql", "record_redrive"), dead_letter_id, "REDRIVEN_TO_TOPIC", None)
    return {
        "dead_letter_id": dead_letter_id,
        "via": "kafka",
        "topic": delivered.topic,
        "partition": delivered.partition,
        "offset": delivered.offset,
    }


def _record_json(record: StoredRecord) -> dict[str, Any]:
    h = record.headers
    return {
        "partition": record.partition,
        "offset": record.offset,
        "key": record.key.decode("utf-8", "replace") if record.key is not None else None,
        "value": record.value.decode("utf-8", "replace") if record.value is not None else None,
        "code": h.get("x-dlq-code"),
        "error": h.get("x-dlq-error"),
        "source_topic": h.get("x-dlq-source-topic"),
        "source_partition": int(h["x-dlq-source-partition"]) if "x-dlq-source-partition" in h else None,
        "source_offset": int(h["x-dlq-source-offset"]) if "x-dlq-source-offset" in h else None,
    }
