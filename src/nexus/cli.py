"""Routing of a command line to a subcommand module, and the gateway's own commands.

Each subcommand lives in a module exposing `configure(parser)` and `run(args) -> int` (or
`configure_<name>` / `run_<name>`). The full `nexus` command (gateway and lab) is assembled outside this
package, from `GATEWAY_COMMANDS` and its own table; `python -m nexus.cli` runs the
gateway's commands alone.

The common flags (`--data-dir`, `--database-url`, `--log-level`) are taken out of the line wherever they
stand (before the command, after it, after a subcommand) and set on the parsed arguments, so every level
accepts them. Commands that read or administer an existing database (`READS_DATABASE`) never create one: with
no PostgreSQL URL and no embedded data directory they say where they looked and exit 1.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Mapping
from pathlib import Path

from nexus.cli_common import COMMON_FLAGS, missing_database, settings_from
from nexus.errors import ConfigurationError

# name -> (module, one-line help)
Commands = Mapping[str, tuple[str, str]]

# Commands that read or administer the rows of a database that must exist already (a server made it).
_ADMIN_COMMANDS: dict[str, tuple[str, str]] = {
    "dlq": ("nexus.dlq", "list and redrive dead letters"),
    "subscriptions": ("nexus.delivery.cli", "manage webhook subscriptions"),
    "tenants": ("nexus.tenants_cli", "per-tenant limits (set-limit, list) and erasure (erase)"),
    "audit": ("nexus.audit.cli", "verify, checkpoint and export the hash-chained decision log"),
    "report": ("nexus.audit.cli", "reports from the decision log: `nexus report blocked`"),
    "keys": ("nexus.auth.cli", "create, list and revoke API keys"),
    "sagas": ("nexus.saga.cli", "list sagas by status, show one, redrive an escalated or failed one"),
    "orders": ("nexus.lifecycle.cli", "an order's timeline from the decision log: `nexus orders show ID`"),
    "approvals": ("nexus.lifecycle.cli", "steps held for approval: list, approve, deny"),
}

GATEWAY_COMMANDS: dict[str, tuple[str, str]] = {
    "serve": ("nexus.commands", "run the gateway: HTTP API, dispatcher, optional Kafka consumer"),
    "migrate": ("nexus.commands", "apply the database migrations and exit"),
    "processes": ("nexus.processes.cli", "list, show and check process definitions"),
    "db": ("nexus.db_cli", "the database: stats per table, a streaming standby, its promotion"),
    **_ADMIN_COMMANDS,
}

# The administering commands, and the lab's `check` (it reads what a run left in the database).
READS_DATABASE = frozenset({*_ADMIN_COMMANDS, "check"})


def split_common_flags(argv: list[str]) -> tuple[list[str], dict[str, str]]:
    """`argv` without the common flags, and their values by destination (`--flag value` or `--flag=value`,
    the last one wins). A flag with no value is left for argparse to refuse."""
    rest: list[str] = []
    found: dict[str, str] = {}
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            rest.extend(argv[i:])
            break
        flag, eq, value = arg.partition("=")
        dest = COMMON_FLAGS.get(flag)
        if dest is not None and eq:
            found[dest] = value
            i += 1
        elif dest is not None and i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            found[dest] = argv[i + 1]
            i += 2
        else:
            rest.append(arg)
            i += 1
    return rest, found


class CommandUnavailable(SystemExit):
    """A subcommand's module failed to import or lacks `configure`/`run`: said aloud, never skipped."""


def build_parser(commands: Commands, only: str | None = None) -> argparse.ArgumentParser:
    """The parser; only the module of `only` is imported (the agent's pulls in LangGraph, ~0.4 s), so
    `nexus serve` and the rest start fast. The others appear in `--help` by name and help text."""
    parser = argparse.ArgumentParser(
        prog="nexus",
        description="Nexus Event Gateway",
        epilog="--data-dir, --database-url and --log-level are accepted before or after any subcommand.",
    )
    add_common_help(parser)
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (module_name, help_text) in commands.items():
        if name != only:
            sub.add_parser(name, help=help_text)
            continue
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise CommandUnavailable(
                f"nexus {name}: cannot import module {module_name}: {type(exc).__name__}: {exc}"
            ) from exc
        configure = getattr(module, f"configure_{name}", None) or getattr(module, "configure", None)
        runner = getattr(module, f"run_{name}", None) or getattr(module, "run", None)
        if configure is None or runner is None:
            raise CommandUnavailable(f"nexus {name}: module {module_name} has no configure()/run()")
        command = sub.add_parser(name, help=help_text, description=help_text)
        configure(command)
        command.set_defaults(_run=runner)
    return parser


def add_common_help(parser: argparse.ArgumentParser) -> None:
    """The common flags in the top level's help (they are taken out of the line before parsing)."""
    group = parser.add_argument_group("common flags (anywhere on the line)")
    group.add_argument("--data-dir", metavar="DIR", help="embedded PostgreSQL data (NEXUS_DATA_DIR, default .nexus/)")
    group.add_argument("--database-url", metavar="URL", help="PostgreSQL URL (NEXUS_DATABASE_URL; unset: embedded)")
    group.add_argument("--log-level", metavar="LEVEL", help="DEBUG, INFO, WARNING (NEXUS_LOG_LEVEL, default INFO)")


def main(argv: list[str] | None = None, commands: Commands = GATEWAY_COMMANDS) -> int:
    argv = sys.argv[1:] if argv is None else argv
    argv, common = split_common_flags(argv)
    args = build_parser(commands, argv[0] if argv and argv[0] in commands else None).parse_args(argv)
    for dest, value in common.items():
        setattr(args, dest, Path(value) if dest == "data_dir" else value)
    try:
        if args.command in READS_DATABASE:
            missing = missing_database(settings_from(args))
            if missing is not None:
                print(f"nexus {args.command}: {missing}", file=sys.stderr)
                return 1
        code: int = args._run(args)
    except KeyboardInterrupt:
        return 130
    except ConfigurationError as exc:
        # A bad setting is the operator's to fix: say which, without a traceback (argparse's exit code).
        print(f"nexus {args.command}: configuration error: {exc}", file=sys.stderr)
        return 2
    return code


if __name__ == "__main__":
    sys.exit(main())
