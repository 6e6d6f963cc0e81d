"""The gateway's own commands: `serve` and `migrate`."""

from __future__ import annotations

import argparse
import asyncio
import logging

from nexus.cli_common import add_common, settings_from
from nexus.logging import setup_logging
from nexus.settings import unknown_variables

log = logging.getLogger(__name__)


def configure_serve(parser: argparse.ArgumentParser) -> None:
    add_common(parser)
    parser.add_argument("--http-host", default=None)
    parser.add_argument("--http-port", type=int, default=None)
    parser.add_argument("--kafka", action="store_true", help="also consume the Kafka topic")
    parser.add_argument("--no-dispatcher", action="store_true", help="do not deliver webhooks here")
    parser.add_argument(
        "--dispatcher-only",
        action="store_true",
        help="no HTTP API: only the background services (the webhook dispatcher, the saga executor, the buffer, "
        "deadline and approval sweepers, audit checkpoints, the NEXUS_METRICS_BIND listener; the Kafka consumer "
        "with --kafka)",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=None,
        help="HTTP processes sharing the port (default NEXUS_WORKERS, 1); background services run in the first",
    )


def run_serve(args: argparse.Namespace) -> int:
    from nexus.app import run_until_stopped

    settings = settings_from(args, http_host=args.http_host, http_port=args.http_port, workers=args.workers)
    settings.check_database()
    setup_logging(settings.log_level)
    warn_unknown_variables()
    if settings.workers > 1 and not args.dispatcher_only:  # a supervisor and N HTTP processes
        from nexus.workers import run_workers

        return run_workers(settings, dispatcher=not args.no_dispatcher, kafka=args.kafka)
    return run_until_stopped(
        settings,
        http=not args.dispatcher_only,
        dispatcher=not args.no_dispatcher,
        kafka=args.kafka,
        on_ready=lambda where: print(f"nexus serving at {where}", flush=True),
    )


def warn_unknown_variables() -> None:
    """One WARNING per `NEXUS_*` variable nobody reads, naming the nearest known one (a typo is the likely
    cause; other tools may use the prefix too, so it is not a refusal)."""
    for name, nearest in unknown_variables():
        log.warning(
            "unknown variable %s (nearest known: %s)",
            name,
            nearest,
            extra={"action": "unknown_variable", "variable": name, "nearest": nearest},
        )


def configure_migrate(parser: argparse.ArgumentParser) -> None:
    add_common(parser)


def run_migrate(args: argparse.Namespace) -> int:
    from nexus.store.database import Database

    async def go() -> None:
        db = Database(settings_from(args))
        await db.open(migrate=True)
        await db.close()

    asyncio.run(go())
    print("migrations applied")
    return 0
