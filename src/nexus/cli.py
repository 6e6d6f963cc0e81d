"""The `nexus` command. Each subcommand lives in its own module exposing `configure(parser)` and
`run(args) -> int`; this file only routes."""

from __future__ import annotations

import argparse
import asyncio
import importlib
import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nexus.settings import Settings

# name -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "serve": ("nexus.cli", "run the gateway: HTTP API, dispatcher, optional Kafka consumer"),
    "migrate": ("nexus.cli", "apply the database migrations and exit"),
    "demo": ("nexus.demo", "start the embedded stack, send misbehaving plans, show what the gateway decided"),
    "agent": ("nexus.agent.cli", "run the LangGraph agent: generate plans and publish their steps"),
    "sink": ("nexus.sink", "run a webhook receiver that verifies, records and injects faults"),
    "check": ("nexus.checker", "check an agent report against PostgreSQL and the sink's log"),
    "chaos": ("nexus.chaos", "run chaos scenarios on real processes and check the invariants"),
    "bench": ("nexus.bench", "measure throughput and latency"),
    "dlq": ("nexus.dlq", "list and redrive dead letters"),
    "subscriptions": ("nexus.delivery.cli", "manage webhook subscriptions"),
    "keys": ("nexus.auth.cli", "create, list and revoke API keys"),
}


def add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data-dir", type=Path, default=None, help="embedded PostgreSQL data (default .nexus/)")
    parser.add_argument("--database-url", default=None, help="PostgreSQL URL (default: NEXUS_DATABASE_URL)")
    parser.add_argument("--log-level", default=None, help="DEBUG, INFO, WARNING (default INFO)")


def settings_from(args: argparse.Namespace, **extra: Any) -> Settings:
    return Settings.from_env(
        data_dir=getattr(args, "data_dir", None),
        database_url=getattr(args, "database_url", None),
        log_level=getattr(args, "log_level", None),
        **extra,
    )


def configure_serve(parser: argparse.ArgumentParser) -> None:
    add_common(parser)
    parser.add_argument("--http-host", default=None)
    parser.add_argument("--http-port", type=int, default=None)
    parser.add_argument("--kafka", action="store_true", help="also consume the Kafka topic")
    parser.add_argument("--no-dispatcher", action="store_true", help="do not deliver webhooks here")
    parser.add_argument("--dispatcher-only", action="store_true", help="only deliver webhooks (no HTTP API)")


def run_serve(args: argparse.Namespace) -> int:
    from nexus.app import ServiceFailed, serve

    settings = settings_from(args, http_host=args.http_host, http_port=args.http_port)
    setup_logging(settings.log_level)
    with asyncio.Runner(loop_factory=event_loop_factory()) as runner:
        try:
            runner.run(
                serve(
                    settings,
                    http=not args.dispatcher_only,
                    dispatcher=not args.no_dispatcher,
                    kafka=args.kafka,
                    on_ready=lambda where: print(f"nexus serving at {where}", flush=True),
                )
            )
        except ServiceFailed as exc:
            print(f"nexus serve: {exc}", file=sys.stderr)
            return 1
    return 0


def event_loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop where available: the HTTP and PostgreSQL I/O of the gateway is its hot path."""
    try:
        import uvloop
    except ImportError:
        return None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


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


def setup_logging(level: str) -> None:
    logging.basicConfig(
        level=level.upper(),
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
        stream=sys.stderr,
    )
    # pgserver narrates every pg_ctl call at INFO; keep its warnings only.
    logging.getLogger("pgserver").setLevel(logging.WARNING)
    # httpx logs every request's full URL at INFO: webhook URLs may carry tokens (issue 11).
    logging.getLogger("httpx").setLevel(logging.WARNING)


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser; with `only`, just that subcommand's module is imported (the agent's pulls in
    LangGraph, ~0.4 s), so `nexus serve` and the rest start fast."""
    parser = argparse.ArgumentParser(prog="nexus", description="Nexus Event Gateway")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (module_name, help_text) in COMMANDS.items():
        if only is not None and name != only:
            sub.add_parser(name, help=help_text)
            continue
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError:
            continue
        configure = getattr(module, f"configure_{name}", None) or getattr(module, "configure", None)
        runner = getattr(module, f"run_{name}", None) or getattr(module, "run", None)
        if configure is None or runner is None:
            continue
        command = sub.add_parser(name, help=help_text, description=help_text)
        configure(command)
        command.set_defaults(_run=runner)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser(argv[0] if argv and argv[0] in COMMANDS else None).parse_args(argv)
    try:
        code: int = args._run(args)
    except KeyboardInterrupt:
        return 130
    return code


if __name__ == "__main__":
    sys.exit(main())
